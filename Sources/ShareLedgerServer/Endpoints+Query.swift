import Foundation
import ShareLedger

/// `records/query`: the records of one zone of a record type, filtered (`filterBy`: `EQUALS`,
/// `NOT_EQUALS`, `IN`, `NOT_IN`, `LESS_THAN`, `LESS_THAN_OR_EQUALS`, `GREATER_THAN`,
/// `GREATER_THAN_OR_EQUALS`, `BEGINS_WITH`), sorted (`sortBy`), `resultsLimit` at a time with a
/// `continuationMarker` for the next page. The ledger keeps no field indexes: each page reads the
/// zone's records of the type through `Container.records(inZone:recordType:limit:where:)`.
extension Endpoints {
    /// The most records a query may match before its page is cut (sorting needs them all).
    static let maxQueryMatches = 50_000

    struct QueryFilter {
        enum Comparator: String {
            case equals = "EQUALS", notEquals = "NOT_EQUALS", `in` = "IN", notIn = "NOT_IN", lessThan = "LESS_THAN"
            case lessThanOrEquals = "LESS_THAN_OR_EQUALS", greaterThan = "GREATER_THAN"
            case greaterThanOrEquals = "GREATER_THAN_OR_EQUALS", beginsWith = "BEGINS_WITH"
        }

        var comparator: Comparator
        var fieldName: String
        var values: [FieldValue]

        func accepts(_ record: Record) -> Bool {
            let value = fieldName == "___recordID" ? FieldValue.string(record.recordID.recordName) : record.fields[fieldName]
            switch comparator {
            case .equals: return value == values.first
            case .notEquals: return value != values.first
            case .in: return value.map(values.contains) ?? false
            case .notIn: return !(value.map(values.contains) ?? false)
            case .beginsWith:
                guard case .string(let text)? = value, case .string(let start)? = values.first else { return false }
                return text.hasPrefix(start)
            case .lessThan, .lessThanOrEquals, .greaterThan, .greaterThanOrEquals:
                guard let value, let bound = values.first, let order = Endpoints.compare(value, bound) else { return false }
                switch comparator {
                case .lessThan: return order < 0
                case .lessThanOrEquals: return order <= 0
                case .greaterThan: return order > 0
                default: return order >= 0
                }
            }
        }
    }

    /// -1, 0 or 1 for two values of one ordered kind (numbers compare across INT64 and DOUBLE); nil otherwise.
    static func compare(_ lhs: FieldValue, _ rhs: FieldValue) -> Int? {
        func sign<T: Comparable>(_ a: T, _ b: T) -> Int { a < b ? -1 : (a == b ? 0 : 1) }
        switch (lhs, rhs) {
        case (.string(let a), .string(let b)): return sign(a, b)
        case (.int64(let a), .int64(let b)): return sign(a, b)
        case (.double(let a), .double(let b)): return sign(a, b)
        case (.int64(let a), .double(let b)): return sign(Double(a), b)
        case (.double(let a), .int64(let b)): return sign(a, Double(b))
        case (.date(let a), .date(let b)): return sign(a, b)
        default: return nil
        }
    }

    @Sendable static func query(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        try request.requirePrivateOrShared("records/query")
        let body = request.body
        let query = try body.required("query", in: "body")
        let recordType = try query.required("recordType", in: "query").string("query.recordType")
        let zone = try request.zoneID() ?? RecordZoneID(zoneName: RecordZoneID.defaultZoneName)
        if let refused = request.notInDatabase(zone, path: "zoneID") { throw refused }
        let limit = try body["resultsLimit"].map { value throws(WireError) in try value.int64("resultsLimit") } ?? 200
        guard (1...Int64(request.maxItems)).contains(limit) else {
            throw WireError(.badRequest, "resultsLimit must be 1 to \(request.maxItems)")
        }
        var desired: Set<String>?
        if let keys = body.nullable("desiredKeys") {
            desired = []
            for (index, key) in try keys.array("desiredKeys").enumerated() { desired?.insert(try key.string("desiredKeys[\(index)]")) }
        }
        let filters = try queryFilters(query)
        let sorts = try querySorts(query)
        let offset = try continuationOffset(body)
        var matches: [Record]
        do {
            matches = try request.container.records(inZone: zone, recordType: recordType, limit: maxQueryMatches + 1) { record in
                filters.allSatisfy { $0.accepts(record) }
            }
        } catch where error.code == .zoneNotFound && request.isOwnDefaultZone(zone) {
            matches = []  // CloudKit's default zone always exists: before its first record, it is empty
        } catch {
            throw WireError(error)
        }
        guard matches.count <= maxQueryMatches else {
            throw WireError(.badRequest, "the query matches more than \(maxQueryMatches) records; narrow it with filterBy")
        }
        sortRecords(&matches, by: sorts)
        let page = matches.dropFirst(offset).prefix(Int(limit))
        var response: [String: JSONValue] = ["records": .array(page.map { Wire.record($0, desiredKeys: desired) })]
        if offset + page.count < matches.count {
            response["continuationMarker"] = .string(Data(String(offset + page.count).utf8).base64EncodedString())
        }
        return .object(response)
    }

    /// The query's `filterBy` list, each comparator, field and value checked.
    private static func queryFilters(_ query: JSONValue) throws(WireError) -> [QueryFilter] {
        var filters: [QueryFilter] = []
        guard let given = query.nullable("filterBy") else { return filters }
        for (index, item) in try given.array("query.filterBy").enumerated() {
            let path = "query.filterBy[\(index)]"
            let text = try item.required("comparator", in: path).string(path + ".comparator")
            guard let comparator = QueryFilter.Comparator(rawValue: text) else {
                throw WireError(
                    .badRequest,
                    "\(path).comparator must be EQUALS, NOT_EQUALS, IN, NOT_IN, LESS_THAN, LESS_THAN_OR_EQUALS, GREATER_THAN, "
                        + "GREATER_THAN_OR_EQUALS or BEGINS_WITH")
            }
            let fieldName = try item.required("fieldName", in: path).string(path + ".fieldName")
            let value = try Wire.parseField(try item.required("fieldValue", in: path), path: path + ".fieldValue")
            var values = [value]
            if comparator == .in || comparator == .notIn {
                guard case .list(let items) = value else { throw WireError.wrongType(path + ".fieldValue", "a list") }
                values = items
            }
            filters.append(QueryFilter(comparator: comparator, fieldName: fieldName, values: values))
        }
        return filters
    }

    /// The query's `sortBy` list: field names, ascending unless said otherwise.
    private static func querySorts(_ query: JSONValue) throws(WireError) -> [(field: String, ascending: Bool)] {
        var sorts: [(field: String, ascending: Bool)] = []
        guard let given = query.nullable("sortBy") else { return sorts }
        for (index, item) in try given.array("query.sortBy").enumerated() {
            let path = "query.sortBy[\(index)]"
            let field = try item.required("fieldName", in: path).string(path + ".fieldName")
            let ascending = try item["ascending"].map { flag throws(WireError) in try flag.bool(path + ".ascending") } ?? true
            sorts.append((field, ascending))
        }
        return sorts
    }

    /// Where a page starts: the offset a `continuationMarker` this server gave holds, or 0.
    private static func continuationOffset(_ body: JSONValue) throws(WireError) -> Int {
        guard let marker = body.nullable("continuationMarker") else { return 0 }
        let text = try marker.string("continuationMarker")
        guard let data = Data(base64Encoded: text), let decoded = Int(String(decoding: data, as: UTF8.self)), decoded >= 0 else {
            throw WireError(.badRequest, "continuationMarker is not one this server gave")
        }
        return decoded
    }

    /// Sorts `matches` by `sorts` in order (records without a field last), then by record name.
    private static func sortRecords(_ matches: inout [Record], by sorts: [(field: String, ascending: Bool)]) {
        if !sorts.isEmpty {
            matches.sort { lhs, rhs in
                for sort in sorts {
                    let a = lhs.fields[sort.field]
                    let b = rhs.fields[sort.field]
                    switch (a, b) {
                    case (nil, nil): continue
                    case (nil, _): return false  // records without the field go last
                    case (_, nil): return true
                    case (let a?, let b?):
                        guard let order = compare(a, b), order != 0 else { continue }
                        return sort.ascending ? order < 0 : order > 0
                    }
                }
                return lhs.recordID.recordName < rhs.recordID.recordName
            }
        }
    }
}
