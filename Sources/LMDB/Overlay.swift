import CLMDB

/// Writes to some databases of a transaction held in memory instead of LMDB, read back through the
/// same transaction as if they had been written: the first part of keeping derived state off the
/// commit path (issue 14, item 4). A transaction given an overlay (``Transaction/withOverlay(_:_:)``)
/// sends every put, delete and clear of a database the overlay covers to the overlay, and answers
/// every read of one from the overlay's layers over what LMDB holds; ``OverlayLayer/write(to:)``
/// later writes a layer's changes to LMDB in one pass.
///
/// An overlay is a stack of layers, oldest first. Only the newest takes writes; the older ones are
/// sealed (``seal()``) and only read. Reads see the newest change of a key, over LMDB's value.
///
/// Covered databases are read entry by entry (``Transaction/visitEntries(_:from:_:)``,
/// ``Transaction/visitValues(_:key:_:)``); a raw cursor on one is refused with
/// ``LMDBError/Code/throughOverlay``, since it would see LMDB alone.
///
/// Put flags that only speed LMDB up (`append`, `appendDup`) are not checked against the order
/// of the keys; `noOverwrite` and `noDupData` are, against the merged view.
///
/// Not thread-safe: one thread writes it, inside its transactions. A sealed layer is a value and may
/// be handed to another thread.
package final class Overlay {
    /// Which databases the overlay takes.
    package enum Scope: Sendable {
        /// Those in the environment's companion (``Database/inCompanion``).
        case companion
        /// Every database.
        case all
    }

    package let scope: Scope
    /// Sealed layers, oldest first.
    package private(set) var sealed: [OverlayLayer]
    /// The layer that takes writes.
    package private(set) var current = OverlayLayer()

    package init(scope: Scope, sealed: [OverlayLayer] = []) {
        self.scope = scope
        self.sealed = sealed
    }

    /// Whether `db`'s reads and writes go through the overlay.
    @inline(__always)
    package func covers(_ db: Database) -> Bool {
        switch scope {
        case .companion: db.inCompanion
        case .all: true
        }
    }

    /// Whether no layer holds a change.
    package var isEmpty: Bool { current.isEmpty && sealed.allSatisfy(\.isEmpty) }

    /// Seals the current layer (it is only read from now on) and starts an empty one; returns the
    /// layer sealed.
    @discardableResult
    package func seal() -> OverlayLayer {
        let layer = current
        sealed.append(layer)
        current = OverlayLayer()
        return layer
    }

    /// Drops the `count` oldest sealed layers (written to LMDB, and seen there by the transactions
    /// that will read through this overlay from now on).
    package func dropOldest(_ count: Int) {
        sealed.removeFirst(min(count, sealed.count))
    }

    /// The current layer as it is now, for ``restore(_:)``.
    package func checkpoint() -> OverlayLayer { current }

    /// Puts back the current layer of a ``checkpoint()`` (the writes since are undone).
    package func restore(_ layer: OverlayLayer) { current = layer }

    // MARK: Reads (newest change first)

    /// The newest change of (`table`, `key`) in a plain database: `.some(nil)` when it was deleted,
    /// `nil` when no layer changed it and LMDB's value holds; `hidesBase` when a layer cleared the
    /// whole table (LMDB's value is gone).
    func change(_ table: TableKey, _ key: [UInt8]) -> (change: [UInt8]??, hidesBase: Bool) {
        if let found = current.tables[table] {
            if let value = found.values[key] { return (value, false) }
            if found.cleared { return (nil, true) }
        }
        for layer in sealed.reversed() {
            guard let found = layer.tables[table] else { continue }
            if let value = found.values[key] { return (value, false) }
            if found.cleared { return (nil, true) }
        }
        return (nil, false)
    }

    /// The layers' changes of `table`, oldest first, from the newest layer that cleared it; and
    /// whether one did.
    func changes(_ table: TableKey) -> (tables: [OverlayLayer.Table], hidesBase: Bool) {
        var found: [OverlayLayer.Table] = []
        if let table = current.tables[table] { found.append(table) }
        if found.last?.cleared != true {
            for layer in sealed.reversed() {
                guard let table = layer.tables[table] else { continue }
                found.append(table)
                if table.cleared { break }
            }
        }
        return (found.reversed(), found.last?.cleared == true)
    }

    /// The values of `key` in a sorted-duplicates database: LMDB's (`base`) with every layer's changes.
    func values(_ table: TableKey, _ key: [UInt8], base: () throws -> [[UInt8]]) rethrows -> [[UInt8]]? {
        let (tables, hidesBase) = changes(table)
        let changes = tables.compactMap { $0.duplicates[key] }
        guard hidesBase || !changes.isEmpty else { return nil }
        var values = Set(changes.contains(where: \.cleared) || hidesBase ? [] : try base())
        for change in changes {
            if change.cleared { values.removeAll() }
            values.subtract(change.removed)
            values.formUnion(change.added)
        }
        return values.sorted { KeyOrder.compare($0, $1) < 0 }
    }

    /// The values of `key` in a sorted-duplicates database, as merged (LMDB's when no layer changed them).
    func mergedValues(_ table: TableKey, _ key: [UInt8], base: () throws -> [[UInt8]]) rethrows -> [[UInt8]] {
        try values(table, key, base: base) ?? base()
    }

    /// The entries a raw count of `table` misses: the sum of every layer's count change, and whether a
    /// layer cleared the table (then the count starts from zero).
    func countChange(_ table: TableKey) -> (delta: Int, hidesBase: Bool) {
        let (tables, hidesBase) = changes(table)
        return (tables.reduce(0) { $0 + $1.countDelta }, hidesBase)
    }

    func write(_ table: TableKey, database: Database, _ update: (inout OverlayLayer.Table) -> Void) {
        update(&current.tables[table, default: OverlayLayer.Table(database: database)])
    }
}

/// One layer of an ``Overlay``: the changes of some transactions to some databases.
package struct OverlayLayer: Sendable {
    struct DuplicateChange: Sendable {
        /// Every value the key had before is gone.
        var cleared = false
        var added: Set<[UInt8]> = []
        var removed: Set<[UInt8]> = []
    }

    struct Table: Sendable {
        /// The database, naming the copy (itself or its twin) the changes were made to.
        let database: Database
        /// Every entry the table had before is gone.
        var cleared = false
        /// A plain database's changes: the new value, or `nil` when deleted.
        var values: [[UInt8]: [UInt8]?] = [:]
        /// A sorted-duplicates database's changes, by key.
        var duplicates: [[UInt8]: DuplicateChange] = [:]
        /// The change of the number of entries this layer made; in a cleared table, the number of
        /// entries it holds.
        var countDelta = 0
    }

    var tables: [TableKey: Table] = [:]

    /// Whether the layer holds no change.
    package var isEmpty: Bool { tables.isEmpty }

    /// The number of changed keys (a plain database's) and values (a sorted-duplicates one's), and of
    /// cleared tables: what writing the layer costs, roughly.
    package var changeCount: Int {
        tables.values.reduce(0) { sum, table in
            sum + (table.cleared ? 1 : 0) + table.values.count
                + table.duplicates.values.reduce(0) { $0 + ($1.cleared ? 1 : 0) + $1.added.count + $1.removed.count }
        }
    }

    /// Writes the layer's changes to LMDB in `txn` (a write transaction without an overlay for these
    /// databases): clears first, then each table's keys in LMDB's order.
    package func write(to txn: borrowing Transaction) throws {
        for table in tables.values.sorted(by: { $0.database.dbi < $1.database.dbi }) {
            let db = table.database
            if table.cleared { try txn.clear(db) }
            if db.flags.contains(.dupSort) {
                for (key, change) in table.duplicates.sorted(by: { KeyOrder.compare($0.key, $1.key) < 0 }) {
                    try key.withUnsafeBytes { k in
                        if change.cleared {
                            try txn.delete(db, key: k, value: nil)
                        } else {
                            for value in change.removed { try value.withUnsafeBytes { _ = try txn.delete(db, key: k, value: $0) } }
                        }
                        for value in change.added.sorted(by: { KeyOrder.compare($0, $1) < 0 }) {
                            try value.withUnsafeBytes { try txn.put(db, key: k, value: $0) }
                        }
                    }
                }
            } else {
                for (key, value) in table.values.sorted(by: { KeyOrder.compare($0.key, $1.key) < 0 }) {
                    try key.withUnsafeBytes { k in
                        if let value {
                            try value.withUnsafeBytes { try txn.put(db, key: k, value: $0) }
                        } else {
                            try txn.delete(db, key: k, value: nil)
                        }
                    }
                }
            }
        }
    }
}

/// Names a table of an overlay: the LMDB handle a transaction uses for the database (itself or its
/// twin) and the environment it is in.
struct TableKey: Hashable, Sendable {
    let dbi: MDB_dbi
    let inCompanion: Bool
}

// MARK: - Transactions with an overlay

extension Transaction {
    /// Runs `body` with this transaction seen through `overlay`: puts, deletes and clears of the
    /// databases it covers go to its current layer, and reads of them see its layers over LMDB.
    /// Writes to the others go to LMDB as before. (The transaction lent to `body` shares this one's
    /// LMDB handles: it ends when this one does.)
    package func withOverlay<R>(_ overlay: Overlay, _ body: (borrowing Transaction) throws -> R) rethrows -> R {
        try body(
            Transaction(
                txn: handle, companion: companion, isWritable: isWritable, state: state, path: path,
                companionPath: companionPath, usesTwins: usesTwins, overlay: overlay))
    }

    /// The overlay's table of `db`, when `db` goes through one.
    @inline(__always)
    func overlayTable(_ db: Database) -> (Overlay, TableKey)? {
        guard let overlay, overlay.covers(db) else { return nil }
        return (overlay, TableKey(dbi: dbi(db), inCompanion: db.inCompanion))
    }

    /// The handle of the copy of `db` this transaction uses, as a database without a twin.
    func physical(_ db: Database) -> Database {
        Database(name: db.name, dbi: dbi(db), flags: db.flags, inCompanion: db.inCompanion)
    }

    /// LMDB's values of `key` in a sorted-duplicates database, in order.
    func baseValues(_ db: Database, key: UnsafeRawBufferPointer) throws -> [[UInt8]] {
        var values: [[UInt8]] = []
        try rawCursor(db) { cursor in
            var entry = try cursor.seek(exactly: key)
            while let current = entry {
                values.append(Array(current.value.bindMemory(to: UInt8.self)))
                entry = try cursor.nextDuplicate()
            }
        }
        return values
    }

    /// LMDB's value of `key`, copied.
    func baseValue(_ db: Database, key: UnsafeRawBufferPointer) throws -> [UInt8]? {
        var k = MDB_val(buffer: key)
        var v = MDB_val()
        let rc = mdb_get(handle(for: db), dbi(db), &k, &v)
        if rc == MDB_NOTFOUND { return nil }
        guard rc == MDB_SUCCESS else { throw fail(rc, "mdb_get(\(db.name))", db) }
        return Array(v.buffer.bindMemory(to: UInt8.self))
    }

    /// The merged value of `key` (the first, in a sorted-duplicates database).
    func overlayValue(_ overlay: Overlay, _ table: TableKey, _ db: Database, key: UnsafeRawBufferPointer) throws -> [UInt8]? {
        let keyBytes = Array(key.bindMemory(to: UInt8.self))
        if db.flags.contains(.dupSort) {
            if let values = try overlay.values(table, keyBytes, base: { try baseValues(db, key: key) }) { return values.first }
            return try baseValue(db, key: key)
        }
        let (change, hidesBase) = overlay.change(table, keyBytes)
        if let change { return change }
        return hidesBase ? nil : try baseValue(db, key: key)
    }

    func overlayPut(
        _ overlay: Overlay, _ table: TableKey, _ db: Database, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer,
        flags: PutFlags
    ) throws {
        let keyBytes = Array(key.bindMemory(to: UInt8.self))
        let valueBytes = Array(value.bindMemory(to: UInt8.self))
        let database = physical(db)
        if db.flags.contains(.dupSort) {
            let values = try overlay.values(table, keyBytes, base: { try baseValues(db, key: key) }) ?? baseValues(db, key: key)
            let exists = values.contains(valueBytes)
            if exists && flags.contains(.noDupData) { throw fail(MDB_KEYEXIST, "mdb_put(\(db.name))", db) }
            if !values.isEmpty && flags.contains(.noOverwrite) { throw fail(MDB_KEYEXIST, "mdb_put(\(db.name))", db) }
            overlay.write(table, database: database) { table in
                table.duplicates[keyBytes, default: OverlayLayer.DuplicateChange()].removed.remove(valueBytes)
                table.duplicates[keyBytes, default: OverlayLayer.DuplicateChange()].added.insert(valueBytes)
                if !exists { table.countDelta += 1 }
            }
        } else {
            let exists = try overlayValue(overlay, table, db, key: key) != nil
            if exists && flags.contains(.noOverwrite) { throw fail(MDB_KEYEXIST, "mdb_put(\(db.name))", db) }
            overlay.write(table, database: database) { table in
                table.values[keyBytes] = .some(valueBytes)
                if !exists { table.countDelta += 1 }
            }
        }
    }

    func overlayDelete(
        _ overlay: Overlay, _ table: TableKey, _ db: Database, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer?
    ) throws -> Bool {
        let keyBytes = Array(key.bindMemory(to: UInt8.self))
        let database = physical(db)
        if db.flags.contains(.dupSort) {
            let values = try overlay.values(table, keyBytes, base: { try baseValues(db, key: key) }) ?? baseValues(db, key: key)
            if let value {
                let valueBytes = Array(value.bindMemory(to: UInt8.self))
                guard values.contains(valueBytes) else { return false }
                overlay.write(table, database: database) { table in
                    table.duplicates[keyBytes, default: OverlayLayer.DuplicateChange()].added.remove(valueBytes)
                    table.duplicates[keyBytes, default: OverlayLayer.DuplicateChange()].removed.insert(valueBytes)
                    table.countDelta -= 1
                }
                return true
            }
            guard !values.isEmpty else { return false }
            overlay.write(table, database: database) { table in
                table.duplicates[keyBytes] = OverlayLayer.DuplicateChange(cleared: true)
                table.countDelta -= values.count
            }
            return true
        }
        guard try overlayValue(overlay, table, db, key: key) != nil else { return false }
        overlay.write(table, database: database) { table in
            table.values[keyBytes] = .some(nil)
            table.countDelta -= 1
        }
        return true
    }

    func overlayClear(_ overlay: Overlay, _ table: TableKey, _ db: Database) throws {
        // What this layer changed before no longer matters. A cleared table's count change counts
        // from zero (``Overlay/countChange(_:)``).
        overlay.write(table, database: physical(db)) { table in
            table = OverlayLayer.Table(database: table.database, cleared: true)
        }
    }

    func overlayEntryCount(_ overlay: Overlay, _ table: TableKey, _ db: Database) throws -> Int {
        let (delta, hidesBase) = overlay.countChange(table)
        if hidesBase { return delta }
        return try rawStatistics(db).entries + delta
    }

    /// Visits the merged entries of `db` from the first key at or after `start`.
    func overlayVisit(
        _ overlay: Overlay, _ table: TableKey, _ db: Database, from start: UnsafeRawBufferPointer?,
        _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        let (tables, hidesBase) = overlay.changes(table)
        let dupSort = db.flags.contains(.dupSort)
        // The keys the layers changed, from `start`, in order.
        var changed = Set<[UInt8]>()
        for table in tables {
            if dupSort { changed.formUnion(table.duplicates.keys) } else { changed.formUnion(table.values.keys) }
        }
        var keys = changed.filter { key in start.map { KeyOrder.compare(key, $0) >= 0 } ?? true }
            .sorted { KeyOrder.compare($0, $1) < 0 }[...]
        /// Emits the merged entries of an overlay key; false when `body` said stop.
        func emit(_ key: [UInt8]) throws -> Bool {
            try key.withUnsafeBytes { k in
                if dupSort {
                    let values = try overlay.values(table, key, base: { try baseValues(db, key: k) }) ?? []
                    for value in values where !(try value.withUnsafeBytes { try body(k, $0) }) { return false }
                    return true
                }
                guard let value = try overlayValue(overlay, table, db, key: k) else { return true }
                return try value.withUnsafeBytes { try body(k, $0) }
            }
        }
        if !hidesBase {
            var stopped = false
            try rawCursor(db) { cursor in
                var entry = try start.map { try cursor.seek(atLeast: $0) } ?? cursor.first()
                while let current = entry {
                    // Overlay keys before this one come first.
                    while let next = keys.first, KeyOrder.compare(next, current.key) < 0 {
                        keys.removeFirst()
                        guard try emit(next) else {
                            stopped = true
                            return
                        }
                    }
                    if let next = keys.first, KeyOrder.compare(next, current.key) == 0 {
                        keys.removeFirst()
                        guard try emit(next) else {
                            stopped = true
                            return
                        }
                        // Past every LMDB value of this key.
                        entry = dupSort ? try cursor.nextKey() : try cursor.next()
                        continue
                    }
                    guard try body(current.key, current.value) else {
                        stopped = true
                        return
                    }
                    entry = try cursor.next()
                }
            }
            if stopped { return }
        }
        for key in keys where !(try emit(key)) { return }
    }
}
