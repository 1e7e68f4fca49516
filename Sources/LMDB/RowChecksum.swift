import CLMDB

/// The trailer of a row in a checksummed database (``Database``, `derived/` of a ledger): the
/// stored value is the value ‖ CRC-32C (Castagnoli) of key ‖ value, 4 bytes little-endian.
///
/// LMDB checks its pages' structure, not the bytes of the values in them: a bit flipped at rest in a
/// value was read back as a different, well-formed answer. With the trailer, every read checks the
/// row it returns, so a damaged row is an error (``LMDBError/Code/corrupted``, naming the database),
/// never an answer; a writer reading it fails before it commits anything. The key is part of the sum,
/// so a row whose key was damaged fails too when it is read.
enum RowChecksum {
    /// The trailer's size in bytes.
    static let size = 4

    /// CRC-32C of `key` ‖ `value`.
    @inline(__always)
    static func sum(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) -> UInt32 {
        sl_crc32c(sl_crc32c(0, key.baseAddress, key.count), value.baseAddress, value.count)
    }

    /// Calls `body` with `value` ‖ its trailer.
    @inline(__always)
    static func withSealed<R>(
        key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> R
    ) rethrows -> R {
        try withUnsafeTemporaryAllocation(byteCount: value.count + size, alignment: 1) { buffer in
            seal(key: key, value: value, at: buffer.baseAddress!)
            return try body(UnsafeRawBufferPointer(buffer))
        }
    }

    /// Writes `value` ‖ its trailer (`value.count + size` bytes) at `start`.
    @inline(__always)
    static func seal(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, at start: UnsafeMutableRawPointer) {
        let crc = sum(key: key, value: value).littleEndian
        if value.count > 0 { start.copyMemory(from: value.baseAddress!, byteCount: value.count) }
        withUnsafeBytes(of: crc) { (start + value.count).copyMemory(from: $0.baseAddress!, byteCount: size) }
    }

    /// The value of the stored row `stored` under `key` (its bytes without the trailer), or the
    /// error when the trailer is missing or does not match.
    @inline(__always)
    static func verified(key: UnsafeRawBufferPointer, stored: UnsafeRawBufferPointer, database: String, path: String?)
        throws(LMDBError) -> UnsafeRawBufferPointer
    {
        guard stored.count >= size else { throw damaged(database, path: path, "is \(stored.count) bytes, shorter than its checksum") }
        let value = UnsafeRawBufferPointer(rebasing: stored[..<(stored.count - size)])
        var recorded: UInt32 = 0
        withUnsafeMutableBytes(of: &recorded) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: stored[(stored.count - size)...])) }
        guard UInt32(littleEndian: recorded) == sum(key: key, value: value) else {
            throw damaged(database, path: path, "does not match its checksum")
        }
        return value
    }

    /// The error of a row of `database` damaged at rest.
    static func damaged(_ database: String, path: String?, _ what: String) -> LMDBError {
        LMDBError(
            code: .corrupted, returnCode: MDB_CORRUPTED, operation: "checking a row of \(database)", path: path,
            message: "a row of \(database) \(what): the file was damaged at rest")
    }
}
