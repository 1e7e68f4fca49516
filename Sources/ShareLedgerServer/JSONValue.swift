import Foundation

/// A JSON value as the wire carries it: the server parses request bodies into this and checks each
/// key by hand, so that a wrong type or a missing key becomes a `BAD_REQUEST` naming the key (never
/// the value, which may be personal data), and builds responses from it.
enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])
    /// A value already written as JSON (by ``JSONWriter``), copied into the output as it is. The
    /// parser never makes one; the ledger's values (``Wire``) are written this way.
    case rendered([UInt8])

    /// Parses a request body (RFC 8259; at most ``JSONParser/maxDepth`` nested arrays and objects);
    /// malformed JSON is a `BAD_REQUEST`. Hand-written: `JSONDecoder` over this enum (through
    /// `Data`, and a thrown `DecodingError` for every type it tried first) was about 4% of the
    /// server's CPU under `bench --only http` (docs/benchmarks.md).
    static func parse(_ bytes: [UInt8]) throws(WireError) -> JSONValue {
        let parsed = bytes.withUnsafeBufferPointer { buffer -> JSONValue? in
            var parser = JSONParser(buffer)
            return parser.document()
        }
        guard let parsed else { throw WireError(.badRequest, "the request body is not valid JSON") }
        return parsed
    }

    /// The value as compact JSON bytes with sorted keys. Written by hand: JSONEncoder over this enum
    /// was a large share of a resolve's time on the HTTP path (docs/benchmarks.md).
    var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(1_024)
        write(into: &out)
        return out
    }

    func write(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let value): out.append(contentsOf: (value ? "true" : "false").utf8)
        case .int(let value): out.append(contentsOf: String(value).utf8)
        // JSON has no infinity or NaN; Swift's shortest round-trip form is valid JSON otherwise.
        case .double(let value): out.append(contentsOf: (value.isFinite ? String(value) : "null").utf8)
        case .string(let value): JSONWriter.writeString(value, into: &out)
        case .rendered(let bytes): out.append(contentsOf: bytes)
        case .array(let values):
            out.append(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                value.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let object):
            out.append(UInt8(ascii: "{"))
            // The pairs sorted once (no second hash lookup per key).
            for (index, pair) in object.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                JSONWriter.writeString(pair.key, into: &out)
                out.append(UInt8(ascii: ":"))
                pair.value.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// The value of `key` in an object (an explicit `null` included: where the document allows
    /// `null`, the caller says so; everywhere else it is a wrong type).
    subscript(key: String) -> JSONValue? {
        guard case .object(let object) = self else { return nil }
        return object[key]
    }

    /// The value of `key`, with `null` taken as absent (for the keys whose `null` means "all").
    func nullable(_ key: String) -> JSONValue? {
        guard let value = self[key], value != .null else { return nil }
        return value
    }
}

/// Typed reads of request keys: each names the key (its path) when it is missing or of the wrong type.
extension JSONValue {
    func object(_ path: String) throws(WireError) -> [String: JSONValue] {
        guard case .object(let object) = self else { throw WireError.wrongType(path, "an object") }
        return object
    }

    func string(_ path: String) throws(WireError) -> String {
        guard case .string(let value) = self else { throw WireError.wrongType(path, "a string") }
        return value
    }

    func array(_ path: String) throws(WireError) -> [JSONValue] {
        guard case .array(let value) = self else { throw WireError.wrongType(path, "an array") }
        return value
    }

    func bool(_ path: String) throws(WireError) -> Bool {
        guard case .bool(let value) = self else { throw WireError.wrongType(path, "true or false") }
        return value
    }

    /// An integer: a JSON integer `Int64` holds, a JSON number with an exponent or a fraction whose
    /// value is an integer of at most 2^53 in magnitude (beyond, a double is not exact: the number
    /// written may not be the one read), or a string of a decimal `Int64`.
    func int64(_ path: String) throws(WireError) -> Int64 {
        switch self {
        case .int(let value): return value
        case .double(let value):
            guard abs(value) <= 9_007_199_254_740_992, let exact = Int64(exactly: value) else { break }
            return exact
        case .string(let text):
            guard let value = Int64(text) else { break }
            return value
        default: break
        }
        throw WireError.wrongType(path, "an integer from \(Int64.min) to \(Int64.max)")
    }

    /// An integer within `range` (what every numeric request key but a field value takes): out of
    /// range, or not an integer, is a `BAD_REQUEST` that says the range.
    func int64(_ path: String, in range: ClosedRange<Int64>, what: String = "an integer") throws(WireError) -> Int64 {
        let expected = "\(what) from \(range.lowerBound) to \(range.upperBound)"
        guard let value = try? int64(path), range.contains(value) else { throw WireError.wrongType(path, expected) }
        return value
    }

    func double(_ path: String) throws(WireError) -> Double {
        switch self {
        case .int(let value): return Double(value)
        case .double(let value): return value
        case .string(let text) where Double(text) != nil: return Double(text)!
        default: throw WireError.wrongType(path, "a number")
        }
    }

    /// A finite number (JSON has no NaN or infinity; a string such as "nan" or "1e999" is refused too).
    func finiteDouble(_ path: String) throws(WireError) -> Double {
        guard let value = try? double(path), value.isFinite else {
            let most = Double.greatestFiniteMagnitude
            throw WireError.wrongType(path, "a finite number from -\(most) to \(most) (JSON has no NaN or infinity)")
        }
        return value
    }

    /// A required key of an object.
    func required(_ key: String, in path: String) throws(WireError) -> JSONValue {
        guard let value = self[key] else { throw WireError(.badRequest, "\(path).\(key) is required") }
        return value
    }

    /// An optional string key.
    func optionalString(_ key: String, in path: String) throws(WireError) -> String? {
        try self[key].map { value throws(WireError) in try value.string("\(path).\(key)") }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByDictionaryLiteral, ExpressibleByArrayLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral
{
    init(stringLiteral value: String) { self = .string(value) }
    init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
    init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    init(booleanLiteral value: Bool) { self = .bool(value) }
    init(integerLiteral value: Int64) { self = .int(value) }
}
