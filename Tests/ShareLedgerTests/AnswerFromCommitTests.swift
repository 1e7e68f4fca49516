import EventLog
import Foundation
import LMDB
@testable import ShareLedger
import Synchronization
import TestSupport
import Testing

/// A writer probe that, once armed, runs its action on the writer's thread after the next commit
/// that appended, before that commit's callers are resumed: another commit that lands right after
/// the caller's own, every time.
final class AfterCommitProbe: WriterProbe {
    private let action = Mutex<(@Sendable () -> Void)?>(nil)

    /// Runs `action` after the next commit that appends (once).
    func arm(_ action: @escaping @Sendable () -> Void) { self.action.withLock { $0 = action } }

    func committed(events: Int) {
        action.withLock { action in
            let run = action
            action = nil
            return run
        }?()
    }
}

/// A share action's answer is built in the commit step, in the writer's transaction, from the state
/// the command left: it shows exactly the caller's own commit, and no read transaction follows it.
@Suite("Answers from the commit")
struct AnswerFromCommitTests {
    static let container = SharingFixture.container
    static let bob = LookupInfo(userRecordID: RecordID(userRecordName: "_bob"))

    @Test("two commands in one group commit: each answer shows its own command's change, not the later one")
    func ownCommandInABatch() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let log = f.ledger.log
        let commits = log.groupCommits
        log.setWriterPaused(true)
        let alice = f.alice
        let first = Task { try await alice.setTitle("First", for: share.url) }
        try await waitForQueue(log, 1)
        let second = Task { try await alice.setTitle("Second", for: share.url) }
        try await waitForQueue(log, 2)
        log.setWriterPaused(false)
        let firstAnswer = try await first.value
        let secondAnswer = try await second.value
        let after = log.groupCommits
        #expect(after.commits == commits.commits + 1 && after.commands == commits.commands + 2, "both commands in one commit")
        #expect(firstAnswer.title == "First")
        #expect(secondAnswer.title == "Second")
        #expect(Int(firstAnswer.recordChangeTag).map { $0 + 1 } == Int(secondAnswer.recordChangeTag))
        await f.ledger.close()
    }

    @Test("a commit that lands right after the caller's, before the caller resumes, does not show in its answer")
    func commitRightAfter() async throws {
        let dir = TemporaryDirectory()
        let probe = AfterCommitProbe()
        var configuration = ShareLedger.Configuration(path: dir.child("ledger"), durability: .unsafeNoSync, clock: SteppingClock())
        configuration.randomSource = SeededRandom(seed: 7)
        configuration.writerProbe = probe
        let ledger = try ShareLedger.open(configuration)
        try await ledger.registerUser("_alice", in: Self.container, emailAddress: "alice@example.com")
        let alice = ledger.container(Self.container, userRecordName: "_alice")
        _ = try await alice.save(RecordZone(zoneID: SharingFixture.zone))
        _ = try await alice.save(Record(recordType: "List", recordID: SharingFixture.recordID("list")))
        let share = try await alice.share(rootRecord: SharingFixture.recordID("list"), title: "Before")
        // The other commit: the share's row goes, written by another transaction of the same file.
        let environment = ledger.log.store.environment
        let shares = ledger.models.shares
        let token = share.token.text
        probe.arm {
            _ = try? environment.write { txn in try txn.delete(shares, key: Array(token.utf8)) }
        }
        let answer = try await alice.setTitle("After", for: share.url)
        #expect(answer.title == "After")
        #expect(answer.participants.count == 1)
        // The later commit did land: a read now does not find the share.
        #expect(try ledger.read("test") { txn in try ledger.models.share(txn, token) } == nil)
        await ledger.close()
    }

    @Test("a batch whose transaction fails is run again command by command: the answers and the kept metadata come from the transactions that committed")
    func retriedAlone() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: Self.bob, permission: .readWrite)
        let log = f.ledger.log
        let ledger = f.ledger
        let alice = f.alice
        let bob = f.bob
        let commits = log.groupCommits
        log.setWriterPaused(true)
        let titled = Task { try await alice.setTitle("Retried", for: share.url) }
        try await waitForQueue(log, 1)
        let failing = Task {
            try await ledger.maintain { _ in throw LedgerError(.storageFailure, "a step that fails its whole batch") }
        }
        try await waitForQueue(log, 2)
        let fetched = Task { try await bob.shareMetadata(for: share.url) }
        try await waitForQueue(log, 3)
        log.setWriterPaused(false)
        let answer = try await titled.value
        #expect(await errorCode { try await failing.value } == .storageFailure)
        let metadata = try await fetched.value
        #expect(log.groupCommits.commits >= commits.commits + 2, "the batch failed and its commands ran alone")
        #expect(answer.title == "Retried")
        #expect(metadata.share.title == "Retried" && metadata.share.recordChangeTag == answer.recordChangeTag)
        let key = MetadataCache.Key(token: share.token.text, container: Self.container, viewer: "_bob")
        #expect(ledger.metadataCache?.entry(key)?.validator == UInt64(answer.recordChangeTag))
        #expect(try bob.shareMetadataWithoutLogging(for: share.url) == metadata)
        await ledger.close()
    }

    @Test("a logged fetch answers from a kept answer built at the share's tag, but not in a transaction that may have changed rows behind the tags")
    func keptAnswerInTheWriter() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: Self.bob, permission: .readWrite)
        let real = try await f.bob.shareMetadata(for: share.url)
        // The kept answer, marked so that a hit shows.
        let cache = try #require(f.ledger.metadataCache)
        let key = MetadataCache.Key(token: share.token.text, container: Self.container, viewer: "_bob")
        var entry = try #require(cache.entry(key))
        entry.metadata.share.title = "Marked"
        cache.store(key, entry)
        #expect(try await f.bob.shareMetadata(for: share.url).share.title == "Marked", "given from memory")
        // The same fetch batched after maintenance work (which may repair rows without moving tags).
        let log = f.ledger.log
        let ledger = f.ledger
        let bob = f.bob
        log.setWriterPaused(true)
        let maintenance = Task { try await ledger.maintain { _ in 0 } }
        try await waitForQueue(log, 1)
        let fetched = Task { try await bob.shareMetadata(for: share.url) }
        try await waitForQueue(log, 2)
        log.setWriterPaused(false)
        _ = try await maintenance.value
        #expect(try await fetched.value == real, "built again in that transaction")
        // A change of the share moves its tag: built again, and kept.
        _ = try await f.alice.setTitle("Changed", for: share.url)
        #expect(try await f.bob.shareMetadata(for: share.url).share.title == "Changed")
        #expect(cache.entry(key)?.metadata.share.title == "Changed")
        await f.ledger.close()
    }

    @Test("a share action opens no read transaction: not before its commit to check the account, not after it to answer")
    func noReadTransactions() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: Self.bob, permission: .readWrite)
        let store = f.ledger.store
        func reads() -> Int { store.readTransactions.load(ordering: .relaxed) }
        var before = reads()
        let metadata = try await f.bob.shareMetadata(for: share.url)
        #expect(reads() == before, "a logged fetch")
        #expect(metadata.participantStatus == .pending)
        before = reads()
        let accepted = try await f.bob.accept(metadata)
        #expect(reads() == before, "an accept")
        #expect(accepted.currentUserParticipant?.acceptanceStatus == .accepted)
        before = reads()
        let saved = try await f.alice.modifyRecords([.save(Record(recordType: "Item", recordID: SharingFixture.recordID("more")))])
        #expect(reads() == before, "a record change")
        #expect((try saved.first?.get())??.recordID.recordName == "more", "\(saved)")
        await f.ledger.close()
    }

    @Test("without an account a batch call fails whole, in the writer's transaction: nothing is logged or changed")
    func batchWithoutAccount() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let stranger = f.as_("_stranger")
        let head = try f.ledger.log.head().position
        #expect(await errorCode { try await stranger.shareMetadatas(for: [share.url]) } == .notAuthenticated)
        #expect(await errorCode { try await stranger.accept([try await f.alice.shareMetadata(for: share.url)]) } == .notAuthenticated)
        let afterOwnFetch = try f.ledger.log.head().position
        #expect(afterOwnFetch.rawValue == head.rawValue + 1, "only alice's own fetch was logged")
        #expect(
            await errorCode {
                try await stranger.modifyRecords([.save(Record(recordType: "Item", recordID: SharingFixture.recordID("x")))])
            } == .notAuthenticated)
        #expect(await errorCode { try await stranger.modifyRecords([]) } == .notAuthenticated)
        #expect(await errorCode { try await stranger.shareMetadatas(for: []) } == .notAuthenticated)
        #expect(try f.ledger.log.head().position == afterOwnFetch)
        await f.ledger.close()
    }

    @Test("opened names are kept for the next answer, and a forgotten person's are never given again")
    func forgetDropsOpenedNames() async throws {
        let (f, _, diary) = try await CryptoShreddingTests.ledgerWithDana()
        let vault = try #require(f.ledger.models.vault)
        let token = try Container.token(of: diary)
        func diaryTitle() throws -> String? {
            try f.ledger.read("test") { txn in try f.ledger.presenter.share(txn, token: token, viewer: nil)?.title }
        }
        #expect(try diaryTitle() == "\(CryptoShreddingTests.given)'s diary")
        let opened = vault.boxesOpened
        #expect(try diaryTitle() == "\(CryptoShreddingTests.given)'s diary")
        #expect(vault.boxesOpened == opened, "the second answer opens no box")
        try await f.ledger.forget(user: "_dana", in: Self.container)
        #expect(try diaryTitle() == nil, "the title sealed under the forgotten key is gone, kept or not")
        await f.ledger.close()
    }

    private func waitForQueue(_ log: EventLog, _ count: Int) async throws {
        for _ in 0..<2000 where log.queuedCommands < count { try await Task.sleep(for: .milliseconds(1)) }
        #expect(log.queuedCommands == count)
    }
}
