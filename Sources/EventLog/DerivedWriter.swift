import Foundation
import LMDB
import Logging
import Synchronization

/// Writes the derived state behind the log's commits: the second half of the log-only commit
/// (`docs/architecture.md`, "Writing derived state behind the commit").
///
/// With ``EventLog/Configuration/writesDerivedStateBehind``, the writer's batch commits the log
/// alone: its steps write the derived databases through an ``Overlay`` of the companion, read back
/// by the batches after it. Once the log has committed, the batch's layer comes here, to a thread of
/// its own, which writes it (with the batches queued behind it, in one transaction) to the companion
/// with the `derived_meta`/`position` they bring it to, commits there, tells the commit observer,
/// publishes the new head and only then resumes the batch's callers: an answered caller's reads see
/// its writes. Meanwhile the writer decides and commits the next batches.
///
/// A layer whose position the companion already holds is skipped (another process derived those
/// events first). When writing fails (a full disk), the missing events are derived again from the
/// log in one write of both environments, as the writer would; when that fails too, the callers hear
/// the error (their events are stored, their derived state is not yet: the next write derives it),
/// and the writer goes back to writing derived state in its own commits.
final class DerivedWriter: @unchecked Sendable {
    // @unchecked: the queue and counters are guarded by `lock`; the rest is immutable or only
    // touched by the thread.

    /// One committed batch's derived state.
    struct Batch {
        var layer: OverlayLayer
        /// The log position the layer brings the derived state to.
        var position: UInt64
        var resumers: [@Sendable () -> Void]
        var failers: [(LedgerError) -> Void]
        var notice: CommitNotice
    }

    private let store: LogStore
    private let notifier: HeadNotifier
    private let logger: Logger
    private let replay: DerivedReplay?
    private let observer: @Sendable () -> (any CommitObserver)?
    /// At most this many batches wait here before the writer waits for room.
    static let maxQueued = 8

    private let lock = ConditionLock()
    // Guarded by `lock`.
    private var queue: [Batch] = []
    private var busy = false
    private var stopping = false
    private var stopped = false
    /// Layers written (or given up on) since the writer last asked (``takeWritten()``).
    private var written = 0
    /// A write and its recovery failed: the writer must stop writing behind.
    private var failed = false
    /// The id of this process's last commit in the companion (this thread's or the writer's own),
    /// nil when not known; and whether a commit by someone else was seen since the writer last set it.
    private var frontier: UInt64?
    private var foreign = false

    init(
        store: LogStore, notifier: HeadNotifier, logger: Logger, replay: DerivedReplay?,
        observer: @escaping @Sendable () -> (any CommitObserver)?
    ) {
        self.store = store
        self.notifier = notifier
        self.logger = logger
        self.replay = replay
        self.observer = observer
        let thread = Thread { [self] in self.run() }
        thread.name = "ShareLedger.derived"
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Queues a committed batch's layer (the writer, after the log's commit).
    func enqueue(_ batch: Batch) {
        lock.withLock {
            queue.append(batch)
            lock.broadcast()
        }
    }

    /// Waits until fewer than ``maxQueued`` batches wait (the writer, outside any transaction).
    func waitForRoom() {
        lock.withLock {
            while queue.count >= DerivedWriter.maxQueued && !stopped { lock.wait() }
        }
    }

    /// Waits until every queued batch is written (or given up on).
    func drain() {
        lock.withLock {
            while (!queue.isEmpty || busy) && !stopped { lock.wait() }
        }
    }

    /// The number of layers written (or given up on) since the last call, and whether writing
    /// failed for good (the writer then stops writing behind).
    func takeWritten() -> (count: Int, failed: Bool) {
        lock.withLock {
            defer { written = 0 }
            return (written, failed)
        }
    }

    /// Whether the companion holds only this process's commits up to `seen` (the last commit a
    /// transaction of the writer sees there): the derived state written behind, and the writer's
    /// decoded rows, are then still right.
    func onlyOurs(upTo seen: UInt64) -> Bool {
        lock.withLock {
            guard let frontier, !foreign else { return false }
            return seen <= frontier
        }
    }

    /// The writer committed in the companion itself, as `id` (nil: it may have, but the id is not
    /// known), with nothing queued here.
    func writerCommitted(companion id: UInt64?) {
        lock.withLock {
            frontier = id
            foreign = false
        }
    }

    /// Writes what is queued, then stops the thread.
    func stop() {
        lock.withLock {
            stopping = true
            lock.broadcast()
            while !stopped { lock.wait() }
        }
    }

    private func run() {
        while true {
            let batches = lock.withLock { () -> [Batch]? in
                while queue.isEmpty && !stopping { lock.wait() }
                if queue.isEmpty { return nil }
                busy = true
                defer { queue.removeAll(keepingCapacity: true) }
                return queue
            }
            guard let batches else { break }
            write(batches)
            lock.withLock {
                busy = false
                written += batches.count
                lock.broadcast()
            }
        }
        lock.withLock {
            stopped = true
            lock.broadcast()
        }
    }

    private func write(_ batches: [Batch]) {
        guard let last = batches.last else { return }
        let failedBefore = lock.withLock { failed }
        do {
            let transactionID: UInt64
            if failedBefore {
                transactionID = try catchUp()
            } else {
                transactionID = try store.environment.writeCompanion { txn in
                    let persisted = try store.derivedPosition(txn)
                    for batch in batches where batch.position > persisted.position { try batch.layer.write(to: txn) }
                    // Written again even when unchanged: every commit here then takes a new id,
                    // which is how commits by others are told apart (`onlyOurs(upTo:)`).
                    let now = try store.derivedPosition(txn)
                    try store.writeDerivedPosition(txn, LogHead(position: LogPosition(now.position), hash: now.hash))
                    let id = txn.id
                    lock.withLock {
                        if frontier.map({ $0 &+ 1 }) != id { foreign = true }
                    }
                    return id
                }
                lock.withLock { frontier = transactionID }
            }
            tell(batches, transactionID: transactionID)
        } catch {
            logger.error(
                "writing the derived state behind the log failed; deriving it from the log",
                metadata: ["error": "\(error)", "position": "\(last.position)"])
            do {
                tell(batches, transactionID: try catchUp())
            } catch {
                let ledgerError = LedgerError.wrap(
                    error, while: "storing the state derived from the committed events (they are stored; the next write derives it)")
                logger.error("deriving the state from the log failed", metadata: ["error": "\(ledgerError)"])
                lock.withLock { failed = true }
                if let observer = observer() {
                    observer.derivedCommitted(
                        CommitNotice(transactionID: 0, appended: true, invalidatedKeys: [], invalidatedEverything: true, serial: 0))
                }
                for batch in batches { for fail in batch.failers { fail(ledgerError) } }
            }
        }
    }

    /// Derives what the companion misses from the log, in one write of both environments (as the
    /// writer does before a batch); returns the companion's transaction id.
    private func catchUp() throws -> UInt64 {
        let id = try store.environment.write { txn in
            let head = try store.readHead(txn)
            if try store.catchUpDerivedState(txn, head: head, replay: replay, logger: logger) {
                try store.writeDerivedPosition(txn, head)
            }
            return txn.id
        }
        // Whether it wrote anything there is not known: the writer finds out.
        lock.withLock { frontier = nil }
        return id
    }

    /// After the companion's commit: the observer, the head, the callers.
    private func tell(_ batches: [Batch], transactionID: UInt64) {
        if let observer = observer() {
            var keys: [String] = []
            for batch in batches { keys += batch.notice.invalidatedKeys }
            observer.derivedCommitted(
                CommitNotice(
                    transactionID: transactionID, appended: true, invalidatedKeys: keys,
                    invalidatedEverything: batches.contains(where: \.notice.invalidatedEverything), serial: 0))
        }
        if let last = batches.last(where: \.notice.appended) { notifier.publish(last.position) }
        for batch in batches { for resume in batch.resumers { resume() } }
    }
}
