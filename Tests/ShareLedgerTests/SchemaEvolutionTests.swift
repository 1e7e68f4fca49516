import Foundation
@testable import ShareLedger
import ShareLedgerAudit
import SwiftProtobuf
import TestSupport
import Testing

/// The committed fixture: an NDJSON export of a small simulated ledger (`share-ledger simulate --users
/// 12 --actions 150 --clients 3 --seed 7`) written by ShareLedger before `UserRegistered` went to
/// schema version 2, so its 15 `UserRegistered` events are version 1 (top-level given and family names).
private let fixtureURL = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .appendingPathComponent("Fixtures/schema-v1-ledger.ndjson")

@Suite("Schema evolution: events of an older schema version")
struct SchemaEvolutionTests {
    /// The fixture's lines as JSON objects.
    private func fixtureLines() throws -> [[String: Any]] {
        let text = try String(contentsOf: fixtureURL, encoding: .utf8)
        return try text.split(separator: "\n").map {
            try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
        }
    }

    @Test("the fixture holds version-1 UserRegistered events with names, and each upcasts field by field")
    func upcastEachEvent() throws {
        let lines = try fixtureLines()
        let registrations = lines.filter { ($0["eventType"] as? String) == "shareledger.events.v1.UserRegistered" }
        #expect(registrations.count == 15)
        var named = 0
        for line in registrations {
            #expect(line["schemaVersion"] as? Int == 1)
            let text = try #require(line["payload"] as? String)
            let payload = try #require(Data(base64Encoded: text))
            let old = try Shareledger_Events_V1_UserRegisteredV1(serializedBytes: Array(payload))
            if !old.givenName.isEmpty { named += 1 }
            let event = try #require(
                try DomainEvent.decode(
                    type: "shareledger.events.v1.UserRegistered", schemaVersion: 1, payload: Array(payload), position: 1))
            guard case .userRegistered(let new) = event else {
                Issue.record("decoded as \(event)")
                continue
            }
            #expect(new.userRecordName == old.userRecordName)
            #expect(new.emailAddress == old.emailAddress)
            #expect(new.phoneNumber == old.phoneNumber)
            #expect(new.name.givenName == old.givenName)
            #expect(new.name.familyName == old.familyName)
            #expect(new.name.middleName.isEmpty && new.name.nickname.isEmpty)
            // Read as the current message without the upcaster, the same bytes lose the names:
            // this is why a version-1 payload must never be decoded as version 2.
            let misread = try Shareledger_Events_V1_UserRegistered(serializedBytes: Array(payload))
            #expect(misread.name.givenName.isEmpty)
        }
        #expect(named == 12, "the simulation names 12 of its 15 users")
    }

    @Test("a ledger of version-1 events imports (chain intact), projects the upcast names, audits clean and exports byte-identically")
    func importProjectAuditExport() async throws {
        let dir = TemporaryDirectory()
        let ledger = try ShareLedger.open(Fixtures.configuration(dir.child("ledger")))
        let summary = try await LedgerAudit(ledger).importLog(from: try FileHandle(forReadingFrom: fixtureURL))
        #expect(summary.events == 145)
        #expect(try ledger.log.verifyChain().isValid)

        // The read models hold the names the version-1 events carried.
        let lines = try fixtureLines()
        let registrations = try lines.filter { ($0["eventType"] as? String) == "shareledger.events.v1.UserRegistered" }.map {
            line -> ([String: Any], Shareledger_Events_V1_UserRegisteredV1) in
            let text = try #require(line["payload"] as? String)
            let payload = try #require(Data(base64Encoded: text))
            return (line, try Shareledger_Events_V1_UserRegisteredV1(serializedBytes: Array(payload)))
        }
        let (first, old) = try #require(registrations.first { !$0.1.givenName.isEmpty })
        let container = try #require(first["container"] as? String)
        let identity = try ledger.read("reading a user") { txn in
            try ledger.presenter.identity(txn, container, user: old.userRecordName)
        }
        #expect(identity.nameComponents?.givenName == old.givenName)
        #expect(try ledger.statistics().users == 15)

        // Rebuilding from the log (upcasting again) gives the same read models.
        let report = try LedgerAudit(ledger).audit(scratchPath: dir.child("scratch"))
        #expect(report.ok, "\(report.problems)")
        #expect(report.projectionsMatch)

        // The stored bytes are never rewritten: export gives back the fixture byte for byte.
        let exported = dir.child("export.ndjson")
        #expect(FileManager.default.createFile(atPath: exported, contents: nil))
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: exported))
        try LedgerAudit(ledger).export(to: handle)
        try handle.close()
        #expect(try Data(contentsOf: URL(fileURLWithPath: exported)) == Data(contentsOf: fixtureURL))

        // New registrations are written as version 2, with every name part; both versions coexist.
        var names = PersonNameComponents()
        names.givenName = "Grace"
        names.middleName = "Brewster"
        names.familyName = "Hopper"
        names.nickname = "Amazing Grace"
        let grace = try await ledger.registerUser("_grace", in: container, nameComponents: names)
        #expect(grace.nameComponents == names)
        let head = try ledger.log.head().position
        let stored = try #require(try ledger.log.event(at: head))
        #expect(stored.eventType == "shareledger.events.v1.UserRegistered")
        #expect(stored.schemaVersion == 2)
        let after = try LedgerAudit(ledger).audit(scratchPath: dir.child("scratch2"))
        #expect(after.ok, "\(after.problems)")
        await ledger.close()
    }

    @Test("a schema version newer than the code knows is refused; one no version wrote is corrupt data")
    func unknownVersions() throws {
        var event = Shareledger_Events_V1_UserRegistered()
        event.userRecordName = "_x"
        let payload: [UInt8] = try event.serializedBytes()
        func code(_ type: String, _ version: UInt32, _ payload: [UInt8]) -> LedgerError.Code? {
            do {
                _ = try DomainEvent.decode(type: type, schemaVersion: version, payload: payload, position: 9)
                return nil
            } catch {
                return error.code
            }
        }
        #expect(code("shareledger.events.v1.UserRegistered", 3, payload) == .formatTooNew)
        #expect(code("shareledger.events.v1.UserRegistered", 0, payload) == .corruptedData)
        #expect(code("shareledger.events.v1.ShareCreated", 2, []) == .formatTooNew)
        #expect(code("shareledger.events.v1.UserRegistered", 2, payload) == nil)
        #expect(DomainEvent.currentSchemaVersion(of: "shareledger.events.v1.UserRegistered") == 2)
        #expect(DomainEvent.currentSchemaVersion(of: "shareledger.events.v1.ShareCreated") == 1)
    }

    @Test("every event type names itself, writes the schema version the code writes for its name, and serializes as its message")
    func everyTypeNamesItself() throws {
        #expect(DomainEvent.typeNames.count == 25)
        #expect(Set(DomainEvent.typeNames).count == DomainEvent.typeNames.count)
        for name in DomainEvent.typeNames {
            let version = DomainEvent.currentSchemaVersion(of: name)
            // An empty payload is the message with every field at its default.
            let event = try #require(try DomainEvent.decode(type: name, schemaVersion: version, payload: [], position: 1))
            #expect(event.typeName == name)
            #expect(event.schemaVersion == version)
            #expect(type(of: event.message).protoMessageName == name)
            #expect(try event.payload() == [])
        }
        var share = Shareledger_Events_V1_ShareCreated()
        share.token = "t"
        share.ownerName = "_o"
        let event = DomainEvent.shareCreated(share)
        var options = BinaryEncodingOptions()
        options.useDeterministicOrdering = true
        #expect(try event.payload() == (try share.serializedBytes(options: options) as [UInt8]))
    }
}
