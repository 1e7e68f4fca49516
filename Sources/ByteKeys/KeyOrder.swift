#if canImport(Glibc)
    import Glibc
#else
    import Darwin
#endif

/// LMDB's default order of keys (and of the values of a sorted-duplicates database), which the
/// in-memory read-model store keeps too: byte-wise (`memcmp`), a prefix before the longer string.
/// For code that sorts or merges entries the way LMDB will store them, without the generic
/// `lexicographicallyPrecedes` (which showed in profiles).
package enum KeyOrder {
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
    package static func compare(_ a: [UInt8], _ b: UnsafeRawBufferPointer) -> Int {
        a.withUnsafeBytes { compare($0, b) }
    }

    /// ``compare(_:_:)`` of two arrays.
    @inline(__always)
    package static func compare(_ a: [UInt8], _ b: [UInt8]) -> Int {
        a.withUnsafeBytes { a in b.withUnsafeBytes { b in compare(a, b) } }
    }
}
