import EventLog
import LMDB
import SwiftProtobuf

/// Decoded read-model rows kept between reads, so a hot share, participant, zone or user is not
/// decoded again for every action that reads it (``ReadModels/message(_:_:_:_:)``).
///
/// Rows are written through: every put still writes the row's bytes in the transaction, and the
/// cache only saves decoding. The writer calls ``begin(serial:transactionID:)`` at every step and
/// ``committed(_:)`` from its commit observer. What a transaction reads or writes is kept as
/// *pending*; it joins the *committed* rows only when the writer reports that transaction committed,
/// so an aborted transaction's rows are never seen, and neither are those of an attempt the
/// environment retried after growing its map (each attempt has its own serial). Committed rows stay
/// valid while every transaction that commits is one the cache saw: when a write transaction begins
/// with an id that does not follow the last commit the cache saw (another process committed, or this
/// process committed something without it: raw appends, bookkeeping, maintenance), or a commit
/// declares it may have changed anything, the cache starts empty; so does a nested transaction
/// rolled back inside the open one (``forgetAll()``).
///
/// Bounded: past ``capacity`` rows it starts over. Not thread-safe: the writer's thread uses it.
final class RowCache: @unchecked Sendable {
    // @unchecked: used by one thread only, the log writer's; `committed(_:)` is called by the
    // writer's commit observer on that same thread.

    struct Key: Hashable {
        var db: String
        var key: [UInt8]

        /// The key's bytes in one call (the synthesized hash feeds the hasher one byte at a time,
        /// which showed in the writer's profile).
        func hash(into hasher: inout Hasher) {
            hasher.combine(db)
            key.withUnsafeBytes { hasher.combine(bytes: $0) }
        }
    }

    /// A row, or the knowledge that there is none.
    private enum Row {
        case absent
        case present(any SwiftProtobuf.Message)
    }


    let capacity: Int
    private var pending: [Key: Row] = [:]
    private var committedRows: [Key: Row] = [:]
    private var pendingSerial: UInt64 = 0
    /// The LMDB id of the last commit `committedRows` reflects.
    private var committedTransactionID: UInt64 = 0
    /// Rows found (for tests and profiles).
    private(set) var hits = 0

    init(capacity: Int = 50_000) { self.capacity = capacity }

    /// Called by a step of the writer before it reads: a new transaction (by its serial) starts with
    /// no pending rows, and with no committed ones unless it directly follows the last commit seen.
    func begin(serial: UInt64, transactionID: UInt64) {
        guard serial != pendingSerial else { return }
        pending.removeAll(keepingCapacity: true)
        pendingSerial = serial
        if transactionID != committedTransactionID &+ 1 { committedRows.removeAll(keepingCapacity: true) }
    }

    /// Forgets every row, pending and committed: after a nested transaction was rolled back inside
    /// the open one (an atomic batch that failed), whose reads and writes may be among them.
    func forgetAll() {
        pending.removeAll(keepingCapacity: true)
        committedRows.removeAll(keepingCapacity: true)
        committedTransactionID = 0
    }

    /// Called by the writer's commit observer after every commit.
    func committed(_ notice: CommitNotice) {
        if notice.serial == pendingSerial && !notice.invalidatedEverything {
            if committedRows.count + pending.count > capacity { committedRows.removeAll(keepingCapacity: true) }
            committedRows.merge(pending) { _, new in new }
            // A transaction that appended nothing may have written nothing, and then LMDB committed
            // nothing and gives its id to the next one: expect that id again. (If it did write
            // something, the next id is one more, and the cache starts over: never wrong.)
            committedTransactionID = notice.appended ? notice.transactionID : notice.transactionID &- 1
        } else {
            committedRows.removeAll(keepingCapacity: true)
            committedTransactionID = 0
        }
        pending.removeAll(keepingCapacity: true)
        pendingSerial = 0
    }

    /// The kept row of `key` in `db`: `.some(nil)` when it is known to be absent, `nil` when unknown.
    func row<M: SwiftProtobuf.Message>(_ type: M.Type, _ db: Database, _ key: [UInt8]) -> M?? {
        let cacheKey = Key(db: db.name, key: key)
        guard let row = pending[cacheKey] ?? committedRows[cacheKey] else { return nil }
        switch row {
        case .absent:
            hits += 1
            return .some(nil)
        case .present(let message):
            guard let typed = message as? M else { return nil }
            hits += 1
            return .some(typed)
        }
    }

    /// Keeps `row` (nil: there is none) as the row of `key` in `db` in the open transaction.
    func keep(_ db: Database, _ key: [UInt8], _ row: (any SwiftProtobuf.Message)?) {
        if pending.count >= capacity {
            // Both go: a committed row this transaction changed must not outlive its pending change.
            pending.removeAll(keepingCapacity: true)
            committedRows.removeAll(keepingCapacity: true)
        }
        pending[Key(db: db.name, key: key)] = row.map { .present($0) } ?? .absent
    }

    /// Whether rows of `db` are kept: the compact-row databases (``ReadModels/compactRowTypes``), whose
    /// rows are only ever written through ``ReadModels/put(_:_:_:_:)`` and deleted through
    /// ``ReadModels/deleteRow(_:_:_:)``.
    static func keeps(_ db: Database) -> Bool { ReadModels.compactRowTypes[db.name] != nil }
}
