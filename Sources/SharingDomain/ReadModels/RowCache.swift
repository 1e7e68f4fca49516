import EventLog
import Foundation

/// Decoded read-model rows kept between reads, so a hot share, participant, zone or user is not
/// decoded again for every action that reads it (``ReadModels/message(_:_:_:_:)``).
///
/// Rows are written through: every put still writes the row's bytes in the transaction, and the
/// cache only saves decoding. The writer calls ``begin(serial:transactionID:)`` at every step and
/// ``committed(_:)`` from its commit observer. What a transaction reads or writes goes straight into
/// the kept rows, and the row it replaced (or that there was none) onto an undo list; the list is
/// dropped when the writer reports that transaction committed, and played back (newest first) when
/// a step of another transaction begins without that report, so an aborted transaction's rows are
/// never seen, and neither are those of an attempt the environment retried after growing its map
/// (each attempt has its own serial). Kept rows stay valid while every transaction that commits is
/// one the cache saw: when a write transaction begins with an id that does not follow the last
/// commit the cache saw (another process committed, or this process committed something without it:
/// raw appends, bookkeeping, maintenance), or a commit declares it may have changed anything, the
/// cache starts empty; so does a nested transaction rolled back inside the open one
/// (``forgetAll()``).
///
/// (One dictionary and an undo list rather than a dictionary of pending rows merged into the
/// committed ones at every commit: the merge hashed every row again, and a read looked in both.)
///
/// Bounded: past ``capacity`` rows it starts over. Not thread-safe: the writer's thread uses it.
package final class RowCache: @unchecked Sendable {
    // @unchecked: used by one thread only, the log writer's; `committed(_:)` is called by the
    // writer's commit observer on that same thread.

    /// A row's table and key. The key is held as an array of bytes or, for a table keyed by one
    /// name (a share's token), as the string whose UTF-8 bytes it is: a lookup by a token then copies
    /// nothing. The two forms of the same bytes are the same key.
    package struct Key: Hashable {
        package var db: Int
        private var storage: Storage

        private enum Storage {
            case bytes([UInt8])
            case text(String)
        }

        /// The key `key` in the table numbered `db`.
        package init(db: Int, key: [UInt8]) {
            self.db = db
            storage = .bytes(key)
        }

        /// The key made of the UTF-8 bytes of `text` in the table numbered `db`.
        package init(db: Int, text: String) {
            self.db = db
            storage = .text(text)
        }

        /// Calls `body` with the key's bytes.
        @inline(__always)
        package func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
            switch storage {
            case .bytes(let bytes): return try bytes.withUnsafeBytes(body)
            case .text(let text):
                // A native string's bytes in place; any other form through a copy made native.
                if let result = try text.utf8.withContiguousStorageIfAvailable({ try body(UnsafeRawBufferPointer($0)) }) {
                    return result
                }
                var copy = text
                return try copy.withUTF8 { try body(UnsafeRawBufferPointer($0)) }
            }
        }

        /// The key's bytes in one call (the synthesized hash feeds the hasher one byte at a time,
        /// which showed in the writer's profile).
        package func hash(into hasher: inout Hasher) {
            hasher.combine(db)
            withBytes { hasher.combine(bytes: $0) }
        }

        package static func == (a: Key, b: Key) -> Bool {
            guard a.db == b.db else { return false }
            // Two arrays compare directly. (Strings are compared by their bytes below: `==` on
            // strings is canonical equivalence, under which different bytes can be equal.)
            if case .bytes(let x) = a.storage, case .bytes(let y) = b.storage { return x == y }
            return a.withBytes { x in
                b.withBytes { y in x.count == y.count && (x.isEmpty || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0) }
            }
        }
    }

    /// A row, or the knowledge that there is none.
    private enum Row {
        case absent
        case present(CachedRow)
    }

    package let capacity: Int
    // `@exclusivity(unchecked)` on the stored properties: the cache is used by one thread, and no
    // method of it lends one of them to code that could reach the cache again (no closure of a
    // caller runs inside one). The runtime's access checks were about 1,700 instructions per share
    // action.
    @exclusivity(unchecked) private var rows: [Key: Row] = [:]
    /// What the open transaction replaced, oldest first: each key with its row before (nil: the
    /// cache knew nothing of it).
    @exclusivity(unchecked) private var undo: [(key: Key, before: Row?)] = []
    @exclusivity(unchecked) private var openSerial: UInt64 = 0
    /// The LMDB id of the last commit `rows` reflects.
    @exclusivity(unchecked) private var committedTransactionID: UInt64 = 0
    /// Rows found (for tests and profiles).
    @exclusivity(unchecked) package private(set) var hits = 0
    /// The buffer ``knows(_:_:_:)`` builds its keys in.
    @exclusivity(unchecked) private var scratch: [UInt8] = []

    package init(capacity: Int = 50_000) { self.capacity = capacity }

    /// Called by a step of the writer before it reads: a new transaction (by its serial) first takes
    /// back what an earlier one left uncommitted, and keeps no rows unless it directly follows the
    /// last commit seen.
    package func begin(serial: UInt64, transactionID: UInt64) {
        guard serial != openSerial else { return }
        rollBack()
        openSerial = serial
        if transactionID != committedTransactionID &+ 1 { rows.removeAll(keepingCapacity: true) }
    }

    /// Plays the undo list back, newest first, and empties it.
    private func rollBack() {
        while let (key, before) = undo.popLast() { rows[key] = before }
    }

    /// Forgets every row: after a nested transaction was rolled back inside the open one (an atomic
    /// batch that failed), whose reads and writes may be among them.
    package func forgetAll() {
        rows.removeAll(keepingCapacity: true)
        undo.removeAll(keepingCapacity: true)
        committedTransactionID = 0
    }

    /// Called by the writer's commit observer after every commit.
    package func committed(_ notice: CommitNotice) {
        if notice.serial == openSerial && !notice.invalidatedEverything {
            undo.removeAll(keepingCapacity: true)
            // A transaction that appended nothing may have written nothing, and then LMDB committed
            // nothing and gives its id to the next one: expect that id again. (If it did write
            // something, the next id is one more, and the cache starts over: never wrong.)
            committedTransactionID = notice.appended ? notice.transactionID : notice.transactionID &- 1
        } else {
            rows.removeAll(keepingCapacity: true)
            undo.removeAll(keepingCapacity: true)
            committedTransactionID = 0
        }
        openSerial = 0
    }

    /// The kept row of `key` in `db`: `.some(nil)` when it is known to be absent, `nil` when unknown.
    @inline(__always)
    package func row<M: StoredRow>(_ type: M.Type, _ db: ReadModelTable, _ key: [UInt8]) -> M?? {
        row(M.self, Key(db: db.index, key: key))
    }

    /// The kept row of `key`: `.some(nil)` when it is known to be absent, `nil` when unknown.
    @inline(__always)
    package func row<M: StoredRow>(_ type: M.Type, _ key: Key) -> M?? {
        guard let row = rows[key] else { return nil }
        switch row {
        case .absent:
            hits += 1
            return .some(nil)
        case .present(let row):
            guard let typed = M(cached: row) else { return nil }
            hits += 1
            return .some(typed)
        }
    }

    /// Whether a row of `key` in `db` is kept as present (true) or known absent (false); nil when
    /// unknown. Copies no row: for decisions that only need to know that a user exists.
    package func knows(_ db: ReadModelTable, _ key: [UInt8]) -> Bool? {
        guard let row = rows[Key(db: db.index, key: key)] else { return nil }
        hits += 1
        if case .absent = row { return false }
        return true
    }

    /// ``knows(_:_:)`` for the key of `first`'s UTF-8 bytes, a 0 byte and `second`'s
    /// (``ReadModels/key(_:_:)``: a user's row), built in a buffer this cache reuses: a lookup makes
    /// no array (the key is not kept, so the buffer is free again when this returns).
    package func knows(_ db: ReadModelTable, _ first: String, _ second: String) -> Bool? {
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: first.utf8)
        scratch.append(0)
        scratch.append(contentsOf: second.utf8)
        return knows(db, scratch)
    }

    /// Keeps `row` (nil: there is none) as the row of `key` in `db` in the open transaction. A row of
    /// a type the cache cannot hold (no ``StoredRow/cached`` form: a protobuf row) makes the key
    /// unknown instead, so that no later read of it is answered from what was kept before.
    @inline(__always)
    package func keep<M: StoredRow>(_ db: ReadModelTable, _ key: [UInt8], row: M?) {
        keep(Key(db: db.index, key: key), row: row)
    }

    /// Keeps `row` (nil: there is none) as the row of `key` in the open transaction; a row the
    /// cache cannot hold makes the key unknown.
    @inline(__always)
    package func keep<M: StoredRow>(_ key: Key, row: M?) {
        guard let row else { return keep(key, nil) }
        guard let cached = row.cached else { return forget(key) }
        keep(key, cached)
    }

    /// Makes `cacheKey` unknown in the open transaction (undone with it).
    private func forget(_ cacheKey: Key) {
        if let before = rows.removeValue(forKey: cacheKey) { undo.append((cacheKey, before)) }
    }

    /// Keeps `row` (nil: there is none) as the row of `key` in `db` in the open transaction.
    package func keep(_ db: ReadModelTable, _ key: [UInt8], _ row: CachedRow?) {
        keep(Key(db: db.index, key: key), row)
    }

    /// Keeps `row` (nil: there is none) as the row of `cacheKey` in the open transaction.
    package func keep(_ cacheKey: Key, _ row: __owned CachedRow?) {
        if rows.count >= capacity {
            // Start over. Every row this transaction kept goes too, so the undo list has nothing
            // left to take back: what it keeps from here on is undone key by key (to "unknown").
            rows.removeAll(keepingCapacity: true)
            undo.removeAll(keepingCapacity: true)
        }
        // The row moved into the entry, not copied (`map` on the optional copied it).
        let entry: Row
        if let row { entry = .present(row) } else { entry = .absent }
        let before = rows.updateValue(entry, forKey: cacheKey)
        undo.append((cacheKey, before))
    }

    /// Whether rows of `db` are kept: the compact-row databases (``ReadModels/compactRowTypes``), whose
    /// rows are only ever written through ``ReadModels/put(_:_:_:_:)`` and deleted through
    /// ``ReadModels/deleteRow(_:_:_:)``.
    package static func keeps(_ db: ReadModelTable) -> Bool {
        // The names of `compactRowTypes`, compared directly (small strings compare as two words; the
        // dictionary lookup hashed the name for every row read and written). `RowCacheTests` checks
        // that the two agree.
        switch db.name {
        case "rm_shares", "rm_participants", "rm_zones", "rm_users": return true
        default: return false
        }
    }
}
