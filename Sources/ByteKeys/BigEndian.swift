/// Big-endian integer keys: their byte order is their numeric order, so a byte-wise sorted table
/// (LMDB's default `memcmp` order, which the in-memory read-model store keeps too) sorts them
/// numerically, and `MDB_APPEND` works.
package enum BigEndian {
    /// Calls `body` with the 8 big-endian bytes of `value`.
    @inlinable
    @inline(__always)
    package static func withBytes<R>(of value: UInt64, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        var be = value.bigEndian
        return try Swift.withUnsafeBytes(of: &be, body)
    }

    /// The 8 big-endian bytes of `value`.
    @inlinable
    @inline(__always)
    package static func bytes(of value: UInt64) -> [UInt8] {
        withBytes(of: value) { Array($0) }
    }

    /// The 4 big-endian bytes of `value`.
    @inlinable
    @inline(__always)
    package static func bytes(of value: UInt32) -> [UInt8] {
        var be = value.bigEndian
        return Swift.withUnsafeBytes(of: &be) { Array($0) }
    }

    /// Reads a big-endian `UInt64` at `offset`; `nil` when fewer than 8 bytes remain.
    @inlinable
    @inline(__always)
    package static func uint64(_ buffer: UnsafeRawBufferPointer, at offset: Int = 0) -> UInt64? {
        guard offset >= 0, buffer.count - offset >= 8 else { return nil }
        return UInt64(bigEndian: buffer.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
    }

    /// Reads a big-endian `UInt32` at `offset`; `nil` when fewer than 4 bytes remain.
    @inlinable
    @inline(__always)
    package static func uint32(_ buffer: UnsafeRawBufferPointer, at offset: Int = 0) -> UInt32? {
        guard offset >= 0, buffer.count - offset >= 4 else { return nil }
        return UInt32(bigEndian: buffer.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
    }

    /// Reads a big-endian `UInt64` from the first 8 bytes of `bytes`.
    package static func uint64(_ bytes: [UInt8], at offset: Int = 0) -> UInt64? {
        bytes.withUnsafeBytes { uint64($0, at: offset) }
    }
}
