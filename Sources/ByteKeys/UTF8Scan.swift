/// Byte tests over a string's UTF-8, read as one buffer (``withBytes(_:_:)``: without a copy for a
/// native string): a plain loop over the bytes, where `allSatisfy` or `contains` on the view itself
/// steps through string indices, several times the instructions per byte.
extension String.UTF8View {
    /// Whether every byte satisfies `predicate`.
    @inlinable
    package func allBytes(_ predicate: (UInt8) -> Bool) -> Bool {
        withBytes(self) { $0.allSatisfy(predicate) }
    }

    /// Whether some byte is `byte`.
    @inlinable
    package func containsByte(_ byte: UInt8) -> Bool { !allBytes { $0 != byte } }
}
