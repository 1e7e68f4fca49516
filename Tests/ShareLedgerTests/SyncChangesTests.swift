import Foundation
import LMDB
@testable import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// Sync through the per-zone change index: `Container.recordZoneChanges(in:since:limit:)` and
/// `Container.databaseChanges(_:since:limit:)`.
@Suite("Sync: record zone and database changes")
struct SyncChangesTests {
    static func names(_ changes: RecordZoneChanges) -> [String] { changes.changedRecords.map(\.recordID.recordName) }
    static func deleted(_ changes: RecordZoneChanges) -> [String] { changes.deletedRecordIDs.map(\.recordName) }

    @Test("the owner gets every change since a token, each record once, deletions as tombstones")
    func ownerSyncsAZone() async throws {
        let f = try await SharingFixture()
        _ = try await f.makeHierarchy()
        _ = try await f.alice.save(Record(recordType: "Item", recordID: SharingFixture.recordID("loose")))
        let first = try f.alice.recordZoneChanges(in: SharingFixture.zone)
        #expect(Self.names(first) == ["list", "item", "loose"] && first.deletedRecordIDs.isEmpty && !first.moreComing)
        #expect(first.changedRecords.first?.recordID.zoneID.ownerName == "_alice")

        // Nothing changed: nothing, and the same point again.
        let idle = try f.alice.recordZoneChanges(in: SharingFixture.zone, since: first.syncToken)
        #expect(idle.changedRecords.isEmpty && idle.deletedRecordIDs.isEmpty && idle.syncToken == first.syncToken)

        var item = try f.alice.record(for: SharingFixture.recordID("item"))
        item.fields["name"] = .string("oat milk")
        _ = try await f.alice.save(item)
        try await f.alice.deleteRecord(withID: SharingFixture.recordID("loose"))
        _ = try await f.alice.save(Record(recordType: "Item", recordID: SharingFixture.recordID("new")))
        let second = try f.alice.recordZoneChanges(in: SharingFixture.zone, since: first.syncToken)
        #expect(Self.names(second) == ["item", "new"], "\(Self.names(second))")
        #expect(Self.deleted(second) == ["loose"])
        #expect(second.changedRecords.first?.fields["name"] == .string("oat milk"))

        // From the start, a deleted record is simply absent.
        let fresh = try f.alice.recordZoneChanges(in: SharingFixture.zone)
        #expect(Set(Self.names(fresh)) == ["list", "item", "new"] && fresh.deletedRecordIDs.isEmpty)

        // Pages: two at a time (the share is one of the zone's records), until no more come.
        var pages: [RecordZoneChanges] = [try f.alice.recordZoneChanges(in: SharingFixture.zone, limit: 2)]
        while let last = pages.last, last.moreComing, pages.count < 10 {
            pages.append(try f.alice.recordZoneChanges(in: SharingFixture.zone, since: last.syncToken, limit: 2))
        }
        #expect(pages.count > 1 && pages.allSatisfy { $0.changedRecords.count + $0.changedShares.count + $0.deletedRecordIDs.count <= 2 })
        #expect(Set(pages.flatMap(Self.names)) == ["list", "item", "new"] && pages.flatMap(\.changedShares).count == 1)
        #expect(pages.last?.moreComing == false)
        await f.ledger.close()
    }

    @Test("a participant syncs the shared zone through the shared database: only what is shared with them")
    func participantSyncsTheSharedZone() async throws {
        let (f, share) = try await SharingFixture.withShare()
        _ = try await f.alice.save(Record(recordType: "Item", recordID: SharingFixture.recordID("private")))
        let aliceZone = RecordZoneID(zoneName: "Notes", ownerName: "_alice")
        _ = try await f.alice.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_bob")), permission: .readWrite, to: share.url)
        // Not in Bob's shared database before he accepts (and the residual task ran).
        #expect(await errorCode { try f.bob.recordZoneChanges(in: aliceZone) } == .zoneNotFound)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        _ = try await f.ledger.completeResidualTasks()
        let first = try f.bob.recordZoneChanges(in: aliceZone)
        #expect(Set(Self.names(first)) == ["list", "item"], "\(Self.names(first))")

        try await f.alice.deleteRecord(withID: SharingFixture.recordID("item"))
        try await f.alice.deleteRecord(withID: SharingFixture.recordID("private"))
        _ = try await f.alice.save(Record(recordType: "Item", recordID: SharingFixture.recordID("added"), parent: SharingFixture.recordID("list")))
        _ = try await f.alice.save(Record(recordType: "Item", recordID: SharingFixture.recordID("hidden")))
        let second = try f.bob.recordZoneChanges(in: aliceZone, since: first.syncToken)
        #expect(Self.names(second) == ["added"], "\(Self.names(second))")
        #expect(Self.deleted(second) == ["item"], "the deletion of a record that was never shared is not Bob's to see")

        // Carol, not a participant, has no such zone.
        #expect(await errorCode { try f.carol.recordZoneChanges(in: aliceZone) } == .zoneNotFound)
        await f.ledger.close()
    }

    @Test("a token that is not this zone's, edited, or of a zone deleted since is changeTokenExpired")
    func badTokens() async throws {
        let f = try await SharingFixture()
        _ = try await f.makeHierarchy()
        _ = try await f.alice.save(RecordZone(zoneID: RecordZoneID(zoneName: "Other")))
        let token = try f.alice.recordZoneChanges(in: SharingFixture.zone).syncToken
        #expect(SyncToken(token.text) == token)
        #expect(SyncToken("") == nil && SyncToken("not a token") == nil)
        // One character changed anywhere: the checksum no longer holds.
        for index in token.text.indices {
            var text = token.text
            text.replaceSubrange(index...index, with: token.text[index] == "A" ? "B" : "A")
            #expect(SyncToken(text) == nil, "\(text)")
        }
        #expect(await errorCode { try f.alice.recordZoneChanges(in: RecordZoneID(zoneName: "Other"), since: token) } == .changeTokenExpired)
        let database = try f.alice.databaseChanges(.private).syncToken
        #expect(await errorCode { try f.alice.recordZoneChanges(in: SharingFixture.zone, since: database) } == .changeTokenExpired)
        #expect(await errorCode { try f.alice.databaseChanges(.shared, since: database) } == .changeTokenExpired)
        // A position the ledger has not reached.
        let future = SyncToken(kind: .zone, subject: token.subject, position: token.position + 1_000)
        #expect(await errorCode { try f.alice.recordZoneChanges(in: SharingFixture.zone, since: future) } == .changeTokenExpired)
        await f.ledger.close()
    }

    @Test("a zone deleted and made again refuses the tokens of its earlier life")
    func recreatedZone() async throws {
        let f = try await SharingFixture()
        let zone = RecordZoneID(zoneName: "Again")
        _ = try await f.alice.save(RecordZone(zoneID: zone))
        _ = try await f.alice.save(Record(recordType: "Item", recordID: RecordID(recordName: "a", zoneID: zone)))
        let token = try f.alice.recordZoneChanges(in: zone).syncToken
        try await f.alice.deleteRecordZone(withID: zone)
        #expect(await errorCode { try f.alice.recordZoneChanges(in: zone, since: token) } == .zoneNotFound)
        _ = try await f.alice.save(RecordZone(zoneID: zone))
        #expect(await errorCode { try f.alice.recordZoneChanges(in: zone, since: token) } == .changeTokenExpired)
        #expect(try f.alice.recordZoneChanges(in: zone).changedRecords.isEmpty)
        await f.ledger.close()
    }

    @Test("database changes: zones that came, changed and went, in the private and the shared database")
    func databaseChanges() async throws {
        let (f, share) = try await SharingFixture.withShare()
        _ = try await f.alice.save(RecordZone(zoneID: RecordZoneID(zoneName: "Quiet")))
        let first = try f.alice.databaseChanges(.private)
        #expect(Set(first.changedZoneIDs.map(\.zoneName)) == ["Notes", "Quiet"] && first.deletedZoneIDs.isEmpty)
        let idle = try f.alice.databaseChanges(.private, since: first.syncToken)
        #expect(idle.changedZoneIDs.isEmpty && idle.deletedZoneIDs.isEmpty)

        _ = try await f.alice.save(Record(recordType: "Item", recordID: SharingFixture.recordID("more")))
        try await f.alice.deleteRecordZone(withID: RecordZoneID(zoneName: "Quiet"))
        let second = try f.alice.databaseChanges(.private, since: first.syncToken)
        #expect(second.changedZoneIDs.map(\.zoneName) == ["Notes"] && second.deletedZoneIDs.map(\.zoneName) == ["Quiet"])

        // Bob's shared database: the zone comes when the residual task places it, goes when he leaves.
        let bobStart = try f.bob.databaseChanges(.shared)
        #expect(bobStart.changedZoneIDs.isEmpty)
        _ = try await f.alice.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_bob")), permission: .readOnly, to: share.url)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        _ = try await f.ledger.completeResidualTasks()
        let joined = try f.bob.databaseChanges(.shared, since: bobStart.syncToken)
        #expect(joined.changedZoneIDs == [RecordZoneID(zoneName: "Notes", ownerName: "_alice")], "\(joined)")
        try await f.bob.leaveShare(share.url)
        _ = try await f.ledger.completeResidualTasks()
        let left = try f.bob.databaseChanges(.shared, since: joined.syncToken)
        #expect(left.deletedZoneIDs == [RecordZoneID(zoneName: "Notes", ownerName: "_alice")] && left.changedZoneIDs.isEmpty, "\(left)")
        await f.ledger.close()
    }

    @Test("tokens hold across a restart and a rebuild, and the audit finds the change index equal to its rebuild")
    func stableAcrossRestartAndRebuild() async throws {
        let f = try await SharingFixture()
        _ = try await f.makeHierarchy()
        try await f.alice.deleteRecord(withID: SharingFixture.recordID("item"))
        let token = try f.alice.recordZoneChanges(in: SharingFixture.zone).syncToken
        let databaseToken = try f.alice.databaseChanges(.private).syncToken
        _ = try await f.alice.save(Record(recordType: "Item", recordID: SharingFixture.recordID("later")))
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok && report.projectionsMatch, "\(report.problems)")
        await f.ledger.close()

        var configuration = ShareLedger.Configuration(path: f.dir.child("ledger"), durability: .unsafeNoSync)
        configuration.randomSource = SeededRandom(seed: 7)
        let reopened = try ShareLedger.open(configuration)
        let alice = reopened.container(SharingFixture.container, userRecordName: "_alice")
        #expect(Self.names(try alice.recordZoneChanges(in: SharingFixture.zone, since: token)) == ["later"])
        _ = try await LedgerAudit(reopened).rebuildReadModels()
        let afterRebuild = try alice.recordZoneChanges(in: SharingFixture.zone, since: token)
        #expect(Self.names(afterRebuild) == ["later"] && afterRebuild.deletedRecordIDs.isEmpty)
        #expect(try alice.databaseChanges(.private, since: databaseToken).changedZoneIDs.map(\.zoneName) == ["Notes"])
        // The tombstone survives the rebuild.
        let all = try alice.recordZoneChanges(in: SharingFixture.zone, since: SyncToken(kind: .zone, subject: token.subject, position: token.subject))
        #expect(Self.deleted(all) == ["item"])
        await reopened.close()
    }

    @Test("a share is a record of its zone to sync: created, changed by its participants, deleted")
    func shareRecords() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let first = try f.alice.recordZoneChanges(in: SharingFixture.zone)
        #expect(first.changedShares.map(\.recordID.recordName) == [share.recordID.recordName])
        _ = try await f.alice.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_bob")), permission: .readOnly, to: share.url)
        let invited = try f.alice.recordZoneChanges(in: SharingFixture.zone, since: first.syncToken)
        #expect(invited.changedRecords.isEmpty && invited.changedShares.first?.participants.count == 2)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        _ = try await f.ledger.completeResidualTasks()
        let bobFirst = try f.bob.recordZoneChanges(in: RecordZoneID(zoneName: "Notes", ownerName: "_alice"))
        #expect(bobFirst.changedShares.first?.currentUserParticipant?.acceptanceStatus == .accepted)
        try await f.alice.deleteShare(share.url)
        let gone = try f.alice.recordZoneChanges(in: SharingFixture.zone, since: invited.syncToken)
        #expect(gone.changedShares.isEmpty && gone.deletedRecordIDs.map(\.recordName) == [share.recordID.recordName])
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok && report.projectionsMatch, "\(report.problems)")
        await f.ledger.close()
    }

    @Test("a derived/ an earlier release wrote without the change indexes is derived again at the next open for writing")
    func derivedWithoutTheIndexes() async throws {
        let f = try await SharingFixture()
        _ = try await f.makeHierarchy()
        await f.ledger.close()
        let path = f.dir.child("ledger")
        do {
            let environment = try Environment(options: EnvironmentOptions(path: path + "/" + DerivedState.directoryName))
            let names = try environment.databaseNames().filter { $0.hasPrefix("idx_record_changes") || $0.hasPrefix("idx_zone_changes") }
            #expect(!names.isEmpty)
            let databases = try environment.openDatabases(names.map { ($0, DatabaseFlags()) })
            try environment.write { txn in for database in databases { try txn.dropDatabase(database) } }
            environment.close()
        }
        #expect(await errorCode { try ShareLedger.open(DerivedStateTests.configuration(path, readOnly: true)) } == .readOnly)
        let ledger = try ShareLedger.open(DerivedStateTests.configuration(path))
        let alice = ledger.container(SharingFixture.container, userRecordName: "_alice")
        #expect(Set(try alice.recordZoneChanges(in: SharingFixture.zone).changedRecords.map(\.recordID.recordName)) == ["list", "item"])
        let report = try LedgerAudit(ledger).audit(scratchPath: f.dir.child("audit"))
        #expect(report.ok && report.projectionsMatch, "\(report.problems)")
        await ledger.close()
    }

    @Test("the change index keeps one entry per record: saving a record again moves it")
    func oneEntryPerRecord() async throws {
        let f = try await SharingFixture()
        _ = try await f.alice.save(RecordZone(zoneID: SharingFixture.zone))
        for name in ["r0", "r1", "r2"] { _ = try await f.alice.save(Record(recordType: "Item", recordID: SharingFixture.recordID(name))) }
        for round in 0..<20 {
            var record = try f.alice.record(for: SharingFixture.recordID("r\(round % 3)"))
            record.fields["n"] = .int64(Int64(round))
            _ = try await f.alice.save(record)
        }
        let entries = try f.ledger.read("counting") { txn in try f.ledger.models.scan(txn, f.ledger.models.recordChanges, prefix: []).count }
        #expect(entries == 6, "3 records: an entry and a pointer each")
        await f.ledger.close()
    }
}
