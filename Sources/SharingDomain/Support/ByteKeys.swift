import EventLog
#if canImport(Glibc)
    import Glibc
#else
    import Darwin
#endif

/// Big-endian integers in keys: their byte order is their numeric order, so a byte-wise sorted
/// table sorts them numerically. (The domain's own: it does not import the LMDB wrapper, whose
/// `BigEndian` is the same.)
package enum BigEndianBytes {
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
    package static func bytes(of value: UInt64) -> [UInt8] { withBytes(of: value) { Array($0) } }

    /// The 4 big-endian bytes of `value`.
    @inlinable
    @inline(__always)
    package static func bytes(of value: UInt32) -> [UInt8] {
        var be = value.bigEndian
        return Swift.withUnsafeBytes(of: &be) { Array($0) }
    }

    /// A big-endian `UInt64` at `offset`; nil when fewer than 8 bytes remain.
    @inlinable
    @inline(__always)
    package static func uint64(_ buffer: UnsafeRawBufferPointer, at offset: Int = 0) -> UInt64? {
        guard offset >= 0, buffer.count - offset >= 8 else { return nil }
        return UInt64(bigEndian: buffer.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
    }

    /// A big-endian `UInt32` at `offset`; nil when fewer than 4 bytes remain.
    @inlinable
    @inline(__always)
    package static func uint32(_ buffer: UnsafeRawBufferPointer, at offset: Int = 0) -> UInt32? {
        guard offset >= 0, buffer.count - offset >= 4 else { return nil }
        return UInt32(bigEndian: buffer.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
    }

    /// A big-endian `UInt64` at `offset` of `bytes`.
    package static func uint64(_ bytes: [UInt8], at offset: Int = 0) -> UInt64? {
        bytes.withUnsafeBytes { uint64($0, at: offset) }
    }
}

/// The order of keys (and of sorted duplicate values) in a read-model table: byte-wise, a prefix
/// before the longer string (LMDB's default order, which the stores keep).
package enum ByteKeyOrder {
    /// Negative when `a` sorts before `b`, zero when equal, positive after.
    @inline(__always)
    package static func compare(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
        let common = min(a.count, b.count)
        if common > 0, let pa = a.baseAddress, let pb = b.baseAddress {
            let order = memcmp(pa, pb, common)
            if order != 0 { return order < 0 ? -1 : 1 }
        }
        return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
    }

    /// ``compare(_:_:)`` of an array and a buffer.
    @inline(__always)
    package static func compare(_ a: [UInt8], _ b: UnsafeRawBufferPointer) -> Int { a.withUnsafeBytes { compare($0, b) } }

    /// ``compare(_:_:)`` of two arrays.
    @inline(__always)
    package static func compare(_ a: [UInt8], _ b: [UInt8]) -> Int {
        a.withUnsafeBytes { a in b.withUnsafeBytes { b in compare(a, b) } }
    }
}

/// The bytes of a key or value, whatever collection holds them.
package enum KeyBytes {
    /// Calls `body` with the bytes of `collection`, without a copy when they are contiguous.
    @inlinable
    @inline(__always)
    package static func with<R>(_ collection: some Collection<UInt8>, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows
        -> R
    {
        if let result = try collection.withContiguousStorageIfAvailable({ try body(UnsafeRawBufferPointer($0)) }) {
            return result
        }
        return try Array(collection).withUnsafeBytes(body)
    }
}
