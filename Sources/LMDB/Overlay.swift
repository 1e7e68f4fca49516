import ByteKeys
import CLMDB

/// Writes of a transaction held in memory instead of LMDB, read back through the same transaction
/// as if they had been written: a read-only open derives there what `derived/` lacks. A transaction
/// given an overlay (``Transaction/withOverlay(_:_:)``) sends every put, delete and clear to the
/// overlay, and answers every read from the overlay's layers over what LMDB holds;
/// ``OverlayLayer/write(to:)`` writes a layer's changes to LMDB in one pass.
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
    /// Sealed layers, oldest first.
    package private(set) var sealed: [OverlayLayer] = []
    /// The layer that takes writes.
    package private(set) var current = OverlayLayer()

    /// An empty overlay, which takes every database of the transactions it is given to.
    package init() {}

    /// Whether no layer holds a change.
    package var isEmpty: Bool { current.isEmpty && sealed.allSatisfy(\.isEmpty) }

    /// Whether a layer holds a change of `table`.
    func touches(_ table: TableKey) -> Bool {
        current.tables[table] != nil || sealed.contains { $0.tables[table] != nil }
    }

    /// Seals the current layer (it is only read from now on) and starts an empty one; returns the
    /// layer sealed.
    @discardableResult
    package func seal() -> OverlayLayer {
        var layer = current
        for (key, table) in layer.tables { layer.tables[key]?.sortedKeys = table.keysInOrder() }
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
    func change(_ table: TableKey, _ key: OverlayKey) -> (change: [UInt8]??, hidesBase: Bool) {
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
    func values(_ table: TableKey, _ key: OverlayKey, base: () throws -> [[UInt8]]) rethrows -> [[UInt8]]? {
        let (tables, hidesBase) = changes(table)
        let changes = tables.compactMap { $0.duplicates[key] }
        guard hidesBase || !changes.isEmpty else { return nil }
        var values = Set((changes.contains(where: \.cleared) || hidesBase ? [] : try base()).map(OverlayKey.init))
        for change in changes {
            if change.cleared { values.removeAll() }
            values.subtract(change.removed)
            values.formUnion(change.added)
        }
        return values.map(\.bytes).sorted { KeyOrder.compare($0, $1) < 0 }
    }

    /// Whether `value` is one of `key`'s in a sorted-duplicates table, as the newest layer that says
    /// so has it; nil when no layer does (LMDB decides).
    func containsDuplicate(_ table: TableKey, _ key: OverlayKey, _ value: OverlayKey) -> Bool? {
        func lookup(_ found: OverlayLayer.Table) -> Bool? {
            if let change = found.duplicates[key] {
                // A put takes the value out of `removed`, a delete out of `added`: never in both.
                if change.added.contains(value) { return true }
                if change.removed.contains(value) || change.cleared { return false }
            }
            return found.cleared ? false : nil
        }
        if let found = current.tables[table], let answer = lookup(found) { return answer }
        for layer in sealed.reversed() {
            if let found = layer.tables[table], let answer = lookup(found) { return answer }
        }
        return nil
    }

    /// The values of `key` in a sorted-duplicates database, as merged (LMDB's when no layer changed them).
    func mergedValues(_ table: TableKey, _ key: OverlayKey, base: () throws -> [[UInt8]]) rethrows -> [[UInt8]] {
        try values(table, key, base: base) ?? base()
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
        var added: Set<OverlayKey> = []
        var removed: Set<OverlayKey> = []
    }

    struct Table: Sendable {
        /// The database, naming the copy (itself or its twin) the changes were made to.
        let database: Database
        /// Every entry the table had before is gone.
        var cleared = false
        /// A plain database's changes: the new value, or `nil` when deleted.
        var values: [OverlayKey: [UInt8]?] = [:]
        /// A sorted-duplicates database's changes, by key.
        var duplicates: [OverlayKey: DuplicateChange] = [:]
        /// The changed keys in LMDB's order, kept once the layer is sealed (``Overlay/seal()``).
        var sortedKeys: [OverlayKey]?

        /// The changed keys in LMDB's order.
        func keysInOrder() -> [OverlayKey] {
            if let sortedKeys { return sortedKeys }
            let keys = database.flags.contains(.dupSort) ? Array(duplicates.keys) : Array(values.keys)
            return keys.sorted { KeyOrder.compare($0.bytes, $1.bytes) < 0 }
        }
        /// The change of the number of entries this layer made; in a cleared table, the number of
        /// entries it holds. Not known (``countKnown`` false) after a sorted-duplicates put that did
        /// not look whether its value was there.
        var countDelta = 0
        var countKnown = true
    }

    var tables: [TableKey: Table] = [:]

    /// Whether the layer holds no change.
    package var isEmpty: Bool { tables.isEmpty }

    /// Writes the layer's changes to LMDB in `txn` (a write transaction without an overlay for these
    /// databases): clears first, then each table's keys in LMDB's order.
    package func write(to txn: borrowing Transaction) throws {
        for table in tables.values.sorted(by: { $0.database.dbi < $1.database.dbi }) {
            let db = table.database
            if table.cleared { try txn.clear(db) }
            if db.flags.contains(.dupSort) {
                for (key, change) in table.duplicates.sorted(by: { KeyOrder.compare($0.key.bytes, $1.key.bytes) < 0 }) {
                    try key.bytes.withUnsafeBytes { k in
                        if change.cleared {
                            try txn.delete(db, key: k, value: nil)
                        } else {
                            for value in change.removed { try value.bytes.withUnsafeBytes { _ = try txn.delete(db, key: k, value: $0) } }
                        }
                        for value in change.added.sorted(by: { KeyOrder.compare($0.bytes, $1.bytes) < 0 }) {
                            try value.bytes.withUnsafeBytes { try txn.put(db, key: k, value: $0) }
                        }
                    }
                }
            } else {
                for (key, value) in table.values.sorted(by: { KeyOrder.compare($0.key.bytes, $1.key.bytes) < 0 }) {
                    try key.bytes.withUnsafeBytes { k in
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

/// A key or value in an overlay: bytes hashed in one call and compared with `memcmp` (an array of
/// bytes hashes each byte on its own).
struct OverlayKey: Hashable, Sendable {
    let bytes: [UInt8]

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    func hash(into hasher: inout Hasher) {
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    static func == (a: OverlayKey, b: OverlayKey) -> Bool {
        a.bytes.count == b.bytes.count && KeyOrder.compare(a.bytes, b.bytes) == 0
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
        guard let overlay else { return nil }
        return (overlay, TableKey(dbi: dbi(db), inCompanion: db.inCompanion))
    }

    /// The handle of the copy of `db` this transaction uses, as a database without a twin.
    func physical(_ db: Database) -> Database {
        Database(name: db.name, dbi: dbi(db), flags: db.flags, inCompanion: db.inCompanion, checksummed: db.checksummed)
    }

    /// LMDB's values of `key` in a sorted-duplicates database, in order.
    func baseValues(_ db: Database, key: UnsafeRawBufferPointer) throws -> [[UInt8]] {
        var values: [[UInt8]] = []
        try rawVisitValues(db, key: key) { values.append(Array($0.bindMemory(to: UInt8.self))) }
        return values
    }

    /// Whether LMDB holds `value` among `key`'s (a sorted-duplicates database).
    func baseContains(_ db: Database, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws -> Bool {
        try rawCursor(db) { cursor in
            guard let entry = try cursor.seek(key: key, valueAtLeast: value) else { return false }
            return KeyOrder.compare(entry.value, value) == 0
        }
    }

    /// LMDB's value of `key`, copied.
    func baseValue(_ db: Database, key: UnsafeRawBufferPointer) throws -> [UInt8]? {
        try rawValue(db, key: key) { Array($0.bindMemory(to: UInt8.self)) }
    }

    /// The merged value of `key` (the first, in a sorted-duplicates database).
    func overlayValue(_ overlay: Overlay, _ table: TableKey, _ db: Database, key: UnsafeRawBufferPointer) throws -> [UInt8]? {
        let keyBytes = OverlayKey(Array(key.bindMemory(to: UInt8.self)))
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
        let keyBytes = OverlayKey(Array(key.bindMemory(to: UInt8.self)))
        let valueBytes = Array(value.bindMemory(to: UInt8.self))
        let database = physical(db)
        if db.flags.contains(.dupSort) {
            // One point lookup, not every value of the key (an index key may hold thousands).
            let valueKey = OverlayKey(valueBytes)
            // Without a flag that needs it, whether the value was there is not looked up (an
            // index's puts are nearly all new, and the lookup is a B-tree descent): adding a value
            // that is there changes nothing, here as in LMDB. The count is then found when asked.
            var exists: Bool?
            if flags.contains(.noDupData) {
                let found = try overlay.containsDuplicate(table, keyBytes, valueKey) ?? baseContains(db, key: key, value: value)
                if found { throw fail(MDB_KEYEXIST, "mdb_put(\(db.name))", db) }
                exists = found
            }
            if flags.contains(.noOverwrite), !(try overlay.mergedValues(table, keyBytes, base: { try baseValues(db, key: key) }).isEmpty) {
                throw fail(MDB_KEYEXIST, "mdb_put(\(db.name))", db)
            }
            overlay.write(table, database: database) { table in
                table.duplicates[keyBytes, default: OverlayLayer.DuplicateChange()].removed.remove(valueKey)
                table.duplicates[keyBytes, default: OverlayLayer.DuplicateChange()].added.insert(valueKey)
                if exists == false { table.countDelta += 1 } else { table.countKnown = false }
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
        let keyBytes = OverlayKey(Array(key.bindMemory(to: UInt8.self)))
        let database = physical(db)
        if db.flags.contains(.dupSort) {
            if let value {
                let valueBytes = OverlayKey(Array(value.bindMemory(to: UInt8.self)))
                guard try overlay.containsDuplicate(table, keyBytes, valueBytes) ?? baseContains(db, key: key, value: value) else {
                    return false
                }
                overlay.write(table, database: database) { table in
                    table.duplicates[keyBytes, default: OverlayLayer.DuplicateChange()].added.remove(valueBytes)
                    table.duplicates[keyBytes, default: OverlayLayer.DuplicateChange()].removed.insert(valueBytes)
                    table.countDelta -= 1
                }
                return true
            }
            let values = try overlay.mergedValues(table, keyBytes, base: { try baseValues(db, key: key) })
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
        // from zero (`overlayEntryCount`).
        overlay.write(table, database: physical(db)) { table in
            table = OverlayLayer.Table(database: table.database, cleared: true)
        }
    }

    func overlayEntryCount(_ overlay: Overlay, _ table: TableKey, _ db: Database) throws -> Int {
        let (tables, hidesBase) = overlay.changes(table)
        if tables.allSatisfy(\.countKnown) {
            let delta = tables.reduce(0) { $0 + $1.countDelta }
            return hidesBase ? delta : try rawStatistics(db).entries + delta
        }
        // Counted the long way: LMDB's count, with each changed key's values as merged in place of
        // LMDB's.
        var count = hidesBase ? 0 : try rawStatistics(db).entries
        var keys = Set<OverlayKey>()
        for table in tables { keys.formUnion(table.duplicates.keys) }
        for key in keys {
            try key.bytes.withUnsafeBytes { k in
                let base = hidesBase ? [] : try baseValues(db, key: k)
                count += overlay.mergedValues(table, key, base: { base }).count - base.count
            }
        }
        return count
    }

    /// Visits the merged entries of `db` from the first key at or after `start`: LMDB's cursor and
    /// each layer's changed keys (in order, found by binary search) merged as they are consumed, so
    /// a visit that stops early costs what it read.
    func overlayVisit(
        _ overlay: Overlay, _ table: TableKey, _ db: Database, from start: UnsafeRawBufferPointer?,
        _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        let (tables, hidesBase) = overlay.changes(table)
        let dupSort = db.flags.contains(.dupSort)
        // Each layer's changed keys from `start` on.
        var sources: [(keys: [OverlayKey], next: Int)] = tables.map { table in
            let keys = table.keysInOrder()
            guard let start else { return (keys, 0) }
            var low = 0
            var high = keys.count
            while low < high {
                let middle = (low + high) / 2
                if KeyOrder.compare(keys[middle].bytes, start) < 0 { low = middle + 1 } else { high = middle }
            }
            return (keys, low)
        }
        /// The smallest changed key not yet visited.
        func nextChanged() -> OverlayKey? {
            var smallest: OverlayKey?
            for source in sources where source.next < source.keys.count {
                let key = source.keys[source.next]
                if smallest.map({ KeyOrder.compare(key.bytes, $0.bytes) < 0 }) ?? true { smallest = key }
            }
            return smallest
        }
        /// Moves every source past `key`.
        func consume(_ key: OverlayKey) {
            for index in sources.indices where sources[index].next < sources[index].keys.count {
                if sources[index].keys[sources[index].next] == key { sources[index].next += 1 }
            }
        }
        /// Emits the merged entries of a changed key; false when `body` said stop.
        func emit(_ key: OverlayKey) throws -> Bool {
            try key.bytes.withUnsafeBytes { k in
                if dupSort {
                    let values = try overlay.mergedValues(table, key, base: { hidesBase ? [] : try baseValues(db, key: k) })
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
                    if let changed = nextChanged() {
                        let order = KeyOrder.compare(changed.bytes, current.key)
                        if order <= 0 {
                            consume(changed)
                            guard try emit(changed) else {
                                stopped = true
                                return
                            }
                            // Past every LMDB value of this key.
                            if order == 0 { entry = dupSort ? try cursor.nextKey() : try cursor.next() }
                            continue
                        }
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
        while let changed = nextChanged() {
            consume(changed)
            guard try emit(changed) else { return }
        }
    }
}
