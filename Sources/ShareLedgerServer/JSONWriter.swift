/// Writes compact JSON straight into bytes, for the response dictionaries of the ledger's values
/// (``Wire``): no `JSONValue` tree, no dictionary per object and no sorting of its keys on the way
/// out. Building a ShortGUID Result as `JSONValue` dictionaries and then writing them was about 7%
/// of the server's CPU per `records/resolve` under `bench --only http` (docs/benchmarks.md).
///
/// The output is byte for byte what ``JSONValue/bytes`` writes for the same value: the caller
/// writes an object's keys in the order `JSONValue` sorts them (`String`'s `<`), and strings and
/// numbers are written by the same code. `WireRenderingTests` checks this.
struct JSONWriter {
    /// The JSON written so far.
    private(set) var bytes: [UInt8] = []
    /// Whether the next value or key is the first of the array or object being written (no comma).
    private var first = true

    init(capacity: Int = 1_024) {
        bytes.reserveCapacity(capacity)
    }

    /// The bytes of one value written by `body`.
    static func render(capacity: Int = 512, _ body: (inout JSONWriter) -> Void) -> [UInt8] {
        var writer = JSONWriter(capacity: capacity)
        body(&writer)
        return writer.bytes
    }

    private mutating func separate() {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
    }

    /// An object whose members `body` writes (with ``key(_:)`` and a value each, keys in sorted order).
    mutating func object(_ body: (inout JSONWriter) -> Void) {
        container(UInt8(ascii: "{"), UInt8(ascii: "}"), body)
    }

    /// An array whose elements `body` writes.
    mutating func array(_ body: (inout JSONWriter) -> Void) {
        container(UInt8(ascii: "["), UInt8(ascii: "]"), body)
    }

    private mutating func container(_ open: UInt8, _ close: UInt8, _ body: (inout JSONWriter) -> Void) {
        separate()
        bytes.append(open)
        first = true
        body(&self)
        bytes.append(close)
        first = false
    }

    /// A string member, left out when `value` is nil (an optional key of a dictionary).
    mutating func member(_ name: StaticString, _ value: String?) {
        guard let value else { return }
        key(name)
        string(value)
    }

    /// A member whose value is a constant string with no character to escape.
    mutating func member(_ name: StaticString, _ value: StaticString) {
        key(name)
        string(value)
    }

    /// A member's key (a constant with no character to escape); its value comes next.
    mutating func key(_ name: StaticString) {
        separate()
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        bytes.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
        first = true
    }

    /// A member's key from data (escaped as needed); its value comes next.
    mutating func key(_ name: String) {
        separate()
        Self.writeString(name, into: &bytes)
        bytes.append(UInt8(ascii: ":"))
        first = true
    }

    mutating func string(_ value: String) {
        separate()
        Self.writeString(value, into: &bytes)
    }

    /// A constant string with no character to escape.
    mutating func string(_ value: StaticString) {
        separate()
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: UnsafeBufferPointer(start: value.utf8Start, count: value.utf8CodeUnitCount))
        bytes.append(UInt8(ascii: "\""))
    }

    mutating func int(_ value: Int64) {
        separate()
        JSONValue.int(value).write(into: &bytes)
    }

    mutating func bool(_ value: Bool) {
        separate()
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
    }

    mutating func null() {
        separate()
        bytes.append(contentsOf: "null".utf8)
    }

    /// Any value, as ``JSONValue`` writes it (a request's echoed item, a number of either kind).
    mutating func value(_ value: JSONValue) {
        separate()
        value.write(into: &bytes)
    }

    /// `text` as a JSON string: escapes for `"`, `\` and control characters, everything else as is.
    static func writeString(_ text: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Most strings need no escape: copy them whole.
        let plain = text.utf8.withContiguousStorageIfAvailable { bytes -> Bool in
            guard !bytes.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else {
                return false
            }
            out.append(contentsOf: bytes)
            return true
        }
        if plain == true {
            out.append(UInt8(ascii: "\""))
            return
        }
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: "\\\"".utf8)
            case UInt8(ascii: "\\"): out.append(contentsOf: "\\\\".utf8)
            case 0x0A: out.append(contentsOf: "\\n".utf8)
            case 0x0D: out.append(contentsOf: "\\r".utf8)
            case 0x09: out.append(contentsOf: "\\t".utf8)
            case 0..<0x20:
                let hex: StaticString = "0123456789abcdef"
                out.append(contentsOf: "\\u00".utf8)
                out.append(hex.utf8Start[Int(byte >> 4)])
                out.append(hex.utf8Start[Int(byte & 0xF)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
