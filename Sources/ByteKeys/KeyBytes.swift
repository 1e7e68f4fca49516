/// Calls `body` with the bytes of `collection`, without a copy when they are contiguous.
@inlinable
@inline(__always)
package func withBytes<R>(_ collection: some Collection<UInt8>, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows
    -> R
{
    if let result = try collection.withContiguousStorageIfAvailable({ try body(UnsafeRawBufferPointer($0)) }) {
        return result
    }
    return try Array(collection).withUnsafeBytes(body)
}
