import EventLog
import Foundation
import SharingDomain
import SwiftProtobuf
import TestSupport
import Testing

@Suite("Compact read-model rows")
struct CompactRowTests {
    private static func text(_ random: inout SplitMix64) -> String {
        let alphabet = Array("aZ9_.@+ éß漢")
        return String((0..<Int.random(in: 0...12, using: &random)).map { _ in alphabet.randomElement(using: &random)! })
    }

    private static func share(_ random: inout SplitMix64) -> ShareState {
        var s = ShareState()
        s.container = text(&random)
        s.ownerName = text(&random)
        s.zoneName = text(&random)
        s.zoneID = random.next() >> Int.random(in: 0...63, using: &random)
        s.shareRecordName = text(&random)
        s.rootRecordName = text(&random)
        s.title = text(&random)
        s.publicPermission = Shareledger_Events_V1_Permission(rawValue: Int.random(in: 0...3, using: &random))!
        s.changeTag = random.next()
        s.createdAtMicros = Int64(bitPattern: random.next())
        s.ownerParticipantID = text(&random)
        s.activeParticipantCount = UInt32.random(in: 0...UInt32.max, using: &random)
        s.unmatchedPendingCount = UInt32.random(in: 0...100, using: &random)
        s.allowsAccessRequests = Bool.random(using: &random)
        return s
    }

    private static func participant(_ random: inout SplitMix64) -> ParticipantState {
        var p = ParticipantState()
        p.userRecordName = text(&random)
        if Bool.random(using: &random) {
            p.lookupInfo.emailAddress = text(&random)
            p.lookupInfo.phoneNumber = text(&random)
            p.lookupInfo.userRecordName = text(&random) + "x"
        }
        p.role = Shareledger_Events_V1_Role(rawValue: Int.random(in: 0...4, using: &random))!
        p.permission = Shareledger_Events_V1_Permission(rawValue: Int.random(in: 0...3, using: &random))!
        p.status = Shareledger_Events_V1_AcceptanceStatus(rawValue: Int.random(in: 0...3, using: &random))!
        p.addedAtMicros = Int64.random(in: 0...Int64.max, using: &random)
        p.approvedRequester = Bool.random(using: &random)
        if Bool.random(using: &random) { p.oneTimeToken = text(&random) }
        switch Int.random(in: 0...3, using: &random) {
        case 0:
            // A sealed invitation: its box, and its keyed hash (layout C3).
            p.sealedLookup.subject = "#E" + text(&random)
            p.sealedLookup.box = Data((0..<Int.random(in: 28...60, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) })
            p.emailHash = Data((0..<32).map { _ in UInt8.random(in: 0...255, using: &random) })
        case 1:
            // An invitation whose address was forgotten.
            p.forgottenAtMicros = Int64.random(in: 1...Int64.max, using: &random)
        default:
            break
        }
        return p
    }

    private static func zone(_ random: inout SplitMix64) -> ZoneState {
        var z = ZoneState()
        z.zoneID = random.next()
        z.capabilities = UInt32.random(in: 0...7, using: &random)
        z.zoneShareToken = text(&random)
        z.lastZoneShareToken = text(&random)
        z.hierarchyShareCount = UInt32.random(in: 0...1_000, using: &random)
        z.createdAtMicros = Int64.random(in: 0...Int64.max, using: &random)
        return z
    }

    private static func user(_ random: inout SplitMix64) -> UserState {
        var u = UserState()
        u.emailAddress = text(&random)
        u.phoneNumber = text(&random)
        u.givenName = text(&random)
        u.familyName = text(&random)
        u.middleName = text(&random)
        u.nickname = text(&random)
        u.registeredAtMicros = Int64.random(in: 0...Int64.max, using: &random)
        return u
    }

    private func roundTrips<M: LegacyEncodable>(_ row: M) throws {
        let compact = row.compactBytes()
        #expect(compact.first == row.compactLayout && (0xC1...0xC3).contains(compact.first ?? 0))
        #expect(try compact.withUnsafeBytes { try M.decodeStored($0, database: "t") } == row)
        // Rows an earlier release wrote (protobuf) read the same.
        var options = BinaryEncodingOptions()
        options.useDeterministicOrdering = true
        let old: [UInt8] = try row.legacy.serializedBytes(options: options)
        #expect(old.first.map { $0 < 0x80 } ?? true)
        #expect(try old.withUnsafeBytes { try M.decodeStored($0, database: "t") } == row)
        // Damage is a typed error, never a trap: every truncation, and a trailing byte.
        for cut in 1..<compact.count {
            #expect(throws: LedgerError.self) { try Array(compact.prefix(cut)).withUnsafeBytes { try M.decodeStored($0, database: "t") } }
        }
        #expect(throws: LedgerError.self) { try (compact + [0]).withUnsafeBytes { try M.decodeStored($0, database: "t") } }
    }

    @Test("random rows round-trip; protobuf rows of earlier releases decode to the same; damage is a typed error")
    func roundTrip() throws {
        var random = SplitMix64(state: 0xC0_4DAC7)
        for _ in 0..<200 {
            try roundTrips(Self.share(&random))
            try roundTrips(Self.participant(&random))
            try roundTrips(Self.zone(&random))
            try roundTrips(Self.user(&random))
        }
        #expect(throws: LedgerError.self) { try [UInt8]([0xC7, 0]).withUnsafeBytes { try ShareState.decodeStored($0, database: "t") } }
        #expect(try [UInt8]().withUnsafeBytes { try ShareState.decodeStored($0, database: "t") } == ShareState())
    }

    @Test("the change tag reads from either layout without decoding the row")
    func changeTag() throws {
        var random = SplitMix64(state: 7)
        let row = Self.share(&random)
        #expect(row.compactBytes().withUnsafeBytes { ShareState.storedChangeTag($0) } == row.changeTag)
        let old: [UInt8] = try row.legacy.serializedBytes()
        #expect(old.withUnsafeBytes { ShareState.storedChangeTag($0) } == row.changeTag)
        #expect([UInt8]([0xC1, 1, 2]).withUnsafeBytes { ShareState.storedChangeTag($0) } == nil)
    }

    @Test("the zone id reads from both compact layouts without decoding the row; the protobuf layout and damage are nil (decode instead)")
    func zoneID() throws {
        var random = SplitMix64(state: 13)
        for _ in 0..<200 {
            var row = Self.share(&random)
            if random.next() % 2 == 0 { row.allowsAccessRequests = true }
            let bytes = row.compactBytes()
            #expect(bytes.withUnsafeBytes { ShareState.storedZoneID($0) } == row.zoneID)
            for cut in [1, 9, bytes.count / 2] where cut < bytes.count {
                let read = Array(bytes[..<cut]).withUnsafeBytes { ShareState.storedZoneID($0) }
                #expect(read == nil || read == row.zoneID, "a cut row is nil unless the zone id is whole before the cut")
            }
            let old: [UInt8] = try row.legacy.serializedBytes()
            #expect(old.withUnsafeBytes { ShareState.storedZoneID($0) } == nil)
        }
        #expect([UInt8]([0xC7, 1, 2]).withUnsafeBytes { ShareState.storedZoneID($0) } == nil)
        #expect([UInt8]().withUnsafeBytes { ShareState.storedZoneID($0) } == nil)
    }

    @Test("whether a participant row may name an invitation address reads from its stored bytes: false only for rows naming none (no plaintext address, no box, no hash); the protobuf layout and damage say true (decode instead)")
    func participantNamesAddress() throws {
        var random = SplitMix64(state: 0xADD2E55)
        var seenFalse = 0
        for round in 0..<400 {
            var row = Self.participant(&random)
            // Also lookups with only an email address, only a phone number, or only an account.
            switch round % 4 {
            case 1: row.lookupInfo.phoneNumber = ""
            case 2: row.lookupInfo.emailAddress = ""
            case 3: (row.lookupInfo.emailAddress, row.lookupInfo.phoneNumber) = ("", "")
            default: break
            }
            let bytes = row.compactBytes()
            let names = !row.lookupInfo.emailAddress.isEmpty || !row.lookupInfo.phoneNumber.isEmpty || row.hasSealedLookup
                || !row.emailHash.isEmpty || !row.phoneHash.isEmpty || row.forgottenAtMicros != 0
            #expect(bytes.withUnsafeBytes { ParticipantState.storedMayNameAddress($0) } == names, "\(row)")
            if !names { seenFalse += 1 }
            // No address match holds for a row passed over.
            let match = ReadModels.AddressMatch(
                email: row.lookupInfo.emailAddress.isEmpty ? "x@example.com" : row.lookupInfo.emailAddress,
                phone: row.lookupInfo.phoneNumber, emailHash: row.emailHash.isEmpty ? nil : Array(row.emailHash))
            if !names { #expect(!match.matches(row)) }
            let old: [UInt8] = try row.legacy.serializedBytes()
            #expect(old.withUnsafeBytes { ParticipantState.storedMayNameAddress($0) })
            for cut in [1, 2, bytes.count / 2] where cut < bytes.count {
                let read = Array(bytes[..<cut]).withUnsafeBytes { ParticipantState.storedMayNameAddress($0) }
                #expect(read || !names, "a cut row says true unless its lookup's addresses are whole before the cut")
            }
        }
        #expect(seenFalse > 50)
        #expect([UInt8]([0xC7, 0, 0, 0]).withUnsafeBytes { ParticipantState.storedMayNameAddress($0) })
        #expect([UInt8]().withUnsafeBytes { ParticipantState.storedMayNameAddress($0) })
    }

    @Test("a record's parent and share token read from its stored bytes equal the decoded row's; damage is nil")
    func recordLinkScan() throws {
        var random = SplitMix64(state: 11)
        for round in 0..<200 {
            var row = RecordState()
            row.recordType = "Doc\(random.next() % 5)"
            for index in 0..<Int(random.next() % 4) {
                var field = Shareledger_Events_V1_Field()
                field.key = "f\(index)"
                field.value.stringValue = String(repeating: "x", count: Int(random.next() % 300))
                row.fields.append(field)
            }
            if random.next() % 3 != 0 { row.parentRecordName = "parent\(round)" }
            if random.next() % 2 == 0 { row.shareToken = "token\(round)" }
            row.changeTag = random.next()
            row.createdAtMicros = Int64(bitPattern: random.next())
            let bytes: [UInt8] = try row.serializedBytes()
            bytes.withUnsafeBytes { raw in
                #expect(ProtobufScan.lengthDelimited(field: 3, in: raw).map { String(decoding: $0, as: UTF8.self) } == row.parentRecordName)
                #expect(ProtobufScan.lengthDelimited(field: 5, in: raw).map { String(decoding: $0, as: UTF8.self) } == row.shareToken)
            }
            // Cut short inside a field: not a message.
            if bytes.count > 2 {
                let cut = Array(bytes[0..<(bytes.count - 1)])
                let scanned = cut.withUnsafeBytes { ProtobufScan.lengthDelimited(field: 5, in: $0) }
                let decodes = (try? RecordState(serializedBytes: cut)) != nil
                #expect(decodes || scanned == nil)
            }
        }
    }

    @Test("the worked example of docs/log-format.md")
    func workedExample() {
        var zone = ZoneState()
        zone.zoneID = 5
        zone.capabilities = 3
        zone.createdAtMicros = 1
        #expect(zone.compactBytes() == [0xC1, 0x05, 0x03, 0x00, 0x00, 0x00, 0x01])
    }

    @Test("layout C2: written only when an added field is set, read next to C1; other rows and flag values refuse it")
    func layoutTwo() throws {
        var share = ShareState()
        share.changeTag = 7
        let one = share.compactBytes()
        #expect(one.first == 0xC1, "a share without the added fields keeps the first layout")
        share.allowsAccessRequests = true
        let two = share.compactBytes()
        // The first layout's fields, then the flag, then an empty sealed title (subject, box).
        #expect(two.first == 0xC2 && two.count == one.count + 3 && Array(two[one.count...]) == [1, 0, 0])
        #expect(Array(two[1..<one.count]) == Array(one[1...]))
        #expect(try two.withUnsafeBytes { try ShareState.decodeStored($0, database: "t") } == share)
        #expect(two.withUnsafeBytes { ShareState.storedChangeTag($0) } == 7)
        var sealed = share
        sealed.sealedTitle.subject = "_owner"
        sealed.sealedTitle.box = Data([1, 2, 3])
        for allows in [true, false] {
            sealed.allowsAccessRequests = allows
            let bytes = sealed.compactBytes()
            #expect(bytes.first == 0xC2)
            #expect(try bytes.withUnsafeBytes { try ShareState.decodeStored($0, database: "t") } == sealed)
        }
        var participant = ParticipantState()
        participant.approvedRequester = true
        let row = participant.compactBytes()
        #expect(row.first == 0xC2 && Array(row.suffix(2)) == [1, 0], "the approved flag, then an empty one-time token")
        #expect(try row.withUnsafeBytes { try ParticipantState.decodeStored($0, database: "t") } == participant)
        participant.approvedRequester = false
        participant.oneTimeToken = "0FGla26YtxqPeVFDDjx2Ds3DA1"
        let oneTime = participant.compactBytes()
        #expect(oneTime.first == 0xC2)
        #expect(try oneTime.withUnsafeBytes { try ParticipantState.decodeStored($0, database: "t") } == participant)
        // A flag other than 0 or 1, and C2 on a row type without it, are damage.
        var bad = two
        bad[one.count] = 2
        #expect(throws: LedgerError.self) { try bad.withUnsafeBytes { try ShareState.decodeStored($0, database: "t") } }
        var zone = ZoneState().compactBytes()
        zone[0] = 0xC2
        #expect(throws: LedgerError.self) { try zone.withUnsafeBytes { try ZoneState.decodeStored($0, database: "t") } }
    }

    @Test("layout C3 (participants only): C2's fields, then the sealed invitation, its keyed hashes and when it was forgotten; other rows refuse it")
    func layoutThree() throws {
        var participant = ParticipantState()
        participant.approvedRequester = true
        let two = participant.compactBytes()
        #expect(two.first == 0xC2)
        participant.sealedLookup.subject = "#E00"
        participant.sealedLookup.box = Data([9, 8, 7])
        participant.emailHash = Data(repeating: 0xAB, count: 32)
        let three = participant.compactBytes()
        // The second layout's fields, then subject, box, email hash, empty phone hash, forgotten at 0.
        #expect(three.first == 0xC3 && Array(three[1..<two.count]) == Array(two[1...]))
        #expect(Array(three[two.count...]) == [4] + Array("#E00".utf8) + [3, 9, 8, 7, 32] + [UInt8](repeating: 0xAB, count: 32) + [0, 0])
        #expect(try three.withUnsafeBytes { try ParticipantState.decodeStored($0, database: "t") } == participant)
        // An erased invitation: no box, no hash, only when it was forgotten.
        var erased = ParticipantState()
        erased.forgottenAtMicros = 5
        let bytes = erased.compactBytes()
        #expect(bytes.first == 0xC3 && Array(bytes.suffix(6)) == [0, 0, 0, 0, 0, 5])
        #expect(try bytes.withUnsafeBytes { try ParticipantState.decodeStored($0, database: "t") } == erased)
        // Without any of them, a participant keeps the layouts before.
        #expect(ParticipantState().compactBytes().first == 0xC1)
        var share = ShareState().compactBytes()
        share[0] = 0xC3
        #expect(throws: LedgerError.self) { try share.withUnsafeBytes { try ShareState.decodeStored($0, database: "t") } }
        var user = UserState().compactBytes()
        user[0] = 0xC3
        #expect(throws: LedgerError.self) { try user.withUnsafeBytes { try UserState.decodeStored($0, database: "t") } }
    }
}

/// A row as the generated message an earlier release stored it as (protobuf): the inverse of
/// ``CompactRow/init(legacy:)``, for writing such rows in tests.
protocol LegacyEncodable: CompactRow {
    var legacy: Legacy { get }
}

extension ShareState: LegacyEncodable {
    var legacy: Shareledger_Readmodels_V1_ShareState {
        var m = Legacy()
        (m.container, m.ownerName, m.zoneName, m.zoneID) = (container, ownerName, zoneName, zoneID)
        (m.shareRecordName, m.rootRecordName, m.title) = (shareRecordName, rootRecordName, title)
        (m.publicPermission, m.changeTag, m.createdAtMicros) = (publicPermission, changeTag, createdAtMicros)
        (m.ownerParticipantID, m.activeParticipantCount) = (ownerParticipantID, activeParticipantCount)
        (m.unmatchedPendingCount, m.allowsAccessRequests) = (unmatchedPendingCount, allowsAccessRequests)
        if hasSealedTitle { m.sealedTitle = sealedTitle }
        return m
    }
}

extension ParticipantState: LegacyEncodable {
    var legacy: Shareledger_Readmodels_V1_ParticipantState {
        var m = Legacy()
        m.userRecordName = userRecordName
        if hasLookupInfo { m.lookupInfo = lookupInfo }
        (m.role, m.permission, m.status, m.addedAtMicros) = (role, permission, status, addedAtMicros)
        (m.approvedRequester, m.oneTimeToken) = (approvedRequester, oneTimeToken)
        if hasSealedLookup { m.sealedLookup = sealedLookup }
        (m.emailHash, m.phoneHash, m.forgottenAtMicros) = (emailHash, phoneHash, forgottenAtMicros)
        return m
    }
}

extension ZoneState: LegacyEncodable {
    var legacy: Shareledger_Readmodels_V1_ZoneState {
        var m = Legacy()
        (m.zoneID, m.capabilities, m.zoneShareToken) = (zoneID, capabilities, zoneShareToken)
        (m.lastZoneShareToken, m.hierarchyShareCount, m.createdAtMicros) = (lastZoneShareToken, hierarchyShareCount, createdAtMicros)
        return m
    }
}

extension UserState: LegacyEncodable {
    var legacy: Shareledger_Readmodels_V1_UserState {
        var m = Legacy()
        (m.emailAddress, m.phoneNumber, m.givenName, m.familyName) = (emailAddress, phoneNumber, givenName, familyName)
        (m.registeredAtMicros, m.middleName, m.nickname) = (registeredAtMicros, middleName, nickname)
        if hasSealed { m.sealed = sealed }
        (m.emailHash, m.phoneHash, m.forgottenAtMicros) = (emailHash, phoneHash, forgottenAtMicros)
        return m
    }
}
