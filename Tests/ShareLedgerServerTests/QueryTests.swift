import Foundation
import NIOHTTP1
import ShareLedger
import TestSupport
import Testing

/// `records/query`: equality and IN filters, sort, resultsLimit with continuationMarker, and what a
/// participant sees of a shared zone.
@Suite("Server: records/query")
struct QueryTests {
    typealias JSON = [String: Any]

    static func names(_ reply: ServerHarness.Reply) -> [String] {
        (reply.json["records"] as? [JSON] ?? []).compactMap { $0["recordName"] as? String }
    }

    static func seed(_ server: ServerHarness) async throws {
        try await AtomicModifyTests.makeZones(server, ["Z"])
        let colors = ["red", "blue", "red", "green", "blue"]
        let operations: [JSON] = colors.enumerated().map { index, color in
            [
                "operationType": "create",
                "record": [
                    "recordName": "n\(index)", "recordType": "Note", "zoneID": ["zoneName": "Z"],
                    "fields": ["color": ["value": color], "rank": ["value": 10 - index]],
                ],
            ]
        } + [["operationType": "create", "record": ["recordName": "other", "recordType": "Task", "zoneID": ["zoneName": "Z"]]]]
        let reply = try await server.post("records/modify", as: "_alice", ["operations": operations])
        #expect(reply.status == 200, "\(reply.text)")
    }

    @Test func equalityAndInFiltersSortAndPages() async throws {
        try await ServerHarness.run { server in
            try await Self.seed(server)
            let red = try await server.post(
                "records/query", as: "_alice",
                [
                    "zoneID": ["zoneName": "Z"],
                    "query": [
                        "recordType": "Note",
                        "filterBy": [["comparator": "EQUALS", "fieldName": "color", "fieldValue": ["value": "red"]]],
                    ],
                ])
            #expect(Self.names(red) == ["n0", "n2"], "\(red.text)")
            let some = try await server.post(
                "records/query", as: "_alice",
                [
                    "zoneID": ["zoneName": "Z"], "resultsLimit": 2,
                    "query": [
                        "recordType": "Note",
                        "filterBy": [
                            ["comparator": "IN", "fieldName": "color", "fieldValue": ["value": ["blue", "green"], "type": "STRING_LIST"]]
                        ],
                        "sortBy": [["fieldName": "rank", "ascending": true]],
                    ],
                ])
            #expect(Self.names(some) == ["n4", "n3"], "\(some.text)")
            let marker = try #require(some.json["continuationMarker"] as? String, "\(some.text)")
            let rest = try await server.post(
                "records/query", as: "_alice",
                [
                    "zoneID": ["zoneName": "Z"], "resultsLimit": 2, "continuationMarker": marker,
                    "query": [
                        "recordType": "Note",
                        "filterBy": [
                            ["comparator": "IN", "fieldName": "color", "fieldValue": ["value": ["blue", "green"], "type": "STRING_LIST"]]
                        ],
                        "sortBy": [["fieldName": "rank", "ascending": true]],
                    ],
                ])
            #expect(Self.names(rest) == ["n1"] && rest.json["continuationMarker"] == nil, "\(rest.text)")
            let missing = try await server.post(
                "records/query", as: "_alice", ["zoneID": ["zoneName": "Missing"], "query": ["recordType": "Note"]])
            #expect(missing.status == 404 && missing.json["serverErrorCode"] as? String == "ZONE_NOT_FOUND", "\(missing.text)")
        }
    }

    @Test func aParticipantQueriesOnlyWhatIsSharedWithThem() async throws {
        try await ServerHarness.run { server in
            try await Self.seed(server)
            let alice = server.ledger.container(ServerHarness.container, userRecordName: "_alice")
            let bob = server.ledger.container(ServerHarness.container, userRecordName: "_bob")
            let share = try await alice.share(rootRecord: RecordID(recordName: "n1", zoneID: RecordZoneID(zoneName: "Z")))
            _ = try await alice.addParticipant(
                LookupInfo(userRecordID: RecordID(userRecordName: "_bob")), permission: .readOnly, to: share.url)
            let zone: JSON = ["zoneName": "Z", "ownerRecordName": "_alice"]
            let before = try await server.post("records/query", database: "shared", as: "_bob", ["zoneID": zone, "query": ["recordType": "Note"]])
            #expect(before.status == 200 && Self.names(before).isEmpty, "\(before.text)")
            _ = try await bob.accept(try await bob.shareMetadata(for: share.url))
            let after = try await server.post("records/query", database: "shared", as: "_bob", ["zoneID": zone, "query": ["recordType": "Note"]])
            #expect(Self.names(after) == ["n1"], "\(after.text)")
            // The private database holds only one's own zones: Bob reaches Alice's through the shared one.
            let lookup = try await server.post(
                "records/lookup", database: "private", as: "_bob", ["zoneID": zone, "records": [["recordName": "n1"]]])
            let item = (lookup.json["records"] as? [JSON])?.first
            #expect(item?["serverErrorCode"] as? String == "ZONE_NOT_FOUND", "\(lookup.text)")
            let query = try await server.post("records/query", database: "private", as: "_bob", ["zoneID": zone, "query": ["recordType": "Note"]])
            #expect(query.status == 404, "\(query.text)")
            let modify = try await server.post(
                "records/modify", database: "private", as: "_bob",
                ["operations": [["operationType": "forceUpdate", "record": ["recordName": "n1", "recordType": "Note", "zoneID": zone]]]])
            #expect(modify.status == 404 && modify.json["serverErrorCode"] as? String == "ZONE_NOT_FOUND", "\(modify.text)")
        }
    }
}
