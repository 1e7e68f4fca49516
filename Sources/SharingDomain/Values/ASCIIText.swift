import EventLog
/// Byte-level fast paths for the normalizations the writer runs on every lookup, for text that is
/// entirely ASCII; `nil` for any other text, which the callers hand to Foundation as before.
package enum ASCIIText {
    /// Space or tab: the ASCII members of `CharacterSet.whitespaces`.
    private static func isBlank(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }

    /// `text` without leading and trailing spaces and tabs, with `A`–`Z` lowercased; nil unless
    /// `text` is ASCII.
    package static func trimmedLowercased(_ text: String) -> String? {
        var text = text
        return text.withUTF8 { bytes -> String? in
            guard bytes.allSatisfy({ $0 < 0x80 }) else { return nil }
            var start = 0
            var end = bytes.count
            while start < end && isBlank(bytes[start]) { start += 1 }
            while end > start && isBlank(bytes[end - 1]) { end -= 1 }
            return String(unsafeUninitializedCapacity: end - start) { out in
                for index in start..<end {
                    let byte = bytes[index]
                    out[index - start] = byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte
                }
                return end - start
            }
        }
    }

    /// `text`'s ASCII digits, after a `+` when `text` (without leading spaces and tabs) starts with
    /// one; nil unless `text` is ASCII.
    package static func phoneDigits(_ text: String) -> String? {
        var text = text
        return text.withUTF8 { bytes -> String? in
            guard bytes.allSatisfy({ $0 < 0x80 }) else { return nil }
            var start = 0
            while start < bytes.count && isBlank(bytes[start]) { start += 1 }
            let plus = start < bytes.count && bytes[start] == UInt8(ascii: "+")
            return String(unsafeUninitializedCapacity: bytes.count + 1) { out in
                var count = 0
                if plus {
                    out[0] = UInt8(ascii: "+")
                    count = 1
                }
                for index in start..<bytes.count where bytes[index] >= 0x30 && bytes[index] <= 0x39 {
                    out[count] = bytes[index]
                    count += 1
                }
                return count
            }
        }
    }
}
