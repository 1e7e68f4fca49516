import ByteKeys
import CLMDB

/// Book-keeping shared by a transaction and its cursors: the first LMDB error seen inside it.
///
/// It points at a variable of the function that runs the transaction (``withTransactionState(_:)``),
/// not at an object: the transaction and its cursors are lent (`~Copyable`, `borrowing`) to closures
/// that function calls, so they cannot outlive the variable. (An object here was an allocation per
/// transaction.)
struct TransactionState {
    private let first: UnsafeMutablePointer<LMDBError?>

    /// Runs `body` with a state whose variable lives for the call.
    @inline(__always)
    static func withTransactionState<R>(_ body: (TransactionState) throws -> R) rethrows -> R {
        var first: LMDBError? = nil
        return try withUnsafeMutablePointer(to: &first) { try body(TransactionState(first: $0)) }
    }

    private init(first: UnsafeMutablePointer<LMDBError?>) { self.first = first }

    /// The first error recorded.
    var firstError: LMDBError? { first.pointee }

    @inline(__always)
    func record(_ error: LMDBError) -> LMDBError {
        if first.pointee == nil { first.pointee = error }
        return error
    }
}

/// A transaction, handed to the closures of ``Environment/read(_:)`` and ``Environment/write(_:)``.
///
/// `~Copyable` and only ever lent (`borrowing`): it cannot be stored, returned or captured by an
/// escaping closure, so it cannot outlive its closure. Buffers it hands out point into the memory
/// map and are valid only until the closure returns: decode or copy them inside.
package struct Transaction: ~Copyable {
    @usableFromInline let handle: OpaquePointer
    /// The transaction in the companion environment (``Environment/attachCompanion(_:)``): the
    /// handle of databases with ``Database/inCompanion``. The same as `handle` when there is none.
    @usableFromInline let companion: OpaquePointer
    /// Whether puts and deletes are allowed.
    package let isWritable: Bool
    let state: TransactionState
    let path: String
    /// The companion environment's directory (errors there name it); `path` when there is none.
    let companionPath: String
    /// Whether the environment's switch was set when the transaction began
    /// (``Environment/setSwitch(_:key:twinsOpened:)``): databases with a twin are read and written there.
    package let usesTwins: Bool
    /// Where writes to the databases it covers go, and what reads of them see first
    /// (``withOverlay(_:_:)``); `nil` for LMDB alone.
    @usableFromInline let overlay: Overlay?

    init(
        txn: OpaquePointer, companion: OpaquePointer? = nil, isWritable: Bool, state: TransactionState, path: String,
        companionPath: String? = nil, usesTwins: Bool = false, overlay: Overlay? = nil
    ) {
        self.overlay = overlay
        self.handle = txn
        self.companion = companion ?? txn
        self.isWritable = isWritable
        self.state = state
        self.path = path
        self.companionPath = companionPath ?? path
        self.usesTwins = usesTwins
    }

    /// The LMDB transaction that holds `db`.
    @inlinable
    @inline(__always)
    func handle(for db: Database) -> OpaquePointer { db.inCompanion ? companion : handle }

    /// The handle of `db` in this transaction: its twin's when the transaction uses twins.
    @inlinable
    @inline(__always)
    func dbi(_ db: Database) -> MDB_dbi { usesTwins ? db.twinDBI : db.dbi }

    /// `db` itself (`twin` false) or its twin (`twin` true), whatever the switch: a handle without a
    /// twin that names that one database. `db` must have a twin.
    package func pinned(_ db: Database, twin: Bool) -> Database {
        precondition(db.hasTwin, "\(db.name) has no twin")
        let dbi = twin ? db.twinDBI : db.dbi
        return Database(
            name: twin ? db.name + Database.twinSuffix : db.name, dbi: dbi, flags: db.flags, inCompanion: db.inCompanion,
            checksummed: db.checksummed)
    }

    /// The copy of `db` this transaction does not use: its twin, or, in a transaction that uses
    /// twins, the database itself (``pinned(_:twin:)``).
    package func unused(_ db: Database) -> Database { pinned(db, twin: !usesTwins) }

    /// Whether the transaction spans an environment and its companion.
    package var spansCompanion: Bool { companion != handle }

    /// The transaction's id (`mdb_txn_id`): for a read transaction the id of the committed
    /// transaction whose snapshot it sees; for a write transaction the id it commits as. With a
    /// companion environment, the companion's: the databases derived from the others live there,
    /// and it is their changes that readers and caches follow.
    ///
    /// Through an overlay (a read-only open's derived state caught up in memory), the companion's id
    /// says nothing of what the overlay holds: then the id is this environment's, with the top bit
    /// set (so the two never compare equal).
    package var id: UInt64 {
        overlay != nil ? UInt64(mdb_txn_id(handle)) | (1 << 63) : UInt64(mdb_txn_id(companion))
    }

    /// The id of the transaction in this environment's own file (`mdb_txn_id` of the handle, never
    /// the companion's): for a write transaction, the id that file's last committed transaction
    /// takes if this one writes a database there; for a read transaction, the one it sees.
    package var ownID: UInt64 { UInt64(mdb_txn_id(handle)) }

    /// The error of an operation an overlay cannot answer for (``LMDBError/Code/throughOverlay``).
    func refusedThroughOverlay(_ operation: String, _ db: Database) -> LMDBError {
        state.record(
            LMDBError(
                code: .throughOverlay, operation: operation, path: db.inCompanion ? companionPath : path,
                message: "\(db.name) goes through an overlay of pending writes, which this operation would bypass; "
                    + "read it with visitEntries or visitValues (this is a bug in the caller: report it)"))
    }

    @usableFromInline
    func fail(_ rc: Int32, _ operation: String, _ db: Database? = nil) -> LMDBError {
        state.record(LMDBError(returnCode: rc, operation: operation, path: db?.inCompanion == true ? companionPath : path))
    }

    // MARK: Reads

    /// Calls `body` with the value stored under `key`, or returns `nil` when there is none.
    /// The buffer is valid only inside `body`.
    @inlinable
    @inline(__always)
    package func withValue<R>(
        _ db: Database, key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> R
    ) throws -> R? {
        if overlay != nil, let value = try overlaidValue(db, key: key) { return try value.map { try $0.withUnsafeBytes(body) } }
        return try rawValue(db, key: key, body)
    }

    /// ``withValue(_:key:_:)`` from LMDB, whether or not `db` goes through an overlay.
    @inlinable
    @inline(__always)
    func rawValue<R>(_ db: Database, key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R? {
        var k = MDB_val(buffer: key)
        var v = MDB_val()
        let rc = mdb_get(handle(for: db), dbi(db), &k, &v)
        if rc == MDB_NOTFOUND { return nil }
        guard rc == MDB_SUCCESS else { throw fail(rc, "mdb_get(\(db.name))", db) }
        guard db.checksummed else { return try body(v.buffer) }
        return try body(try checked(db, key: key, stored: v.buffer))
    }

    /// The value stored under `key`, copied; `nil` when there is none.
    @inlinable
    package func get(_ db: Database, key: some Collection<UInt8>) throws -> [UInt8]? {
        try withBytes(key) { try withValue(db, key: $0) { Array($0.bindMemory(to: UInt8.self)) } }
    }

    /// The value of `key` when `db` goes through the overlay: `.some(nil)` when it holds none, `nil`
    /// when `db` is not covered (read LMDB).
    @usableFromInline
    func overlaidValue(_ db: Database, key: UnsafeRawBufferPointer) throws -> [UInt8]?? {
        guard let (overlay, table) = overlayTable(db) else { return nil }
        return .some(try overlayValue(overlay, table, db, key: key))
    }

    /// Counters of `db` as seen by this transaction. Through an overlay, `entries` counts the
    /// overlay's changes and the other counters are LMDB's.
    package func statistics(_ db: Database) throws -> DatabaseStatistics {
        var statistics = try rawStatistics(db)
        if let (overlay, table) = overlayTable(db) { statistics.entries = try overlayEntryCount(overlay, table, db) }
        return statistics
    }

    /// LMDB's counters of `db`.
    func rawStatistics(_ db: Database) throws -> DatabaseStatistics {
        var stat = MDB_stat()
        let rc = mdb_stat(handle(for: db), dbi(db), &stat)
        guard rc == MDB_SUCCESS else { throw fail(rc, "mdb_stat(\(db.name))", db) }
        return DatabaseStatistics(
            entries: stat.ms_entries,
            depth: Int(stat.ms_depth),
            pages: stat.ms_branch_pages + stat.ms_leaf_pages + stat.ms_overflow_pages)
    }

    // MARK: Writes

    /// Stores `value` under `key`. (The default flags are spelled `PutFlags(rawValue: 0)`, not `[]`:
    /// the literal went through the generic `SetAlgebra` initializer at run time, 2.5 % of the
    /// writer's samples.)
    @inline(__always)
    package func put(
        _ db: Database, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, flags: PutFlags = PutFlags(rawValue: 0)
    ) throws {
        if let (overlay, table) = overlayTable(db) {
            return try overlayPut(overlay, table, db, key: key, value: value, flags: flags)
        }
        precondition(isWritable, "put in a read-only transaction")
        if db.checksummed {
            return try RowChecksum.withSealed(key: key, value: value) { sealed in
                try rawPut(db, key: key, value: sealed, flags: flags)
            }
        }
        try rawPut(db, key: key, value: value, flags: flags)
    }

    /// `mdb_put` of the bytes given, as they are.
    @inline(__always)
    func rawPut(_ db: Database, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, flags: PutFlags) throws {
        var k = MDB_val(buffer: key)
        var v = MDB_val(buffer: value)
        let rc = mdb_put(handle(for: db), dbi(db), &k, &v, flags.rawValue)
        guard rc == MDB_SUCCESS else { throw fail(rc, "mdb_put(\(db.name))", db) }
    }

    /// Stores `value` under `key`.
    @inlinable
    package func put(
        _ db: Database, key: some Collection<UInt8>, value: some Collection<UInt8>, flags: PutFlags = PutFlags(rawValue: 0)
    ) throws {
        // Inlinable (as are `delete` and `get` below): specialized where it is called, an array's
        // bytes are taken directly; called generically across the module boundary, every put went
        // through the witness tables of `Collection` (about 4 % of the writer's and the replay's
        // samples).
        try withBytes(key) { k in try withBytes(value) { v in try put(db, key: k, value: v, flags: flags) } }
    }

    /// Deletes `key` (for dupsort databases: every value, or only `value` when given).
    /// Returns whether anything was deleted.
    @discardableResult
    @inlinable
    package func delete(_ db: Database, key: some Collection<UInt8>, value: (some Collection<UInt8>)? = [UInt8]?.none)
        throws -> Bool
    {
        try withBytes(key) { k in
            if let value { return try withBytes(value) { v in try delete(db, key: k, value: v) } }
            return try delete(db, key: k, value: nil)
        }
    }

    /// Deletes `key` (for dupsort databases: every value, or only `value` when given), from buffers.
    /// Returns whether anything was deleted.
    @discardableResult
    package func delete(_ db: Database, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer?) throws -> Bool {
        if let (overlay, table) = overlayTable(db) { return try overlayDelete(overlay, table, db, key: key, value: value) }
        precondition(isWritable, "delete in a read-only transaction")
        if let value, db.checksummed {
            return try RowChecksum.withSealed(key: key, value: value) { sealed in try rawDelete(db, key: key, value: sealed) }
        }
        return try rawDelete(db, key: key, value: value)
    }

    /// `mdb_del` of the bytes given, as they are.
    func rawDelete(_ db: Database, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer?) throws -> Bool {
        var kv = MDB_val(buffer: key)
        let rc: Int32
        if let value {
            var vv = MDB_val(buffer: value)
            rc = mdb_del(handle(for: db), dbi(db), &kv, &vv)
        } else {
            rc = mdb_del(handle(for: db), dbi(db), &kv, nil)
        }
        if rc == MDB_NOTFOUND { return false }
        guard rc == MDB_SUCCESS else { throw fail(rc, "mdb_del(\(db.name))", db) }
        return true
    }

    /// Deletes `db` itself from the environment (`mdb_drop` with `del` 1); its handle is closed.
    package func dropDatabase(_ db: Database) throws {
        precondition(isWritable, "dropDatabase in a read-only transaction")
        if overlayTable(db) != nil { throw refusedThroughOverlay("mdb_drop(\(db.name), delete)", db) }
        let rc = mdb_drop(handle(for: db), dbi(db), 1)
        guard rc == MDB_SUCCESS else { throw fail(rc, "mdb_drop(\(db.name), delete)", db) }
    }

    /// Deletes every entry of `db`, keeping the database itself (`mdb_drop` with `del` 0).
    package func clear(_ db: Database) throws {
        if let (overlay, table) = overlayTable(db) { return try overlayClear(overlay, table, db) }
        precondition(isWritable, "clear in a read-only transaction")
        let rc = mdb_drop(handle(for: db), dbi(db), 0)
        guard rc == MDB_SUCCESS else { throw fail(rc, "mdb_drop(\(db.name))", db) }
    }

    // MARK: Nested transactions

    /// Runs `body` in a transaction nested in this write transaction (`mdb_txn_begin` with this one
    /// as the parent). When `body` returns `true`, its writes join this transaction (they commit or
    /// abort with it); when it returns `false` or throws, they are dropped and this transaction is as
    /// it was before. Inside `body` use only the nested transaction: this one and its cursors must
    /// not be touched until `body` returns (LMDB's rule for a parent with a live child). An LMDB error
    /// inside `body` is also this transaction's: it aborts the whole write, as anywhere else.
    package func nested(_ body: (borrowing Transaction) throws -> Bool) throws -> Bool {
        precondition(isWritable, "a nested transaction needs a write transaction")
        // Through an overlay, its current layer is put back when the nested writes are dropped; the
        // companion's handle is then not nested when the overlay takes all of its databases.
        let saved = overlay?.checkpoint()
        var companionChild: OpaquePointer?
        if spansCompanion && overlay == nil {
            var pointer: OpaquePointer?
            let rc = mdb_txn_begin(mdb_txn_env(companion), companion, 0, &pointer)
            guard rc == MDB_SUCCESS, let child = pointer else { throw fail(rc, "mdb_txn_begin(nested, companion)", nil) }
            companionChild = child
        }
        var childPointer: OpaquePointer?
        let rc = mdb_txn_begin(mdb_txn_env(handle), handle, 0, &childPointer)
        guard rc == MDB_SUCCESS, let child = childPointer else {
            if let companionChild { mdb_txn_abort(companionChild) }
            throw fail(rc, "mdb_txn_begin(nested)")
        }
        func abortBoth() {
            mdb_txn_abort(child)
            if let companionChild { mdb_txn_abort(companionChild) }
            if let saved { overlay?.restore(saved) }
        }
        let keep: Bool = try TransactionState.withTransactionState { childState in
            let keep: Bool
            do {
                keep = try body(
                    Transaction(
                        txn: child, companion: companionChild ?? (spansCompanion ? companion : nil), isWritable: true,
                        state: childState, path: path, companionPath: companionPath, usesTwins: usesTwins, overlay: overlay))
            } catch {
                abortBoth()
                if let first = childState.firstError { throw state.record(first) }
                throw error
            }
            if let first = childState.firstError {
                abortBoth()
                throw state.record(first)
            }
            return keep
        }
        guard keep else {
            abortBoth()
            return false
        }
        // mdb_txn_commit frees the child, success or not. A nested commit writes nothing to disk:
        // it only hands its pages to the parent, so the two cannot end differently but by an
        // allocation failure, which fails the whole write (the parents abort).
        let committed = mdb_txn_commit(child)
        guard committed == MDB_SUCCESS else {
            if let companionChild { mdb_txn_abort(companionChild) }
            throw fail(committed, "mdb_txn_commit(nested)")
        }
        if let companionChild {
            let rc = mdb_txn_commit(companionChild)
            guard rc == MDB_SUCCESS else { throw fail(rc, "mdb_txn_commit(nested, companion)") }
        }
        return true
    }

    // MARK: Cursors

    /// Calls `body` with a cursor on `db`; the cursor is closed when `body` returns. A database that
    /// goes through an overlay has no cursor (it would see LMDB alone): read it with
    /// ``visitEntries(_:from:_:)`` and ``visitValues(_:key:_:)``. (A read-only transaction's cursor
    /// on one whose overlay holds no change of it sees what the overlay would: it is allowed.)
    package func withCursor<R>(_ db: Database, _ body: (borrowing Cursor) throws -> R) throws -> R {
        if readsThroughOverlay(db) { throw refusedThroughOverlay("mdb_cursor_open(\(db.name))", db) }
        return try rawCursor(db, body)
    }

    /// Whether a cursor on `db` would miss what this transaction's overlay holds: `db` goes through
    /// the overlay and the transaction may write, or the overlay holds changes of it.
    package func readsThroughOverlay(_ db: Database) -> Bool {
        guard let (overlay, table) = overlayTable(db) else { return false }
        return isWritable || overlay.touches(table)
    }

    /// Visits the entries of `db` in key order (sorted duplicates each as an entry of their own) from
    /// the first key at or after `start` (the first key when `nil`) while `body` returns true; through
    /// an overlay, as merged.
    package func visitEntries(
        _ db: Database, from start: UnsafeRawBufferPointer?,
        _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        if let (overlay, table) = overlayTable(db) { return try overlayVisit(overlay, table, db, from: start, body) }
        try rawCursor(db) { cursor in
            var entry = try start.map { try cursor.seek(atLeast: $0) } ?? cursor.first()
            while let current = entry, try body(current.key, current.value) {
                entry = try cursor.next()
            }
        }
    }

    /// Visits the values of `key` in a sorted-duplicates database, in order; through an overlay, as
    /// merged.
    package func visitValues(_ db: Database, key: UnsafeRawBufferPointer, _ body: (_ value: UnsafeRawBufferPointer) throws -> Void)
        throws
    {
        if let (overlay, table) = overlayTable(db) {
            let keyBytes = OverlayKey(Array(key.bindMemory(to: UInt8.self)))
            let values = try overlay.mergedValues(table, keyBytes, base: { try baseValues(db, key: key) })
            for value in values { try value.withUnsafeBytes(body) }
            return
        }
        try rawVisitValues(db, key: key, body)
    }

    /// ``visitValues(_:key:_:)`` in LMDB, whether or not `db` goes through an overlay.
    func rawVisitValues(_ db: Database, key: UnsafeRawBufferPointer, _ body: (_ value: UnsafeRawBufferPointer) throws -> Void)
        throws
    {
        try rawCursor(db) { cursor in
            var entry = try cursor.seek(exactly: key)
            while let current = entry {
                try body(current.value)
                entry = try cursor.nextDuplicate()
            }
        }
    }

    /// ``withCursor(_:_:)`` whether or not `db` goes through an overlay.
    func rawCursor<R>(_ db: Database, _ body: (borrowing Cursor) throws -> R) throws -> R {
        var cursorPointer: OpaquePointer?
        let rc = mdb_cursor_open(handle(for: db), dbi(db), &cursorPointer)
        guard rc == MDB_SUCCESS, let cursor = cursorPointer else { throw fail(rc, "mdb_cursor_open(\(db.name))", db) }
        defer { mdb_cursor_close(cursor) }
        return try body(
            Cursor(
                handle: cursor, database: db, isWritable: isWritable, state: state,
                path: db.inCompanion ? companionPath : path))
    }

    /// The value of a row of the checksummed `db` without its trailer, once the trailer matches;
    /// otherwise the error, recorded (the row was damaged at rest).
    @usableFromInline
    func checked(_ db: Database, key: UnsafeRawBufferPointer, stored: UnsafeRawBufferPointer) throws(LMDBError)
        -> UnsafeRawBufferPointer
    {
        do {
            return try RowChecksum.verified(key: key, stored: stored, database: db.name, path: db.inCompanion ? companionPath : path)
        } catch { throw state.record(error) }
    }
}

extension MDB_val {
    @inlinable
    @inline(__always)
    init(buffer: UnsafeRawBufferPointer) {
        self.init(mv_size: buffer.count, mv_data: UnsafeMutableRawPointer(mutating: buffer.baseAddress))
    }

    @inlinable
    @inline(__always)
    var buffer: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: mv_data, count: mv_size)
    }
}
