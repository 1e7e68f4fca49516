/// Building a key or value in one allocation: reserve the total, then append each part. (Joining
/// parts with `+` allocated an array per part and per join: four to six for a two-part key.)
extension [UInt8] {
    /// An empty array with room for `capacity` bytes.
    @inlinable
    package init(capacity: Int) {
        self.init()
        reserveCapacity(capacity)
    }

    /// Appends the 8 big-endian bytes of `value`.
    @inlinable
    package mutating func appendBigEndian(_ value: UInt64) {
        var be = value.bigEndian
        Swift.withUnsafeBytes(of: &be) { append(contentsOf: $0) }
    }

    /// Appends the UTF-8 bytes of `text`.
    @inlinable
    package mutating func appendUTF8(_ text: String) {
        append(contentsOf: text.utf8)
    }
}
