import Foundation
import LMDB
import Synchronization
@testable import ShareLedger
@testable import ShareLedgerAudit
import TestSupport
import Testing

/// The derived state written behind the log's commit (`DerivedWriter`, off by default): the same
/// decisions, answers and bytes as written in the commit; many callers at once; another writer's
/// commits; a close and a reopen.
@Suite("Derived state written behind the commit")
struct DerivedWriteBehindTests {
    static let container = SharingFixture.container

    private static func open(_ path: String, behind: Bool = true) throws -> ShareLedger {
        var configuration = ShareLedger.Configuration(path: path, durability: .unsafeNoSync, clock: SteppingClock())
        configuration.randomSource = SeededRandom(seed: 7)
        configuration.residualTaskWorker = nil
        configuration.writesDerivedStateBehind = behind
        return try ShareLedger.open(configuration)
    }

    @Test("random commands, written behind, on LMDB and in memory: the same decisions, answers, events and read-model bytes")
    func agreesWithTheInMemoryDomain() async throws {
        let outcomes = Counts()
        for numbers in fixedSequences(count: 24, length: 60...200) {
            try await InMemoryDomainTests.agree(numbers, sealing: false, behind: true, outcomes)
        }
        let totals = outcomes.value
        #expect((totals["behind"] ?? 0) > 1_000, "the batches were written behind: \(totals)")
        #expect(totals.keys.contains("addParticipant:ok") && totals.keys.contains("accept:ok"), "\(totals)")
    }

    /// One owner's cycle: a share, three invitations, their metadata, two accepts.
    @discardableResult
    private static func cycle(_ ledger: ShareLedger, owner: Int) async throws -> URL {
        let owner = ledger.container(container, userRecordName: "_owner\(owner)")
        let zone = RecordZoneID(zoneName: "Docs")
        _ = try await owner.save(RecordZone(zoneID: zone))
        _ = try await owner.save(Record(recordType: "Doc", recordID: RecordID(recordName: "doc", zoneID: zone)))
        let url = try await owner.share(rootRecord: RecordID(recordName: "doc", zoneID: zone)).url
        for name in ["_bob", "_carol", "_dave"] {
            _ = try await owner.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: name)), permission: .readWrite, to: url)
        }
        for name in ["_bob", "_carol"] {
            let invitee = ledger.container(container, userRecordName: name)
            let metadata = try await invitee.shareMetadata(for: url)
            #expect(metadata.participantStatus == .pending)
            let share = try await invitee.accept(metadata)
            // Read your writes: the answer, and a read right after it, show the accept.
            #expect(share.currentUserParticipant?.acceptanceStatus == .accepted)
            #expect(try invitee.shareMetadataWithoutLogging(for: url).participantStatus == .accepted)
        }
        return url
    }

    @Test("many callers at once: batches written behind, every answer reads its writes, and a rebuild and the audit agree")
    func manyCallers() async throws {
        let dir = TemporaryDirectory()
        let ledger = try Self.open(dir.child("ledger"))
        for name in ["_bob", "_carol", "_dave"] { try await ledger.registerUser(name, in: Self.container) }
        for owner in 0..<32 { try await ledger.registerUser("_owner\(owner)", in: Self.container) }
        let urls = try await withThrowingTaskGroup(of: URL.self) { group in
            for owner in 0..<32 { group.addTask { try await Self.cycle(ledger, owner: owner) } }
            return try await group.reduce(into: [URL]()) { $0.append($1) }
        }
        #expect(ledger.log.writer.batchesBehind.load(ordering: .relaxed) > 10)
        let comparison = try ledger.verifyReadModels(scratchPath: dir.child("rebuilt"))
        #expect(comparison.matches, "\(comparison.differences)")
        await ledger.close()
        // Opened again (in the commit this time): everything written behind is there.
        let reopened = try Self.open(dir.child("ledger"), behind: false)
        #expect(try reopened.audit(scratchPath: dir.child("audit")).ok)
        for url in urls {
            let share = try reopened.container(Self.container, userRecordName: "_bob").share(for: url)
            // The owner and the two who accepted.
            #expect(share.participants.filter { $0.acceptanceStatus == .accepted }.count == 3)
        }
        await reopened.close()
    }

    @Test("a write by someone else in between: the next batch writes its state itself and sees it; then writing behind resumes")
    func anotherWriterInBetween() async throws {
        let dir = TemporaryDirectory()
        let ledger = try Self.open(dir.child("ledger"))
        for name in ["_bob", "_carol", "_dave", "_owner0", "_owner1"] { try await ledger.registerUser(name, in: Self.container) }
        let url = try await Self.cycle(ledger, owner: 0)
        let behindBefore = ledger.log.writer.batchesBehind.load(ordering: .relaxed)
        #expect(behindBefore > 0)
        // Another writer (here: a write of this process outside the ledger's writer) retitles the
        // share's row in the derived databases.
        let owner = ledger.container(Self.container, userRecordName: "_owner0")
        let token = try owner.share(for: url).token.text
        let models = ledger.models
        try ledger.log.store.environment.write { txn in
            var state = try #require(try models.share(txn, token))
            state.changeTag += 1000
            try models.put(txn, models.shares, Array(token.utf8), state)
        }
        let changeTag = try owner.share(for: url).recordChangeTag
        // A change conditional on the tag written outside the writer succeeds: the writer saw it.
        _ = try await owner.addParticipant(
            LookupInfo(userRecordID: RecordID(userRecordName: "_owner1")), permission: .readOnly, to: url, ifChangeTag: changeTag)
        try await Self.cycle(ledger, owner: 1)
        #expect(ledger.log.writer.batchesBehind.load(ordering: .relaxed) > behindBefore, "writing behind resumed")
        await ledger.close()
    }
}
