import ByteKeys
import Foundation
import LMDB
@testable import ShareLedger
@testable import ShareLedgerAudit
import TestSupport
import Testing

@Suite("Audit, rebuild, history")
struct AuditTests {
    @Test("a healthy ledger audits clean")
    func clean() async throws {
        let (f, _) = try await busyLedger()
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok, "\(report.problems)")
        #expect(report.projectionsMatch && report.indexesMatch)
        #expect(report.events == (try f.ledger.statistics().events))
        #expect(report.firstBadPosition == nil)
        await f.ledger.close()
    }

    @Test("a tampered payload byte is caught at its position")
    func tamperedPayload() async throws {
        let (f, _) = try await busyLedger()
        let target: UInt64 = 5
        try f.ledger.log.store.environment.write { txn in
            var bytes = try #require(try txn.get(f.ledger.log.store.log, key: BigEndian.bytes(of: target)))
            bytes[bytes.count / 2] ^= 0x01
            try txn.put(f.ledger.log.store.log, key: BigEndian.bytes(of: target), value: bytes)
        }
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(!report.ok)
        #expect(report.firstBadPosition == target)
        await f.ledger.close()
    }

    @Test("a corrupted read model is caught by the comparison; rebuild repairs it")
    func corruptedReadModel() async throws {
        let (f, share) = try await busyLedger()
        _ = try f.ledger.log.store.environment.write { txn in
            try txn.delete(f.ledger.models.sharesByUser, key: ReadModels.key(SharingFixture.container, "_bob", share.token.text))
        }
        var report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(!report.ok)
        #expect(!report.projectionsMatch)
        #expect(report.projectionDifferences.keys.contains("rm_shares_by_user"))

        let replayed = try await LedgerAudit(f.ledger).rebuildReadModels()
        #expect(replayed == report.events)
        report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok, "\(report.problems)")
        #expect(try f.bob.participatingShares(status: [.accepted]).count == 1)
        await f.ledger.close()
    }

    /// A digest per read model of the fixture's ledger (history indexes and journal as one set).
    private func digests(_ f: SharingFixture) throws -> [String: String] {
        try ReadModelRebuild.compare(f.ledger.log.store, f.ledger.log.store).digests
    }

    @Test("a rebuild changes in place only the entries that differ: missing, extra and changed, sorted duplicates included")
    func rebuildChangesOnlyDifferences() async throws {
        let (f, share) = try await busyLedger()
        let (store, m, healthy) = (f.ledger.log.store, f.ledger.models, try digests(f))

        // A healthy ledger: nothing to change.
        var outcome = try await LedgerAudit(f.ledger).rebuildReadModels(rewritingEverything: false)
        #expect(outcome.changedEntries == 0 && outcome.rewrittenDatabases.isEmpty)

        let byUser = ReadModels.key(SharingFixture.container, "_bob", share.token.text)
        try store.environment.write { txn in
            #expect(try txn.delete(m.sharesByUser, key: byUser))  // missing
            try txn.put(m.sharesByOwner, key: Array("forged\u{0}owner".utf8), value: [])  // extra
            let counter = try #require(try ReadModelRebuild.dump(store.environment, m.counters).first)
            try txn.put(m.counters, key: counter.0, value: BigEndian.bytes(of: UInt64(999)))  // changed
            try txn.put(m.shareHistory, key: Array(share.token.text.utf8), value: BigEndian.bytes(of: UInt64(1 << 40)))  // extra duplicate
            let journal = try #require(try ReadModelRebuild.dump(store.environment, m.historyJournal).last)
            #expect(try txn.delete(m.historyJournal, key: journal.0))  // missing
        }
        #expect(try digests(f) != healthy)

        outcome = try await LedgerAudit(f.ledger).rebuildReadModels(rewritingEverything: false)
        #expect(outcome.changedEntries == 5)
        #expect(outcome.rewrittenDatabases.isEmpty)
        #expect(try digests(f) == healthy)
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok, "\(report.problems)")
        #expect(try f.bob.participatingShares(status: [.accepted]).count == 1)

        // Rewriting everything gives the same read models.
        outcome = try await LedgerAudit(f.ledger).rebuildReadModels(rewritingEverything: true)
        #expect(outcome.changedEntries == 0)
        #expect(outcome.rewrittenDatabases == m.all.map(\.name))
        #expect(try digests(f) == healthy)
        await f.ledger.close()
    }

    @Test("a read model with more differences than the limit is rewritten whole; the others are changed in place")
    func rebuildRewritesBeyondTheLimit() async throws {
        let (f, _) = try await busyLedger()
        let (store, m, healthy) = (f.ledger.log.store, f.ledger.models, try digests(f))
        try store.environment.write { txn in
            for index in 0..<3 { try txn.put(m.sharesByOwner, key: Array("forged\u{0}\(index)".utf8), value: []) }
            try txn.put(m.userLookup, key: Array("forged".utf8), value: Array("_nobody".utf8))
        }
        let scratch = try LogStore.openLedger(EventLog.Configuration(path: f.dir.child("swap"), durability: .unsafeNoSync))
        defer { scratch.environment.close() }
        try LogReplay.replay(from: store, into: scratch)
        let outcome = try store.environment.write { txn in
            try scratch.environment.read { built in
                try ReadModelRebuild.swap(into: m, in: txn, from: scratch.models, in: built, limit: 2)
            }
        }
        #expect(outcome?.rewrittenDatabases == [m.sharesByOwner.name])
        #expect(outcome?.changedEntries == 1)
        #expect(try digests(f) == healthy)
        await f.ledger.close()
    }

    @Test("a log whose last key was damaged into a far position: audit reports the gap once and finishes")
    func damagedLastKey() async throws {
        let (f, _) = try await busyLedger()
        let store = f.ledger.log.store
        let head = try f.ledger.log.head().position.rawValue
        try store.environment.write { txn in
            let last = try #require(try txn.get(store.log, key: BigEndian.bytes(of: head)))
            try txn.delete(store.log, key: BigEndian.bytes(of: head))
            try txn.put(store.log, key: BigEndian.bytes(of: UInt64(1) << 40), value: last)
        }
        // Before, the audit looked each missing position up, one by one, up to 2^40.
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(!report.ok)
        #expect(report.problems.contains { $0.contains("events \(head) through \((UInt64(1) << 40) - 1) are missing") }, "\(report.problems)")
        await f.ledger.close()
    }

    @Test("a rebuild that fails half way leaves the old read models")
    func failedRebuildLeavesOldModels() async throws {
        let (f, _) = try await busyLedger()
        let before = try ReadModelRebuild.compare(f.ledger.log.store, f.ledger.log.store).digests
        // Corrupt one stored payload so the replay throws part way; the transaction aborts.
        let position: UInt64 = 8
        try f.ledger.log.store.environment.write { txn in
            let stored = try #require(try txn.get(f.ledger.log.store.log, key: BigEndian.bytes(of: position)))
            try txn.put(f.ledger.log.store.log, key: BigEndian.bytes(of: position), value: Array(stored.prefix(10)))
        }
        #expect(await errorCode { try await LedgerAudit(f.ledger).rebuildReadModels() } == .corruptedData)
        let after = try ReadModelRebuild.compare(f.ledger.log.store, f.ledger.log.store).digests
        #expect(before == after)
        await f.ledger.close()
    }

    @Test("history of a share, a user and a container, with windows, from the indexes")
    func history() async throws {
        let (f, share) = try await busyLedger()
        let shareHistory = try LedgerAudit(f.ledger).history(of: .share(share.url))
        let names = shareHistory.map(\.name)
        #expect(names.first == "ShareCreated")
        #expect(names.contains("ParticipantAdded"))
        #expect(names.contains("ShareMetadataFetched"))
        #expect(names.contains("ShareAccepted"))
        #expect(names.contains("ParticipantZoneCreated"))
        #expect(names.last == "ShareTitleChanged")
        #expect(shareHistory.map(\.envelope.position) == shareHistory.map(\.envelope.position).sorted())
        // Carol's failed fetch is in her history, not in the share's (she learned nothing).
        let carol = try LedgerAudit(f.ledger).history(of: .user("_carol", container: SharingFixture.container))
        #expect(carol.map(\.name) == ["UserRegistered", "ShareMetadataFetched"])
        #expect(carol.last?.summary.contains("error_code: 11") == true)
        // Her attempt is also in the share's history, for its auditors.
        #expect(shareHistory.contains { $0.envelope.actor == "_carol" && $0.summary.contains("error_code: 11") })

        let bob = try LedgerAudit(f.ledger).history(of: .user("_bob", container: SharingFixture.container)).map(\.name)
        #expect(bob == ["UserRegistered", "ParticipantAdded", "ShareMetadataFetched", "ShareAccepted", "ParticipantZoneCreated"])

        let all = try LedgerAudit(f.ledger).history(of: .container(SharingFixture.container))
        #expect(UInt64(all.count) == (try f.ledger.statistics().events))
        let middle = all[all.count / 2].envelope.position
        let end = LogPosition(middle.rawValue + 2)
        let window = try LedgerAudit(f.ledger).history(of: .container(SharingFixture.container), since: .position(middle), until: .position(end))
        #expect(window.map(\.envelope.position.rawValue) == [middle.rawValue, middle.rawValue + 1, middle.rawValue + 2])
        let byTime = try LedgerAudit(f.ledger).history(
            of: .container(SharingFixture.container), since: .time(all[3].envelope.recordedAt), until: .time(all[5].envelope.recordedAt))
        #expect(byTime.map(\.envelope.position) == all[3...5].map(\.envelope.position))
        #expect(try LedgerAudit(f.ledger).history(of: .container(SharingFixture.container), limit: 2).count == 2)
        await f.ledger.close()
    }
}

@Suite("State as of a past point")
struct AsOfTests {
    @Test("who could access a share then: before the invite, after the accept, after removal and deletion")
    func accessOverTime() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let created = try f.ledger.log.head().position
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readWrite, to: share.url)
        let invited = try f.ledger.log.head().position
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        let accepted = try f.ledger.log.head().position
        let acceptedAt = try #require(try f.ledger.log.event(at: accepted)).recordedAt
        _ = try await f.alice.removeParticipant(try f.bobID, from: share.url)
        let removed = try f.ledger.log.head().position
        try await f.alice.deleteShare(share.url)

        func bob(_ access: ShareAccess) -> ShareAccess.Entry? { access.participants.first { $0.userRecordName == "_bob" } }
        let atCreation = try LedgerAudit(f.ledger).access(to: share.url, at: .position(created))
        #expect(atCreation.existed)
        #expect(atCreation.participants.map(\.role) == [.owner])
        #expect(bob(try LedgerAudit(f.ledger).access(to: share.url, at: .position(invited)))?.hadAccess == false)
        let atAccept = try LedgerAudit(f.ledger).access(to: share.url, at: .position(accepted))
        #expect(bob(atAccept)?.hadAccess == true)
        #expect(bob(atAccept)?.permission == .readWrite)
        #expect(bob(try LedgerAudit(f.ledger).access(to: share.url, at: .time(acceptedAt)))?.hadAccess == true)
        #expect(bob(try LedgerAudit(f.ledger).access(to: share.url, at: .position(removed)))?.acceptanceStatus == .removed)
        let now = try LedgerAudit(f.ledger).access(to: share.url, at: .position(LogPosition(UInt64.max)))
        #expect(!now.existed)
        #expect(now.participants.isEmpty)
        #expect(try LedgerAudit(f.ledger).access(to: share.url, at: .position(LogPosition(1))).existed == false)
        await f.ledger.close()
    }

    @Test("a snapshot as of a position answers the same queries as the live ledger did then")
    func snapshot() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: LookupInfo(emailAddress: "bob@example.com"), permission: .readWrite)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        try await f.ledger.completeResidualTasks()
        let then = try f.ledger.log.head().position
        let bobThen = try f.bob.participatingShares()
        let statsThen = try f.ledger.statistics()
        try await f.alice.deleteShare(share.url)
        try await f.ledger.completeResidualTasks()
        #expect(try f.bob.participatingShares().isEmpty)

        let view = try LedgerAudit(f.ledger).snapshot(at: .position(then), path: f.dir.child("then"))
        let bobView = view.container(SharingFixture.container, userRecordName: "_bob")
        #expect(try bobView.participatingShares() == bobThen)
        #expect(try bobView.sharedDatabaseZones().count == 1)
        let viewStats = try view.statistics()
        #expect(viewStats.shares == statsThen.shares)
        #expect(viewStats.acceptedParticipants == statsThen.acceptedParticipants)
        #expect(await errorCode { try await bobView.leaveShare(share.url) } == .readOnly)
        await view.close()
        #expect(await errorCode { try LedgerAudit(f.ledger).snapshot(at: .position(then), path: f.dir.child("then")) } == .invalidArguments)
        await f.ledger.close()
    }
}
