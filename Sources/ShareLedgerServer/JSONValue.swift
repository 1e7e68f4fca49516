import Foundation

/// A JSON value as the wire carries it: the server parses request bodies into this and checks each
/// key by hand, so that a wrong type or a missing key becomes a `BAD_REQUEST` naming the key (never
/// the value, which may be personal data), and builds responses from it.
enum JSONValue: Sendable, Hashable, Codable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .int(value)
        } else if let value = try? container.decode(Double.self) {
            self = .double(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// Parses a request body; malformed JSON is a `BAD_REQUEST`.
    static func parse(_ bytes: [UInt8]) throws(WireError) -> JSONValue {
        do {
            return try JSONDecoder().decode(JSONValue.self, from: Data(bytes))
        } catch {
            throw WireError(.badRequest, "the request body is not valid JSON")
        }
    }

    /// The value as compact JSON bytes with sorted keys.
    var bytes: [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? Array(encoder.encode(self))) ?? Array("{}".utf8)
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

    func int64(_ path: String) throws(WireError) -> Int64 {
        switch self {
        case .int(let value): return value
        case .double(let value) where value.rounded() == value && abs(value) < 9.0e15: return Int64(value)
        case .string(let text) where Int64(text) != nil: return Int64(text)!
        default: throw WireError.wrongType(path, "an integer")
        }
    }

    func double(_ path: String) throws(WireError) -> Double {
        switch self {
        case .int(let value): return Double(value)
        case .double(let value): return value
        case .string(let text) where Double(text) != nil: return Double(text)!
        default: throw WireError.wrongType(path, "a number")
        }
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
