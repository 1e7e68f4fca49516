import SharingDomain
import Testing

/// The read models' keys have the byte layouts docs/events.md gives (a ledger written by one
/// version is read by the next, so a key builder may change how it builds, never what).
@Suite("Read-model key layouts")
struct KeyLayoutTests {
    private static func utf8(_ text: String) -> [UInt8] { Array(text.utf8) }
    private static func bigEndian(_ value: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) } }

    @Test func keysOfNamesAndTokens() {
        let container = "iCloud.é.example"
        #expect(ReadModels.key(container, "_alice") == Self.utf8(container) + [0] + Self.utf8("_alice"))
        #expect(ReadModels.userKey(container, "") == Self.utf8(container) + [0])
        #expect(ReadModels.zoneKey(container, owner: "_o", zone: "Zoné") == Self.utf8(container) + [0] + Self.utf8("_o") + [0] + Self.utf8("Zoné"))
        #expect(ReadModels.participantKey("tok", "p1") == Self.utf8("tokp1"))
        #expect(ReadModels.accessKey("tok", .request, user: "_u") == Self.utf8("tok") + [0x72] + Self.utf8("_u"))
        #expect(ReadModels.accessKey("tok", .blocked, user: "") == Self.utf8("tok") + [0x62])
        #expect(ReadModels.verificationKey("tok", "p1", user: "_u") == Self.utf8("tokp1") + [0] + Self.utf8("_u"))
        #expect(ReadModels.lookupKey(container, email: " Bob@Example.COM ") == Self.utf8(container) + [0] + Self.utf8("ebob@example.com"))
        let hash = [UInt8](repeating: 0xAB, count: ReadModels.lookupHashBytes)
        #expect(ReadModels.lookupKey(container, hash: hash, kind: "E") == Self.utf8(container) + [0] + Self.utf8("E") + hash)
    }

    @Test func keysWithBigEndianNumbers() {
        let zoneID: UInt64 = 0x0102_0304_0506_0708
        #expect(ReadModels.recordKey(zoneID: zoneID, "rec") == [1, 2, 3, 4, 5, 6, 7, 8] + Self.utf8("rec"))
        #expect(ReadModels.sharedZoneKey("c", user: "_u", zoneID: 9) == Self.utf8("c") + [0] + Self.utf8("_u") + [0] + Self.bigEndian(9))
        #expect(ReadModels.recordChangeKey(zoneID: zoneID, position: .max) == Self.bigEndian(zoneID) + [0] + Self.bigEndian(.max))
        #expect(ReadModels.recordChangePointerKey(zoneID: 7, "r") == Self.bigEndian(7) + [1] + Self.utf8("r"))
        #expect(ReadModels.zoneChangePrefix("c", user: "_u", .shared) == Self.utf8("c") + [0] + Self.utf8("_u") + [0, 0x73])
        #expect(
            ReadModels.zoneChangeKey("c", user: "_u", .private, owner: "_o", zone: "z")
                == Self.utf8("c") + [0] + Self.utf8("_u") + [0, 0x70] + Self.utf8("_o") + [0] + Self.utf8("z"))
    }

    @Test func changeEntryValues() throws {
        let zone = ZoneChangeEntry(ownerName: "_o", zoneName: "z", position: 5, deleted: true, zoneID: 6)
        #expect(zone.value == Self.bigEndian(5) + [1] + Self.bigEndian(6))
        let saved = RecordChangeEntry(position: 3, recordName: "ré", deleted: false, shareToken: "ignored")
        #expect(saved.value == [RecordChangeEntry.saved, 0, 3] + Self.utf8("ré"))
        let share = RecordChangeEntry(position: 3, recordName: "r", deleted: false, isShare: true, shareToken: "tok")
        #expect(share.value == [RecordChangeEntry.shareSaved, 0, 1] + Self.utf8("rtok"))
        let deleted = RecordChangeEntry(position: 4, recordName: String(repeating: "x", count: 300), deleted: true, shareToken: "t")
        #expect(deleted.value == [RecordChangeEntry.deletedKind, 1, 44] + Self.utf8(String(repeating: "x", count: 300) + "t"))
        let decoded = try RecordChangeEntry(position: 4, value: deleted.value)
        #expect(decoded.recordName == deleted.recordName && decoded.shareToken == "t" && decoded.deleted)
    }
}
