import ByteKeys
import Foundation
import LMDB
import Logging
import Synchronization

/// What a read-only open made of derived state behind the log or not matching it
/// (``LogStore/catchUpDerivedStateInMemory(replay:logger:)``).
enum ReadOnlyDerived: Sendable {
    /// Caught up in memory.
    case caughtUp(DerivedCatchUp)
    /// Not caught up: what reads answer.
    case unusable(LedgerError)
}

/// The derived state a read-only open derived in memory: an overlay of the companion as it was
/// found (`base`: the position it recorded) with the missing events derived.
///
/// `@unchecked Sendable`: the overlay is sealed before this is shared and only read afterwards
/// (reading an overlay changes nothing in it).
final class DerivedCatchUp: @unchecked Sendable {
    let base: (position: UInt64, hash: EventHash)
    let usesTwins: Bool
    let overlay: Overlay

    init(base: (position: UInt64, hash: EventHash), usesTwins: Bool, overlay: Overlay) {
        self.base = base
        self.usesTwins = usesTwins
        self.overlay = overlay
    }
}

extension LogStore {
    /// Whether the derived databases live in the companion environment (``DerivedState``).
    package var defersDerivedState: Bool { derivedMeta != nil }

    /// Runs `body` in a read transaction in which the derived databases reflect the log's head.
    ///
    /// A read transaction begins in the companion, then in the log's environment, and the writer
    /// commits in the other order, so a reader that begins between the writer's two commits sees
    /// the log one batch ahead of the derived databases. Such a transaction is ended and begun
    /// again (the window is the writer's second commit, microseconds). When they still differ
    /// after ``consistentReadAttempts`` (the derived state is behind for good: a crash before any
    /// writer caught up, or a damaged event it cannot be brought past), `body` runs on what there
    /// is; the audit then reports the difference.
    ///
    /// Around a core that is not generic: a read makes no generic metadata at run time beyond the
    /// result's.
    package func read<R>(_ body: (borrowing Transaction) throws -> R) throws -> R {
        var result: R?
        do {
            try readConsistently { txn in result = try body(txn) }
        } catch {
            recordDerivedDamage(error)
            throw error
        }
        return try Environment.ran(result)
    }

    private func readConsistently(_ body: (borrowing Transaction) throws -> Void) throws {
        guard derivedMeta != nil else { return try environment.readWithoutResult(body) }
        if let readOnly = readOnlyDerived.withLock({ $0 }), !LogStore.readsAsStored {
            switch readOnly {
            case .unusable(let error): throw error
            case .caughtUp(let catchUp):
                var done = false
                try environment.readWithoutResult { txn in
                    // Until a writer (another process) moves the derived state on from where the
                    // catch-up found it: then it is caught up on disk, and read as usual.
                    guard txn.usesTwins == catchUp.usesTwins,
                        try recordedDerivedPosition(txn).map({ $0.position == catchUp.base.position && $0.hash == catchUp.base.hash })
                            ?? (catchUp.base.position == 0)
                    else { return }
                    try txn.withOverlay(catchUp.overlay) { try body($0) }
                    done = true
                }
                if done { return }
            }
        }
        var lastBehind = UInt64.max
        for _ in 1..<LogStore.consistentReadAttempts {
            var behindAt: UInt64? = nil
            var done = false
            try environment.readWithoutResult { txn in
                // The snapshots of this process's writer's last commit, which wrote the derived
                // position at its head: nothing to look at.
                let known = consistentCommit.load(ordering: .acquiring)
                if known.first != 0 && UInt(truncatingIfNeeded: txn.id) == known.first
                    && UInt(truncatingIfNeeded: txn.ownID) == known.second
                {
                    try body(txn)
                    done = true
                    return
                }
                derivedGapLooks.add(1, ordering: .relaxed)
                // Behind where an earlier read gave up: no writer is catching up, read it as it is.
                if let position = try derivedBehind(txn), position != derivedStuckAt.load(ordering: .relaxed) {
                    behindAt = position
                    return
                }
                try body(txn)
                done = true
            }
            if done { return }
            if let behindAt { lastBehind = behindAt }
            sched_yield()
        }
        derivedStuckAt.store(lastBehind, ordering: .relaxed)
        try environment.readWithoutResult(body)
    }

    /// While true (in the task, or on the thread, that sets it), ``read(_:)`` reads what `derived/`
    /// holds, without a read-only open's catch-up in memory: for the audit, which compares it with
    /// the log at the position it records.
    @TaskLocal package static var readsAsStored = false

    /// The reads of the derived databases as ``read(_:)`` would do them without a read-only open's
    /// catch-up (``catchUpDerivedStateInMemory(replay:logger:)``): what `derived/` holds, for the
    /// audit, which compares it with the log at the position it records.
    package func readAsStored<R>(_ body: (borrowing Transaction) throws -> R) throws -> R {
        try environment.read(body)
    }

    /// At most this many events are derived in memory by a read-only open whose derived state is
    /// behind the log (``catchUpDerivedStateInMemory(replay:logger:)``); further behind, reads answer
    /// ``LedgerError/Code/readOnly`` (open it for writing once).
    package static let inMemoryCatchUpLimit: UInt64 = 100_000

    /// Opened read-only: when the derived databases are behind the log's head (a process stopped
    /// between the log's commit and the companion's) or do not match it (their position carries
    /// another hash, or is beyond the head), derives what they lack from the log into an overlay in
    /// memory, through which ``read(_:)`` then reads: readers see the state the log implies, not a
    /// stale one, and nothing is written. More than ``inMemoryCatchUpLimit`` events to derive makes
    /// ``read(_:)`` answer ``LedgerError/Code/readOnly`` saying to open the ledger for writing once
    /// (which derives them on disk); reads of the log alone (``EventLog`` reads of events, the head,
    /// the chain) do not go through it. A log that does not derive (a damaged event) leaves derived/
    /// read as it is, as a writer would (`verify` and `audit` report the damage).
    /// ``readAsStored(_:)`` reads what is there.
    package func catchUpDerivedStateInMemory(replay: DerivedReplay?, logger: Logger) {
        guard defersDerivedState, environment.options.readOnly, let replay else { return }
        let path = environment.options.path
        do {
            let outcome: ReadOnlyDerived? = try environment.read { txn in
                let head = try readHead(txn)
                let recorded = try recordedDerivedPosition(txn)
                let derived = recorded ?? (0, .zero)
                if derived.position == head.position.rawValue && derived.hash == head.hash { return nil }
                var matches = false
                if recorded != nil && derived.position <= head.position.rawValue {
                    matches = try self.head(at: derived.position, txn)?.hash == derived.hash
                }
                let after = matches ? derived.position : 0
                let missing = head.position.rawValue - after
                guard missing <= LogStore.inMemoryCatchUpLimit else {
                    return .unusable(
                        LedgerError(
                            .readOnly, "derived/ of the ledger at \(path) "
                                + (matches ? "is \(missing) events behind the log" : "does not match the log")
                                + " (derived/ is a cache of the log), and opened read-only it is derived in memory only up to "
                                + "\(LogStore.inMemoryCatchUpLimit) events; open the ledger once for writing (e.g. "
                                + "`share-ledger worker --drain`), which brings derived/ up to the log, or work on a writable copy"))
                }
                logger.notice(
                    matches
                        ? "derived/ is behind the log; deriving the missing events in memory (read-only)"
                        : "derived/ does not match the log; deriving it in memory (read-only)",
                    metadata: ["derivedPosition": "\(derived.position)", "head": "\(head.position)"])
                // Every database, so that nothing a projection writes can reach a read-only LMDB.
                let overlay = Overlay()
                try txn.withOverlay(overlay) { view in
                    if !matches { try clearDerived(view) }
                    try derive(view, after: after, replay(self))
                    try writeDerivedPosition(view, head)
                }
                overlay.seal()
                return .caughtUp(DerivedCatchUp(base: derived, usesTwins: txn.usesTwins, overlay: overlay))
            }
            readOnlyDerived.withLock { $0 = outcome }
        } catch {
            // The log itself does not derive (a damaged event): readers see derived/ as it is, as a
            // writer would leave it, and `verify` and `audit` report the damage.
            let wrapped = LedgerError.wrap(error, while: "deriving in memory what derived/ of \(path) lacks")
            logger.error("the derived state could not be brought up to the log in memory", metadata: ["error": "\(wrapped)"])
        }
    }

    /// How many read transactions ``read(_:)`` begins, at most, looking for one whose derived
    /// databases reflect the log's head.
    package static let consistentReadAttempts = 200

    /// The derived databases' position when the log in `txn` holds an event after it; nil when
    /// they reflect the log's last entry. (One point read; a cursor on the log would cost an
    /// allocation per query.)
    func derivedBehind(_ txn: borrowing Transaction) throws -> UInt64? {
        let derived = try recordedDerivedPositionOnly(txn) ?? 0
        let next = try BigEndian.withBytes(of: derived &+ 1) { key in try txn.withValue(log, key: key) { _ in true } }
        return next == nil ? nil : derived
    }
}
