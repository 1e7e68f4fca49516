import ByteKeys
import EventLog
import Foundation

/// Where the read models live, as the rules (``Decider``), the projections (``Projector``) and the
/// queries see them: named, sorted key-value tables, some with sorted duplicate values.
///
/// Two implementations: the ledger's LMDB transactions (in ShareLedger, through each table's
/// ``ReadModelTable/handle``), and
/// ``InMemoryReadModelStore``, which runs the same rules and projections without LMDB (domain tests,
/// and the property test that holds both to the same answers). Nothing in the domain knows which.
package protocol ReadModelStore: ~Copyable {
    /// Calls `body` with the value stored under `key` in `db`, or returns `nil` when there is none.
    /// The buffer is valid only inside `body`.
    func withValue<R>(_ db: ReadModelTable, key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> R) throws
        -> R?
    /// Stores `value` under `key` (for a database with sorted duplicates: adds it to the key's values).
    ///
    /// (The requirements take buffers, not collections: a generic requirement's witness is generic
    /// code in the LMDB module, which the sharing layer's specialized callers could not specialize,
    /// so every put and delete went through `Collection`'s witness tables. The collection forms are
    /// the extension below, specialized where they are called.)
    func put(_ db: ReadModelTable, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, flags: ReadModelPutFlags) throws
    /// Deletes `key` (with sorted duplicates: every value, or only `value` when given); returns
    /// whether anything was deleted.
    @discardableResult
    func delete(_ db: ReadModelTable, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer?) throws -> Bool
    /// Visits the entries of `db` in key order (sorted duplicates each as an entry of their own) from
    /// the first key at or after `start` (the first key when `nil`) while `body` returns true.
    func visit(
        _ db: ReadModelTable, from start: UnsafeRawBufferPointer?,
        _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Bool
    ) throws
    /// Visits the values of `key` in a database with sorted duplicates, in order.
    func visitDuplicates(_ db: ReadModelTable, key: UnsafeRawBufferPointer, _ body: (_ value: UnsafeRawBufferPointer) throws -> Void)
        throws
    /// The number of entries in `db` (sorted duplicates each counted).
    func entryCount(_ db: ReadModelTable) throws -> Int
    /// Deletes every entry of `db`.
    func clear(_ db: ReadModelTable) throws
    /// Calls `body` with a function that adds values to a key of `db`, a table with sorted duplicates
    /// of one size (``ReadModelTable/Flags/dupFixed``): `values` holds values of `size` bytes back to
    /// back, in order, and keys come in key order. Stores what ``put(_:key:value:flags:)`` of each value
    /// would. LMDB's implementation puts every key through one cursor (which finds the next key's place
    /// from the page it is on instead of from the root) and adds a key's values in one call, after its
    /// last value, when they sort after it (else one by one, only slower).
    func addDuplicatesInKeyOrder(
        _ db: ReadModelTable, size: Int,
        _ body: (_ add: (_ key: UnsafeRawBufferPointer, _ values: UnsafeRawBufferPointer) throws -> Void) throws -> Void
    ) throws
}

extension ReadModelStore where Self: ~Copyable {
    /// Stores `value` under `key`.
    package func put(_ db: ReadModelTable, key: some Collection<UInt8>, value: some Collection<UInt8>, flags: ReadModelPutFlags = [])
        throws
    {
        try withBytes(key) { k in try withBytes(value) { v in try put(db, key: k, value: v, flags: flags) } }
    }

    /// Deletes `key` (with sorted duplicates: every value, or only `value` when given); returns
    /// whether anything was deleted.
    @discardableResult
    package func delete(_ db: ReadModelTable, key: some Collection<UInt8>, value: (some Collection<UInt8>)? = [UInt8]?.none) throws -> Bool {
        try withBytes(key) { k in
            if let value { return try withBytes(value) { v in try delete(db, key: k, value: v) } }
            return try delete(db, key: k, value: nil)
        }
    }

    /// Stores each `size`-byte value of `values` (back to back) under `key`, one
    /// ``put(_:key:value:flags:)`` each: ``addDuplicatesInKeyOrder(_:size:_:)`` where no cursor adds
    /// them at once.
    package func putEach(_ db: ReadModelTable, key: UnsafeRawBufferPointer, values: UnsafeRawBufferPointer, size: Int) throws {
        for start in stride(from: 0, to: values.count, by: size) {
            try put(db, key: key, value: UnsafeRawBufferPointer(rebasing: values[start..<min(start + size, values.count)]), flags: [])
        }
    }

    /// The value stored under `key`, copied; `nil` when there is none.
    package func get(_ db: ReadModelTable, key: some Collection<UInt8>) throws -> [UInt8]? {
        try withBytes(key) { try withValue(db, key: $0) { Array($0.bindMemory(to: UInt8.self)) } }
    }
}

/// The read models in memory: one sorted array of entries per database, kept in LMDB's order
/// (keys compared byte-wise, then sorted duplicates by value). For running the sharing rules and
/// projections without LMDB; not for production sizes (an insert is linear).
///
/// A class with reference semantics, like a transaction: writes through any copy are seen by all.
/// Not thread-safe: use it from one task at a time.
package final class InMemoryReadModelStore: ReadModelStore {
    private struct Entry {
        package var key: [UInt8]
        package var value: [UInt8]
    }

    /// The entries of each table, by ``ReadModelTable/index``.
    private var tables: [[Entry]] = Array(repeating: [], count: ReadModelTable.catalog.count)

    package init() {}

    /// Every (key, value) of `db`, in order.
    package func entries(_ db: ReadModelTable) -> [([UInt8], [UInt8])] { tables[db.index].map { ($0.key, $0.value) } }

    /// The index of the first entry not ordered before (key, value) (value nil: before any value of key).
    private func lowerBound(_ table: [Entry], key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer?) -> Int {
        var low = 0
        var high = table.count
        while low < high {
            let middle = (low + high) / 2
            let entry = table[middle]
            var order = KeyOrder.compare(entry.key, key)
            if order == 0, let value { order = KeyOrder.compare(entry.value, value) }
            if order < 0 { low = middle + 1 } else { high = middle }
        }
        return low
    }

    package func withValue<R>(_ db: ReadModelTable, key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> R) throws
        -> R?
    {
        let table = tables[db.index]
        let index = lowerBound(table, key: key, value: nil)
        guard index < table.count, KeyOrder.compare(table[index].key, key) == 0 else { return nil }
        return try table[index].value.withUnsafeBytes(body)
    }

    package func put(_ db: ReadModelTable, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, flags: ReadModelPutFlags) throws {
        let key = Array(key)
        let value = Array(value)
        var table = tables[db.index]
        tables[db.index] = []
        defer { tables[db.index] = table }
        let sorted = db.flags.contains(.dupSort)
        let index = key.withUnsafeBytes { k in
            value.withUnsafeBytes { v in lowerBound(table, key: k, value: sorted ? v : nil) }
        }
        let sameKey = index < table.count && table[index].key == key
        if sorted {
            if sameKey && table[index].value == value { return }
            table.insert(Entry(key: key, value: value), at: index)
        } else if sameKey {
            table[index].value = value
        } else {
            table.insert(Entry(key: key, value: value), at: index)
        }
    }

    @discardableResult
    package func delete(_ db: ReadModelTable, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer?) throws -> Bool {
        var table = tables[db.index]
        let key = Array(key)
        let value = value.map { Array($0) }
        let before = table.count
        table.removeAll { $0.key == key && (value == nil || $0.value == value) }
        tables[db.index] = table
        return table.count != before
    }

    package func visit(
        _ db: ReadModelTable, from start: UnsafeRawBufferPointer?,
        _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        let table = tables[db.index]
        var index = start.map { lowerBound(table, key: $0, value: nil) } ?? 0
        while index < table.count {
            let entry = table[index]
            let more = try entry.key.withUnsafeBytes { k in try entry.value.withUnsafeBytes { v in try body(k, v) } }
            guard more else { return }
            index += 1
        }
    }

    package func entryCount(_ db: ReadModelTable) throws -> Int { tables[db.index].count }

    package func clear(_ db: ReadModelTable) throws { tables[db.index] = [] }

    package func addDuplicatesInKeyOrder(
        _ db: ReadModelTable, size: Int,
        _ body: (_ add: (_ key: UnsafeRawBufferPointer, _ values: UnsafeRawBufferPointer) throws -> Void) throws -> Void
    ) throws {
        try body { key, values in try putEach(db, key: key, values: values, size: size) }
    }

    package func visitDuplicates(_ db: ReadModelTable, key: UnsafeRawBufferPointer, _ body: (_ value: UnsafeRawBufferPointer) throws -> Void)
        throws
    {
        let table = tables[db.index]
        var index = lowerBound(table, key: key, value: nil)
        while index < table.count, KeyOrder.compare(table[index].key, key) == 0 {
            try table[index].value.withUnsafeBytes(body)
            index += 1
        }
    }
}
