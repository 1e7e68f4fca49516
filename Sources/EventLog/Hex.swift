/// Lowercase hexadecimal digits of bytes, and back: the one implementation every module of the
/// package uses (hashes, keys, tokens, fingerprints). By hand: Foundation's `String(format:)` per
/// byte was a fifth of the server's CPU under `bench --only http` (docs/benchmarks.md).
package enum Hex {
    /// Two lowercase hexadecimal digits per byte.
    package static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let digits: StaticString = "0123456789abcdef"
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes {
            out.append(digits.utf8Start[Int(byte >> 4)])
            out.append(digits.utf8Start[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of an even number of hexadecimal digits; `nil` for an odd count or any other
    /// character. Upper-case digits count only when `allowingUppercase` is true.
    package static func decode(_ digits: some Collection<UInt8>, allowingUppercase: Bool = true) -> [UInt8]? {
        guard digits.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        var high: UInt8?
        for c in digits {
            let value: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): value = c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F") where allowingUppercase: value = c - UInt8(ascii: "A") + 10
            default: return nil
            }
            if let first = high {
                out.append(first << 4 | value)
                high = nil
            } else {
                high = value
            }
        }
        return out
    }
}
