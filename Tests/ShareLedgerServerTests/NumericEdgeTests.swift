import Foundation
import NIOHTTP1
import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// Every numeric field type of `records/modify` (INT64, DOUBLE, TIMESTAMP and their _LIST forms),
/// as JSON numbers and as strings, at and beyond every bound, against a real server on loopback:
/// each value is stored and reads back the same, or gets a typed `BAD_REQUEST` that says the range
/// and changes nothing. The server answers every one (a value once stopped it with a trap).
@Suite("Server: numbers at the edges")
struct NumericEdgeTests {
    /// JavaScript's Date range in milliseconds, what TIMESTAMP accepts.
    static let timestampBound: Int64 = 8_640_000_000_000_000

    /// A value as the request carries it: its JSON text, and what a correct server does with it.
    struct Case: CustomStringConvertible {
        var type: String
        var json: String
        /// The value it reads back as (a JSON integer or double), or nil when it must be refused.
        var expected: Expected?
        var description: String { "\(type) \(json)" }
    }

    enum Expected: Equatable {
        case integer(Int64)
        case double(Double)
        case list([Expected])
    }

    // MARK: - The oracle, written from the documented rules (not from the server's code)

    /// An integer given as JSON text: a JSON integer Int64 holds; a number with an exponent or a
    /// fraction whose value is an integer of at most 2^53 in magnitude (where a double is exact); a
    /// string of a decimal Int64.
    static func integer(_ json: String) -> Int64? {
        if json.hasPrefix("\"") { return Int64(json.dropFirst().dropLast()) }
        if let exact = Int64(json) { return exact }
        guard let double = Double(json), double.isFinite, abs(double) <= 9_007_199_254_740_992 else { return nil }
        return Int64(exactly: double)
    }

    static func expected(type: String, json: String) -> Expected? {
        switch type {
        case "INT64": return integer(json).map(Expected.integer)
        case "TIMESTAMP":
            guard let millis = integer(json), abs(Double(millis)) <= Double(timestampBound) else { return nil }
            return .integer(millis)
        case "DOUBLE":
            let text = json.hasPrefix("\"") ? String(json.dropFirst().dropLast()) : json
            // A JSON number beyond Double is not valid JSON (the whole body is refused).
            guard let value = Double(text), value.isFinite else { return nil }
            return .double(value)
        default: return nil
        }
    }

    /// The values of each type: the bounds, one beyond, the extremes of Int64 and Double, non-numbers,
    /// as numbers and as strings, and random ones near the bounds (seeded).
    static func cases(seed: UInt64) -> [Case] {
        let bound = timestampBound
        var integers: [String] = [
            "0", "1", "-1", "\(bound)", "\(-bound)", "\(bound + 1)", "\(-bound - 1)", "9000000000000000", "9300000000000000",
            "-9300000000000000", "\(Int64.max)", "\(Int64.min)", "9223372036854775808", "-9223372036854775809",
            "99999999999999999999", "8.64e15", "8.640000000000001e15", "1e18", "9.3e18", "-9.3e18", "1e300", "-1e300", "1.5",
            "-0", "0.0",
        ]
        var doubles: [String] = [
            "0", "-0.0", "1.7976931348623157e308", "-1.7976931348623157e308", "5e-324", "2.2250738585072014e-308",
            "9007199254740993", "\(Int64.max)", "1e-400",
        ]
        let strings = [
            "\"nan\"", "\"NaN\"", "\"inf\"", "\"-inf\"", "\"infinity\"", "\"1e999\"", "\"-1e999\"", "\"\(Int64.max)\"",
            "\"\(Int64.min)\"", "\"9223372036854775808\"", "\"\(bound)\"", "\"\(bound + 1)\"", "\"9300000000000000\"", "\"12\"",
            "\"1.5\"", "\"\"", "\" 1\"",
        ]
        var random = SplitMix64(state: seed)
        for _ in 0..<12 {
            let near = Int64(bitPattern: random.next() % 2_000_001) - 1_000_000
            integers.append("\(bound + near)")
            integers.append("\(-bound - near)")
            integers.append("\(Int64(bitPattern: random.next()))")
            doubles.append("\(Double(bitPattern: random.next() & 0x7FEF_FFFF_FFFF_FFFF))")
        }
        var out: [Case] = []
        for type in ["INT64", "TIMESTAMP", "DOUBLE"] {
            let values = (type == "DOUBLE" ? doubles : integers) + strings
            for json in values {
                out.append(Case(type: type, json: json, expected: expected(type: type, json: json)))
                // The list form: the value between two sound ones.
                let list = "[0,\(json),1]"
                let elements = ["0", json, "1"].map { expected(type: type, json: $0) }
                let all = elements.allSatisfy { $0 != nil } ? Expected.list(elements.compactMap { $0 }) : nil
                out.append(Case(type: type + "_LIST", json: list, expected: all))
            }
        }
        return out
    }

    static func body(_ name: String, _ testCase: Case) -> [UInt8] {
        Array(
            """
            {"zoneID":{"zoneName":"Z"},"operations":[{"operationType":"create","record":{"recordName":"\(name)",\
            "recordType":"N","fields":{"f":{"type":"\(testCase.type)","value":\(testCase.json)}}}}]}
            """.utf8)
    }

    /// Whether `value` (a JSON value read back) is `expected`. A TIMESTAMP keeps the precision of
    /// Foundation's `Date` (a double of seconds): to the millisecond until about ±4.4e15 ms, to the
    /// spacing of doubles beyond (a few milliseconds at ±8.64e15).
    static func matches(_ value: Any?, _ expected: Expected, timestamp: Bool) -> Bool {
        switch expected {
        case .integer(let integer):
            guard let number = value as? NSNumber else { return false }
            guard timestamp else { return number.int64Value == integer }
            let spacing = (abs(Double(integer)) / 1_000 + 978_307_200).ulp * 2_000
            return abs(Double(number.int64Value) - Double(integer)) <= spacing.rounded(.down)
        case .double(let double):
            guard let number = value as? NSNumber else { return false }
            return number.doubleValue == double
        case .list(let items):
            guard let array = value as? [Any], array.count == items.count else { return false }
            return zip(array, items).allSatisfy { matches($0, $1, timestamp: timestamp) }
        }
    }

    @Test("every numeric field type at and beyond its bounds: stored exactly, or BAD_REQUEST naming the range, nothing changed")
    func numericFieldsAtTheEdges() async throws {
        try await ServerHarness.run { server in
            let zone = try await server.post(
                "zones/modify", as: "_alice", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Z"]]]]])
            #expect(zone.status == 200, "\(zone.text)")
            let url = server.url("records/modify", as: "_alice")
            for (index, testCase) in Self.cases(seed: 0xED6E).enumerated() {
                let name = "c\(index)"
                let head = try server.ledger.log.head().position
                let reply = try await server.send(.POST, url, body: Self.body(name, testCase))
                guard let expected = testCase.expected else {
                    #expect(reply.status == 400, "\(testCase): \(reply.status) \(reply.text)")
                    #expect(reply.json["serverErrorCode"] as? String == "BAD_REQUEST", "\(testCase): \(reply.text)")
                    let reason = reply.json["reason"] as? String ?? ""
                    // It says what is allowed: a range, a finite number, or valid JSON.
                    #expect(
                        reason.contains(" to ") || reason.contains("finite") || reason.contains("not valid JSON"),
                        "\(testCase): \(reason)")
                    #expect(try server.ledger.log.head().position == head, "\(testCase) changed the ledger")
                    continue
                }
                let records = reply.json["records"] as? [[String: Any]] ?? []
                #expect(reply.status == 200 && records.first?["serverErrorCode"] == nil, "\(testCase): \(reply.text)")
                let lookup = try await server.post(
                    "records/lookup", as: "_alice", ["zoneID": ["zoneName": "Z"], "records": [["recordName": name]]])
                let found = (lookup.json["records"] as? [[String: Any]])?.first
                let value = ((found?["fields"] as? [String: Any])?["f"] as? [String: Any])?["value"]
                #expect(Self.matches(value, expected, timestamp: testCase.type.hasPrefix("TIMESTAMP")), "\(testCase) read back as \(String(describing: value))")
            }
            // Still serving, and the ledger audits clean.
            let caller = try await server.post("users/caller", as: "_alice", [:] as [String: Any])
            #expect(caller.status == 200)
            let report = try LedgerAudit(server.ledger).audit(scratchPath: server.directory.child("audit-scratch"))
            #expect(report.ok, "\(report.problems)")
        }
    }

    @Test("the probe's request, as a number and as a string: BAD_REQUEST, and the server keeps serving")
    func theProbesRequest() async throws {
        try await ServerHarness.run { server in
            _ = try await server.post(
                "zones/modify", as: "_alice", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "AZ"]]]]])
            for value in ["9223372036854775807", "\"9223372036854775807\"", "9300000000000000", "\"9300000000000000\""] {
                for type in ["TIMESTAMP", "TIMESTAMP_LIST"] {
                    let json = type == "TIMESTAMP" ? value : "[\(value)]"
                    let body = """
                        {"zoneID":{"zoneName":"AZ"},"operations":[{"operationType":"create","record":\
                        {"recordName":"c0","recordType":"N","fields":{"f":{"type":"\(type)","value":\(json)}}}}]}
                        """
                    let reply = try await server.send(.POST, server.url("records/modify", as: "_alice"), body: Array(body.utf8))
                    #expect(reply.status == 400, "\(type) \(value): \(reply.text)")
                    #expect((reply.json["reason"] as? String ?? "").contains("-8640000000000000 to 8640000000000000"), "\(reply.text)")
                }
            }
        }
    }
}
