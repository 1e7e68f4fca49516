import CLMDB

/// A key and value a cursor stands on. Both point into the memory map and are valid only until the
/// transaction's closure returns.
package struct Entry {
    /// The key's bytes.
    package let key: UnsafeRawBufferPointer
    /// The value's bytes.
    package let value: UnsafeRawBufferPointer
}

/// A cursor on one database, lent to the closure of ``Transaction/withCursor(_:_:)``.
package struct Cursor: ~Copyable {
    let handle: OpaquePointer
    let database: Database
    let isWritable: Bool
    let state: TransactionState
    let path: String

    @inline(__always)
    private func get(_ op: MDB_cursor_op, key: UnsafeRawBufferPointer? = nil, value: UnsafeRawBufferPointer? = nil)
        throws -> Entry?
    {
        var k = key.map { MDB_val(buffer: $0) } ?? MDB_val()
        var v = value.map { MDB_val(buffer: $0) } ?? MDB_val()
        let rc = mdb_cursor_get(handle, &k, &v, op)
        if rc == MDB_NOTFOUND { return nil }
        guard rc == MDB_SUCCESS else {
            throw state.record(LMDBError(returnCode: rc, operation: "mdb_cursor_get(\(database.name))", path: path))
        }
        guard database.checksummed else { return Entry(key: k.buffer, value: v.buffer) }
        do {
            let value = try RowChecksum.verified(key: k.buffer, stored: v.buffer, database: database.name, path: path)
            return Entry(key: k.buffer, value: value)
        } catch { throw state.record(error) }
    }

    /// Moves to the first entry.
    package func first() throws -> Entry? { try get(MDB_FIRST) }
    /// Moves to the last entry.
    package func last() throws -> Entry? { try get(MDB_LAST) }
    /// Moves to the next entry (the next value of the same key first, for dupsort).
    package func next() throws -> Entry? { try get(MDB_NEXT) }
    /// Moves to the first key that is greater than or equal to `key`.
    package func seek(atLeast key: UnsafeRawBufferPointer) throws -> Entry? { try get(MDB_SET_RANGE, key: key) }
    /// Moves to exactly `key`; `nil` when it does not exist.
    package func seek(exactly key: UnsafeRawBufferPointer) throws -> Entry? { try get(MDB_SET_KEY, key: key) }
    /// (dupsort) Moves to the next value of the current key; `nil` after the last.
    package func nextDuplicate() throws -> Entry? { try get(MDB_NEXT_DUP) }
    /// (dupsort) Moves to the first value of the next key.
    package func nextKey() throws -> Entry? { try get(MDB_NEXT_NODUP) }
    /// (dupsort) Moves to the last value of the current key.
    package func lastDuplicate() throws -> Entry? { try get(MDB_LAST_DUP) }
    /// (dupsort) Moves to the first value of `key` that is greater than or equal to `value`.
    package func seek(key: UnsafeRawBufferPointer, valueAtLeast value: UnsafeRawBufferPointer) throws -> Entry? {
        try get(MDB_GET_BOTH_RANGE, key: key, value: value)
    }

    /// (dupsort) How many values the current key holds.
    package func duplicateCount() throws -> Int {
        var count: Int = 0
        let rc = mdb_cursor_count(handle, &count)
        guard rc == MDB_SUCCESS else {
            throw state.record(LMDBError(returnCode: rc, operation: "mdb_cursor_count(\(database.name))", path: path))
        }
        return count
    }

    /// Stores `value` under `key` through the cursor (use ``PutFlags/append`` and
    /// ``PutFlags/appendDup`` for sorted bulk loads).
    @inline(__always)
    package func put(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, flags: PutFlags = PutFlags(rawValue: 0)) throws {
        precondition(isWritable, "cursor put in a read-only transaction")
        if database.checksummed {
            return try RowChecksum.withSealed(key: key, value: value) { sealed in try rawPut(key: key, value: sealed, flags: flags) }
        }
        try rawPut(key: key, value: value, flags: flags)
    }

    /// (A database with sorted duplicates of one size, ``DatabaseFlags/dupFixed``.) Adds the values
    /// in `values`, each `size` bytes, back to back and in order, to `key`: in one call
    /// (`MDB_MULTIPLE`), each after the key's last value (`MDB_APPENDDUP`), when they all sort after
    /// the values the key holds, which is what this is for; otherwise (LMDB refuses the first that does
    /// not) the rest one by one, as ``put(key:value:flags:)`` would. A value the key holds already is
    /// not added twice.
    package func addDuplicates(key: UnsafeRawBufferPointer, values: UnsafeRawBufferPointer, size: Int) throws {
        precondition(isWritable, "cursor put in a read-only transaction")
        precondition(size > 0 && values.count % size == 0, "values must be whole values of \(size) bytes")
        guard !values.isEmpty else { return }
        guard database.checksummed else { return try rawAddDuplicates(key: key, values: values, size: size) }
        // Each value with its trailer, back to back.
        let count = values.count / size
        let sealedSize = size + RowChecksum.size
        try withUnsafeTemporaryAllocation(byteCount: count * sealedSize, alignment: 1) { buffer in
            for index in 0..<count {
                RowChecksum.seal(
                    key: key, value: UnsafeRawBufferPointer(rebasing: values[index * size..<(index + 1) * size]),
                    at: buffer.baseAddress! + index * sealedSize)
            }
            try rawAddDuplicates(key: key, values: UnsafeRawBufferPointer(buffer), size: sealedSize)
        }
    }

    /// ``addDuplicates(key:values:size:)`` of values as stored (with their trailers, if any).
    private func rawAddDuplicates(key: UnsafeRawBufferPointer, values: UnsafeRawBufferPointer, size: Int) throws {
        let count = values.count / size
        var k = MDB_val(buffer: key)
        var data = (MDB_val(mv_size: size, mv_data: UnsafeMutableRawPointer(mutating: values.baseAddress)), MDB_val(mv_size: count, mv_data: nil))
        let rc = withUnsafeMutablePointer(to: &data) { pair in
            pair.withMemoryRebound(to: MDB_val.self, capacity: 2) { mdb_cursor_put(handle, &k, $0, UInt32(MDB_MULTIPLE | MDB_APPENDDUP)) }
        }
        if rc == MDB_SUCCESS { return }
        guard rc == MDB_KEYEXIST else {
            throw state.record(LMDBError(returnCode: rc, operation: "mdb_cursor_put(\(database.name), multiple)", path: path))
        }
        // A value that does not sort after the key's last: it and the rest one by one (LMDB's count
        // of those added before it is in the second value's size).
        for index in data.1.mv_size..<count {
            try rawPut(key: key, value: UnsafeRawBufferPointer(rebasing: values[index * size..<(index + 1) * size]), flags: PutFlags(rawValue: 0))
        }
    }

    @inline(__always)
    private func rawPut(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, flags: PutFlags) throws {
        var k = MDB_val(buffer: key)
        var v = MDB_val(buffer: value)
        let rc = mdb_cursor_put(handle, &k, &v, flags.rawValue)
        guard rc == MDB_SUCCESS else {
            throw state.record(LMDBError(returnCode: rc, operation: "mdb_cursor_put(\(database.name))", path: path))
        }
    }
}
