import Foundation
import GRDB
import ShareLedger
import ShareLedgerBenchmarkSupport
import Synchronization

/// The workload on SQLite through GRDB: a `DatabasePool` (WAL), with `PRAGMA synchronous = FULL` on
/// its writer connection (GRDB sets NORMAL for WAL; FULL syncs the WAL at every commit, as
/// ShareLedger's `durable` flushes every group commit).
///
/// Two ways to commit:
/// - ``Mode/transactionPerAction``: each action is one `try await pool.write { }`: GRDB's own way,
///   one transaction (and one WAL sync) per action; GRDB serializes the writes and never batches them.
/// - ``Mode/groupCommit``: the same group commit as ShareLedger's writer (`LogWriter`): one writer
///   thread takes every queued action (up to 1,024), runs them in one transaction and commits once,
///   then resumes each caller with its own result. A refused action writes nothing and does not
///   disturb the others; if the transaction fails as a whole, each action runs again alone.
final class SQLitePeer: PeerStore, Sendable {
    enum Mode: String {
        case transactionPerAction
        case groupCommit
    }

    let pool: DatabasePool
    let mode: Mode
    private let committer: GroupCommitter?

    init(path: String, mode: Mode) throws {
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        pool = try DatabasePool(path: path)
        try pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            try db.execute(sql: SQLiteModel.schema)
        }
        self.mode = mode
        committer = mode == .groupCommit ? GroupCommitter(pool: pool) : nil
        committer?.start()
    }

    /// `journal_mode` and `synchronous` of the writer connection, as checked after opening.
    func pragmas() throws -> (journalMode: String, synchronous: Int) {
        try pool.writeWithoutTransaction { db in
            (try String.fetchOne(db, sql: "PRAGMA journal_mode") ?? "?", try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1)
        }
    }

    func setUp(_ workload: Workload) async throws {
        try await pool.write { db in try SQLiteModel.setUp(db, workload) }
    }

    private func perform<T: Sendable>(_ action: @escaping @Sendable (Database, inout SQLiteModel.Head) throws -> T)
        async throws -> T
    {
        switch mode {
        case .transactionPerAction:
            return try await pool.write { db in
                var head = try SQLiteModel.readHead(db)
                return try action(db, &head)
            }
        case .groupCommit:
            let outcome = await committer!.submit { db, head in try action(db, &head) }
            return try outcome.get() as! T
        }
    }

    func createShare(caller: Int, lifecycle: Int) async throws -> String {
        let token = ShareToken.generate().text
        let shareRecordName = "Share-" + UUID().uuidString
        let ownerParticipantID = UUID().uuidString
        return try await perform { db, head in
            try SQLiteModel.createShare(
                db, &head, owner: Workload.owner(caller), root: Workload.record(lifecycle), title: "Board \(lifecycle)",
                token: token, shareRecordName: shareRecordName, ownerParticipantID: ownerParticipantID
            ).token
        }
    }

    func invite(caller: Int, invitee: Int, to share: String) async throws {
        let participantID = UUID().uuidString
        _ = try await perform { db, head in
            try SQLiteModel.invite(
                db, &head, owner: Workload.owner(caller), token: share, email: Workload.email(caller, invitee),
                newParticipantID: participantID)
        }
    }

    func fetchMetadata(caller: Int, invitee: Int, of share: String) async throws -> SQLiteModel.MetadataAnswer {
        try await perform { db, head in
            try SQLiteModel.fetchMetadata(db, &head, user: Workload.invitee(caller, invitee), token: share)
        }
    }

    func accept(caller: Int, invitee: Int, _ metadata: SQLiteModel.MetadataAnswer) async throws {
        _ = try await perform { db, head in
            try SQLiteModel.accept(db, &head, user: Workload.invitee(caller, invitee), metadata: metadata)
        }
    }

    /// Actions per committed transaction (group commit only), from `from` on.
    func batchSizes(from: Int) -> [Int] { Array((committer?.batchSizes() ?? []).dropFirst(from)) }
    var batchCount: Int { committer?.batchSizes().count ?? 0 }

    func eventCount() throws -> Int {
        try pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM events") ?? 0 }
    }

    func close() async {
        await committer?.stop()
        try? pool.close()
    }
}

/// ShareLedger's group commit, for GRDB: one thread, one transaction per batch of queued actions.
final class GroupCommitter: @unchecked Sendable {
    typealias Job = @Sendable (Database, inout SQLiteModel.Head) throws -> any Sendable
    typealias Outcome = Result<any Sendable, any Error>

    private struct Submission {
        var job: Job
        var continuation: UnsafeContinuation<Outcome, Never>
    }

    private let pool: DatabasePool
    private let maxBatch = 1_024
    private let condition = NSCondition()
    // Guarded by `condition`.
    private var queue: [Submission] = []
    private var stopping = false
    private var finished: [CheckedContinuation<Void, Never>] = []
    private var done = false
    private let sizes = Mutex<[Int]>([])

    init(pool: DatabasePool) { self.pool = pool }

    func start() {
        let thread = Thread { [self] in self.run() }
        thread.name = "SQLite.groupCommitter"
        thread.start()
    }

    func submit(_ job: @escaping Job) async -> Outcome {
        await withUnsafeContinuation { continuation in
            condition.lock()
            queue.append(Submission(job: job, continuation: continuation))
            if queue.count == 1 { condition.signal() }
            condition.unlock()
        }
    }

    func stop() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            condition.lock()
            stopping = true
            condition.signal()
            if done {
                condition.unlock()
                continuation.resume()
            } else {
                finished.append(continuation)
                condition.unlock()
            }
        }
    }

    func batchSizes() -> [Int] { sizes.withLock { $0 } }

    private func run() {
        while true {
            condition.lock()
            while queue.isEmpty && !stopping { condition.wait() }
            if queue.isEmpty {
                done = true
                let waiters = finished
                finished = []
                condition.unlock()
                for waiter in waiters { waiter.resume() }
                return
            }
            let count = min(queue.count, maxBatch)
            let batch = Array(queue.prefix(count))
            queue.removeFirst(count)
            condition.unlock()
            process(batch)
        }
    }

    private func process(_ batch: [Submission]) {
        do {
            var outcomes: [Outcome] = []
            try pool.writeWithoutTransaction { db in
                outcomes = []
                try db.inTransaction {
                    var head = try SQLiteModel.readHead(db)
                    for submission in batch {
                        do {
                            outcomes.append(.success(try submission.job(db, &head)))
                        } catch let refusal as SQLiteModel.Refusal {
                            // Refused before writing anything: the others commit.
                            outcomes.append(.failure(refusal))
                        }
                    }
                    return .commit
                }
            }
            sizes.withLock { $0.append(batch.count) }
            for (submission, outcome) in zip(batch, outcomes) { submission.continuation.resume(returning: outcome) }
        } catch {
            if batch.count > 1 {
                for submission in batch { process([submission]) }
            } else {
                batch[0].continuation.resume(returning: .failure(error))
            }
        }
    }
}
