import Foundation
import ShareLedger
@testable import ShareLedgerServer
import TestSupport
import Testing

/// The server writes the ledger's values (ShortGUID Results, shares, records, identities) with
/// ``JSONWriter`` instead of building `JSONValue` dictionaries; the bytes must stay those the
/// dictionaries gave: valid JSON, keys in `JSONValue`'s sorted order, the same escapes and numbers.
/// And `/database/1/...` paths are matched by hand instead of by the router, exactly as it did.
@Suite("Server: responses written directly, paths matched directly")
struct WireRenderingTests {
    /// `bytes` parsed and written again by `JSONValue` (which sorts every object's keys).
    static func rewritten(_ bytes: [UInt8]) throws -> [UInt8] {
        try JSONValue.parse(bytes).bytes
    }

    static func bytes(_ value: JSONValue) -> [UInt8] { value.bytes }

    @Test("ShortGUID Results, shares, records and identities are the bytes JSONValue writes for them")
    func renderedAsJSONValueWrites() async throws {
        let directory = TemporaryDirectory()
        let ledger = try ShareLedger.open(.init(path: directory.path, createIfMissing: true))
        let container = "iCloud.com.example.render"
        var names = PersonNameComponents()
        names.givenName = "Al\"ice"
        names.familyName = "Ünder\\wood"
        names.nickname = "al\n"
        try await ledger.registerUser("_alice", in: container, emailAddress: "alice@example.com", nameComponents: names)
        try await ledger.registerUser("_bob", in: container, phoneNumber: "+15555550100")
        let alice = ledger.container(container, userRecordName: "_alice")
        let bob = ledger.container(container, userRecordName: "_bob")
        let zone = RecordZoneID(zoneName: "Notes")
        _ = try await alice.save(RecordZone(zoneID: zone))
        let rootID = RecordID(recordName: "Note-1", zoneID: zone)
        let title = "quote \" backslash \\ newline \n tab \t bell \u{07} é 😀"
        let fields: [String: FieldValue] = [
            "title": .string(title), "ü": .string("x"), "Z": .int64(-3),
            "d": .double(1.5), "big": .double(1e300), "t": .date(Date(timeIntervalSince1970: 1_700_000_000.123)),
            "b": .bytes([0, 1, 2, 255]), "l": .list([.string("x"), .string("y")]), "il": .list([.int64(1), .int64(2)]),
            "empty": .list([]), "ref": .reference(RecordID(recordName: "Other", zoneID: zone)),
        ]
        _ = try await alice.save(Record(recordType: "Note", recordID: rootID, fields: fields))
        _ = try await alice.save(Record(recordType: "Note", recordID: RecordID(recordName: "Child", zoneID: zone), parent: rootID))
        let share = try await alice.share(rootRecord: rootID, title: "My \"notes\"")
        _ = try await alice.addParticipant(LookupInfo(phoneNumber: "+15555550100"), permission: .readWrite, to: share.url)
        _ = try await alice.addParticipant(LookupInfo(emailAddress: "nobody@example.com"), permission: .readOnly, to: share.url)
        _ = try await alice.save(RecordZone(zoneID: RecordZoneID(zoneName: "Z2")))
        let zoneShare = try await alice.share(recordZoneID: RecordZoneID(zoneName: "Z2"), publicPermission: .readOnly).url
        let echo: JSONValue = ["value": .string(share.token.text), "shouldFetchRootRecord": true, "extra": [1, .double(2.5), .null]]
        for (viewer, caller) in [(bob, "_bob"), (alice, "_alice")] {
            for fetchRoot in [false, true] {
                let metadata = try await viewer.shareMetadatas(for: [share.url], shouldFetchRootRecord: fetchRoot)[share.url]!.get()
                for desired in [nil, Set<String>(), ["title", "ü", "missing"]] {
                    let written = Self.bytes(
                        Wire.shortGUIDResult(
                            metadata, shortGUID: echo, environment: "development", caller: caller, desiredKeys: desired))
                    #expect(try Self.rewritten(written) == written, "\(caller) fetchRoot \(fetchRoot) \(String(describing: desired))")
                }
                let share = Self.bytes(Wire.share(metadata.share))
                #expect(try Self.rewritten(share) == share)
            }
        }
        let zoneMetadata = try await bob.shareMetadatas(for: [zoneShare])[zoneShare]!.get()
        let zoneWritten = Self.bytes(
            Wire.shortGUIDResult(zoneMetadata, shortGUID: "g", environment: "production", caller: "_bob", desiredKeys: nil))
        #expect(try Self.rewritten(zoneWritten) == zoneWritten)
        let root = try alice.record(for: rootID)
        for desired in [nil, Set<String>(), ["b", "t"]] {
            let written = Self.bytes(Wire.record(root, desiredKeys: desired))
            #expect(try Self.rewritten(written) == written)
        }
        let identity = try alice.currentUserIdentity()
        let identityBytes = Self.bytes(Wire.identity(identity))
        #expect(try Self.rewritten(identityBytes) == identityBytes)
        // What the values hold, spot-checked through the parsed form.
        let parsed = try JSONValue.parse(Self.bytes(Wire.record(root, desiredKeys: ["title", "il"])))
        #expect(parsed["fields"]?["title"] == ["type": "STRING", "value": .string(title)])
        #expect(parsed["fields"]?["il"] == ["type": "INT64_LIST", "value": [1, 2]])
        #expect(parsed["fields"]?["b"] == nil)
        #expect(parsed["created"]?["timestamp"] == .int(Wire.millis(root.creationDate)))
        let named = try JSONValue.parse(identityBytes)
        #expect(named["nameComponents"] == ["givenName": "Al\"ice", "familyName": "Ünder\\wood", "nickname": "al\n"])
        await ledger.close()
    }

    @Test("database paths split as the router's /database/1/:container/:environment/:database/** route did")
    func databasePaths() {
        func path(_ container: String, _ environment: String, _ database: String, _ subpath: String) -> DatabasePath {
            DatabasePath(container: container, environment: environment, database: database, subpath: subpath)
        }
        let matched: [(String, DatabasePath?)] = [
            ("/database/1/C/development/public/records/resolve", path("C", "development", "public", "records/resolve")),
            ("//database//1/C//development/public//records//resolve//", path("C", "development", "public", "records/resolve")),
            ("/database/1/i%43loud/production/shared/users/lookup/email", path("i%43loud", "production", "shared", "users/lookup/email")),
            ("/database/1/C/development/public/x", path("C", "development", "public", "x")),
            ("/database/1/C/development/public", nil), ("/database/1/C/development/public/", nil), ("/database/1/C", nil),
            ("/database/2/C/development/public/records/resolve", nil), ("/Database/1/C/development/public/records/resolve", nil),
            ("/healthz", nil), ("/", nil), ("", nil),
        ]
        for (path, expected) in matched {
            #expect(DatabasePath(path) == expected, "\(path)")
        }
    }

    @Test("the byte split of plain paths agrees with the route's split on every path")
    func databasePathsFastSplit() {
        // Paths built from pieces that exercise both splits: empty components, a leading or missing
        // `/`, non-ASCII (a `/` with a combining mark is one Character), case and percent escapes.
        let pieces = ["database", "1", "Database", "2", "C", "é", "/\u{338}", "%2F", "records", "", "x y", "e\u{301}"]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let count = Int.random(in: 0...9, using: &generator)
            var path = Bool.random(using: &generator) ? "/database/1/C/development/public/" : ""
            for _ in 0..<count {
                path += pieces.randomElement(using: &generator)! + (Bool.random(using: &generator) ? "/" : "//")
            }
            if !path.isEmpty, Bool.random(using: &generator) { path.removeLast() }
            #expect(DatabasePath(path) == DatabasePath(splitting: path), "\(path)")
        }
    }
}
