import Foundation
import NIOHTTP1
import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// `records/modify` with CloudKit's record semantics: what each operation type changes, which need
/// a change tag, what `created` and `modified` keep, and the error codes of Apple's table.
@Suite("Server: CloudKit's record semantics in records/modify")
struct RecordSemanticsTests {
    typealias JSON = [String: Any]

    static func operation(_ type: String, _ name: String, tag: String? = nil, fields: JSON = [:], zone: String = "Z") -> JSON {
        var record: JSON = ["recordName": name, "recordType": "Note", "zoneID": ["zoneName": zone], "fields": fields]
        if let tag { record["recordChangeTag"] = tag }
        return ["operationType": type, "record": record]
    }

    static func first(_ reply: ServerHarness.Reply) -> JSON {
        (reply.json["records"] as? [JSON])?.first ?? [:]
    }

    static func fieldNames(_ record: JSON) -> Set<String> {
        Set((record["fields"] as? JSON)?.keys.map { $0 } ?? [])
    }

    static func field(_ record: JSON, _ key: String) -> Any? {
        ((record["fields"] as? JSON)?[key] as? JSON)?["value"]
    }

    /// Alice's zone `Z` with record `r` holding `a`, `b` and a list `tags`; returns its change tag.
    static func setUp(_ server: ServerHarness) async throws -> String {
        try await AtomicModifyTests.makeZones(server, ["Z"])
        let created = try await server.post(
            "records/modify", as: "_alice",
            [
                "operations": [
                    operation(
                        "create", "r",
                        fields: [
                            "a": ["value": "one", "type": "STRING"], "b": ["value": 2, "type": "INT64"],
                            "tags": ["value": ["x", "y"], "type": "STRING_LIST"],
                        ])
                ]
            ])
        return try #require(first(created)["recordChangeTag"] as? String, "\(created.text)")
    }

    @Test func updateAndForceUpdateChangeOnlyTheNamedFields() async throws {
        try await ServerHarness.run { server in
            let tag = try await Self.setUp(server)
            let updated = try await server.post(
                "records/modify", as: "_alice",
                ["operations": [Self.operation("update", "r", tag: tag, fields: ["a": ["value": "uno", "type": "STRING"]])]])
            let record = Self.first(updated)
            #expect(Self.fieldNames(record) == ["a", "b", "tags"], "\(updated.text)")
            #expect(Self.field(record, "a") as? String == "uno" && Self.field(record, "b") as? Int == 2)

            // forceUpdate: no tag, the list field kept; a field named with a null value is removed.
            let forced = try await server.post(
                "records/modify", as: "_alice",
                ["operations": [Self.operation("forceUpdate", "r", fields: ["b": ["value": 3], "a": ["value": NSNull()]])]])
            let after = Self.first(forced)
            #expect(Self.fieldNames(after) == ["b", "tags"], "\(forced.text)")
            #expect(Self.field(after, "tags") as? [String] == ["x", "y"] && Self.field(after, "b") as? Int == 3)
        }
    }

    @Test func updateNeedsACurrentChangeTag() async throws {
        try await ServerHarness.run { server in
            let tag = try await Self.setUp(server)
            let head = try server.ledger.log.head().position.rawValue
            let untagged = try await server.post(
                "records/modify", as: "_alice", ["operations": [Self.operation("update", "r", fields: ["a": ["value": "x"]])]])
            #expect(untagged.status == 400 && untagged.json["serverErrorCode"] as? String == "BAD_REQUEST", "\(untagged.text)")
            #expect(try server.ledger.log.head().position.rawValue == head)
            _ = try await server.post(
                "records/modify", as: "_alice", ["operations": [Self.operation("forceUpdate", "r", fields: ["a": ["value": "x"]])]])
            let stale = try await server.post(
                "records/modify", as: "_alice",
                ["operations": [Self.operation("update", "r", tag: tag, fields: ["a": ["value": "y"]])]])
            #expect(Self.first(stale)["serverErrorCode"] as? String == "CONFLICT", "\(stale.text)")
        }
    }

    @Test func replaceSetsTheOtherFieldsToNullAndForceReplaceCreates() async throws {
        try await ServerHarness.run { server in
            let tag = try await Self.setUp(server)
            let replaced = try await server.post(
                "records/modify", as: "_alice",
                ["operations": [Self.operation("replace", "r", tag: tag, fields: ["a": ["value": "only"]])]])
            #expect(Self.fieldNames(Self.first(replaced)) == ["a"], "\(replaced.text)")
            let forced = try await server.post(
                "records/modify", as: "_alice",
                [
                    "operations": [
                        Self.operation("forceReplace", "r", fields: ["b": ["value": 9]]),
                        Self.operation("forceReplace", "new", fields: ["c": ["value": "made"]]),
                    ]
                ])
            let records = forced.json["records"] as? [JSON] ?? []
            #expect(forced.status == 200 && records.count == 2, "\(forced.text)")
            #expect(records.map(Self.fieldNames) == [["b"], ["c"]], "\(forced.text)")
        }
    }

    @Test func createOfAnExistingRecordIsExists() async throws {
        try await ServerHarness.run { server in
            _ = try await Self.setUp(server)
            let again = try await server.post(
                "records/modify", as: "_alice", ["operations": [Self.operation("create", "r", fields: ["a": ["value": "z"]])]])
            #expect(Self.first(again)["serverErrorCode"] as? String == "EXISTS", "\(again.text)")
        }
    }

    @Test func deleteChecksAGivenTagAndForceDeleteDoesNot() async throws {
        try await ServerHarness.run { server in
            let tag = try await Self.setUp(server)
            _ = try await server.post(
                "records/modify", as: "_alice", ["operations": [Self.operation("forceUpdate", "r", fields: ["a": ["value": "x"]])]])
            let stale = try await server.post(
                "records/modify", as: "_alice", ["operations": [Self.operation("delete", "r", tag: tag)]])
            #expect(Self.first(stale)["serverErrorCode"] as? String == "CONFLICT", "\(stale.text)")
            let forced = try await server.post(
                "records/modify", as: "_alice", ["operations": [Self.operation("forceDelete", "r", tag: tag)]])
            let deletion = Self.first(forced)
            #expect(deletion["deleted"] as? Bool == true, "\(forced.text)")
            // The deletion names the owner as every other answer does.
            #expect((deletion["zoneID"] as? JSON)?["ownerRecordName"] as? String == "_alice", "\(forced.text)")
        }
    }

    /// A participant's change keeps the record's creation (time and user); `modified` names the participant.
    @Test func createdIsKeptFromTheCreation() async throws {
        try await ServerHarness.run { server in
            _ = try await Self.setUp(server)
            let alice = server.ledger.container(ServerHarness.container, userRecordName: "_alice")
            let bob = server.ledger.container(ServerHarness.container, userRecordName: "_bob")
            let zone = RecordZoneID(zoneName: "Z")
            let share = try await alice.share(rootRecord: RecordID(recordName: "r", zoneID: zone), title: "r")
            _ = try await alice.addParticipant(
                LookupInfo(userRecordID: RecordID(userRecordName: "_bob")), permission: .readWrite, to: share.url)
            _ = try await bob.accept(try await bob.shareMetadata(for: share.url))
            let before = try alice.record(for: RecordID(recordName: "r", zoneID: zone))
            let changed = try await server.post(
                "records/modify", database: "shared", as: "_bob",
                [
                    "operations": [
                        [
                            "operationType": "forceUpdate",
                            "record": [
                                "recordName": "r", "recordType": "Note", "fields": ["a": ["value": "bob's"]],
                                "zoneID": ["zoneName": "Z", "ownerRecordName": "_alice"],
                            ],
                        ]
                    ]
                ])
            let record = Self.first(changed)
            let created = record["created"] as? JSON
            let modified = record["modified"] as? JSON
            #expect(created?["userRecordName"] as? String == "_alice", "\(changed.text)")
            #expect(modified?["userRecordName"] as? String == "_bob", "\(changed.text)")
            #expect((created?["timestamp"] as? Int).map(Int64.init) == before.creationDate.map { Int64(($0.timeIntervalSince1970 * 1_000).rounded()) })
            #expect(Self.fieldNames(record) == ["a", "b", "tags"])
            let report = try LedgerAudit(server.ledger).audit(scratchPath: server.directory.child("audit-scratch"))
            #expect(report.ok, "\(report.problems)")
        }
    }

    @Test func aMissingZoneIsZoneNotFoundInLookupAsInModify() async throws {
        try await ServerHarness.run { server in
            let lookup = try await server.post(
                "records/lookup", as: "_alice", ["zoneID": ["zoneName": "Missing"], "records": [["recordName": "r"]]])
            #expect(Self.first(lookup)["serverErrorCode"] as? String == "ZONE_NOT_FOUND", "\(lookup.text)")
            let modify = try await server.post(
                "records/modify", as: "_alice", ["operations": [Self.operation("create", "r", zone: "Missing")]])
            #expect(Self.first(modify)["serverErrorCode"] as? String == "ZONE_NOT_FOUND", "\(modify.text)")
            // Without a zoneID: CloudKit's default zone, which always exists in the private database.
            let noZone = try await server.post(
                "records/modify", as: "_alice", ["operations": [["operationType": "create", "record": ["recordName": "r", "recordType": "T"]]]])
            #expect(Self.first(noZone)["serverErrorCode"] == nil, "\(noZone.text)")
            #expect((Self.first(noZone)["zoneID"] as? [String: Any])?["zoneName"] as? String == "_defaultZone", "\(noZone.text)")
        }
    }

    @Test func aWholeRequestErrorsUUIDIsAUUID() async throws {
        for keepingLogs in [true, false] {
            try await ServerHarness.run(keepingLogs: keepingLogs) { server in
                let bad = try await server.send(.POST, server.url("records/modify", as: "_alice"), body: Array("{".utf8))
                #expect(bad.status == 400)
                #expect((bad.json["uuid"] as? String).flatMap(UUID.init(uuidString:)) != nil, "\(bad.text)")
            }
        }
    }

    @Test func usersCallerIsAListOfOneIdentity() async throws {
        try await ServerHarness.run { server in
            let caller = try await server.send(.GET, server.url("users/caller", database: "public", as: "_bob"))
            let users = caller.json["users"] as? [JSON]
            #expect(users?.count == 1 && users?.first?["userRecordName"] as? String == "_bob", "\(caller.text)")
        }
    }
}
