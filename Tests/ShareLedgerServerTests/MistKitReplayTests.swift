import Crypto
import Foundation
import NIOHTTP1
import ShareLedger
import ShareLedgerAudit
import ShareLedgerServer
import TestSupport
import Testing

/// MistKit (brightdigit/MistKit 1.0.0-alpha.5, a CloudKit Web Services client generated from an
/// OpenAPI document) was walked against `serve` outside this repository, configured only with a
/// transport that sends to the server and with credentials (docs/operations.md). These are the
/// requests it sent, as captured then: method, database, subpath, the headers it sets, and its
/// bodies (whitespace removed). Each answer is decoded the way MistKit decodes it (the `Decodable`
/// mirrors below follow the schemas of MistKit's OpenAPI document), so the conformance is checked in
/// every test run without building MistKit.
@Suite("Server: MistKit's requests, replayed")
struct MistKitReplayTests {
    // MARK: - What MistKit decodes

    /// MistKit's `FieldValueResponse`: `type` must be one of its ten names, or the whole answer fails
    /// to decode. (It has no `*_LIST` names, which Apple and this server send for lists, so MistKit
    /// cannot read a record with a list field; the records here carry none.)
    struct Field: Decodable, Equatable {
        enum Kind: String, Decodable { case STRING, INT64, DOUBLE, BYTES, REFERENCE, ASSET, ASSETID, LOCATION, TIMESTAMP, LIST }
        var type: Kind?
        var value: Value
    }

    enum Value: Decodable, Equatable {
        case string(String), int(Int64), double(Double), reference(String)

        init(from decoder: any Decoder) throws {
            let single = try decoder.singleValueContainer()
            if let text = try? single.decode(String.self) { self = .string(text); return }
            if let number = try? single.decode(Int64.self) { self = .int(number); return }
            if let number = try? single.decode(Double.self) { self = .double(number); return }
            struct Reference: Decodable { var recordName: String; var action: String? }
            self = .reference(try single.decode(Reference.self).recordName)
        }
    }

    struct Stamp: Decodable { var timestamp: Double?; var userRecordName: String? }

    /// MistKit's `RecordResponse` (plus the error keys it ignores, to check them here).
    struct RecordReply: Decodable {
        var recordName: String?
        var recordType: String?
        var recordChangeTag: String?
        var fields: [String: Field]?
        var created: Stamp?
        var modified: Stamp?
        var deleted: Bool?
        var serverErrorCode: String?
    }

    struct Records: Decodable { var records: [RecordReply]?; var continuationMarker: String? }

    struct Zones: Decodable {
        struct ZoneID: Decodable { var zoneName: String?; var ownerName: String? }
        struct Zone: Decodable { var zoneID: ZoneID? }
        var zones: [Zone]?
    }

    struct User: Decodable { var userRecordName: String?; var firstName: String?; var lastName: String?; var emailAddress: String? }

    struct Identities: Decodable {
        struct LookupInfo: Decodable { var emailAddress: String?; var phoneNumber: String?; var userRecordName: String? }
        struct Identity: Decodable { var userRecordName: String?; var lookupInfo: LookupInfo? }
        var users: [Identity]?
    }

    /// MistKit's `ErrorResponse`: `serverErrorCode` is one of Apple's codes.
    struct ErrorResponse: Decodable {
        enum Code: String, Decodable {
            case ACCESS_DENIED, ATOMIC_ERROR, AUTHENTICATION_FAILED, AUTHENTICATION_REQUIRED, BAD_REQUEST, CONFLICT, EXISTS,
                INTERNAL_ERROR, NOT_FOUND, QUOTA_EXCEEDED, THROTTLED, TRY_AGAIN_LATER, VALIDATING_REFERENCE_ERROR, ZONE_NOT_FOUND
        }
        var uuid: String?
        var serverErrorCode: Code?
        var reason: String?
        var redirectURL: String?
    }

    // MARK: - Sending as MistKit does

    /// The headers MistKit sets: `accept` always; `content-type` with a body.
    static func headers(body: String?) -> [(String, String)] {
        body == nil ? [("accept", "application/json")] : [("accept", "application/json"), ("content-type", "application/json; charset=utf-8")]
    }

    /// One of MistKit's requests as `user` (web auth token), answered 200 and decoded as `T`.
    static func replay<T: Decodable>(
        _ server: ServerHarness, _ type: T.Type, _ method: HTTPMethod, _ database: String, _ subpath: String, as user: String,
        _ body: String? = nil, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> T {
        let reply = try await server.send(
            method, server.url(subpath, database: database, as: user), body: body.map { Array($0.utf8) }, headers: headers(body: body))
        #expect(reply.status == 200, "\(subpath): \(reply.text)", sourceLocation: sourceLocation)
        return try JSONDecoder().decode(T.self, from: Data(reply.body))
    }

    static func modify(_ operations: String) -> String { #"{"atomic":false,"operations":["# + operations + "]}" }

    static func create(_ name: String?, _ type: String, _ fields: String) -> String {
        let named = name.map { #""recordName":"\#($0)","# } ?? ""
        return #"{"operationType":"create","record":{"fields":{\#(fields)},\#(named)"recordType":"\#(type)"}}"#
    }

    /// queryRecords' body: MistKit always names `_defaultZone` and a `resultsLimit` (100 unless given).
    static func query(_ rest: String, limit: Int = 100) -> String {
        #"{"query":{\#(rest)},"resultsLimit":\#(limit),"zoneID":{"zoneName":"_defaultZone"}"# + "}"
    }

    // MARK: - The walk

    /// MistKit names no zone in records/modify and records/lookup, and `_defaultZone` in records/query:
    /// every record call goes to the default zone, which the private database always has.
    @Test func recordCallsInTheDefaultZone() async throws {
        try await ServerHarness.run { server in
            func records(_ subpath: String, _ body: String) async throws -> [RecordReply] {
                try await Self.replay(server, Records.self, .POST, "private", subpath, as: "_alice", body).records ?? []
            }
            // createRecord: untyped values (MistKit sends no type for scalars).
            let noteFields = #""count":{"value":3},"due":{"value":1764000000123},"rating":{"value":4.5},"title":{"value":"Groceries"}"#
            let created = try #require(try await records("records/modify", Self.modify(Self.create("mk-1", "Note", noteFields))).first)
            #expect(created.serverErrorCode == nil && created.recordName == "mk-1" && created.recordType == "Note")
            #expect(created.fields?["title"] == Field(type: .STRING, value: .string("Groceries")))
            #expect(created.fields?["count"] == Field(type: .INT64, value: .int(3)))
            #expect(created.fields?["rating"] == Field(type: .DOUBLE, value: .double(4.5)))
            #expect(created.fields?["due"] == Field(type: .INT64, value: .int(1_764_000_000_123)))
            #expect(created.created?.userRecordName == "_alice" && created.created?.timestamp != nil)
            let tag = try #require(created.recordChangeTag)

            // lookupRecords, with and without desiredKeys.
            let found = try #require(try await records("records/lookup", #"{"records":[{"recordName":"mk-1"}]}"#).first)
            #expect(found.recordChangeTag == tag && found.fields?.count == 4)
            let titleOnly = try await records("records/lookup", #"{"records":[{"desiredKeys":["title"],"recordName":"mk-1"}]}"#)
            #expect(titleOnly.first.map { Array(($0.fields ?? [:]).keys) } == ["title"])

            // updateRecord with the tag: the named field changes, the others stay.
            let update = #"{"operationType":"update","record":{"fields":{"count":{"value":4}},"recordChangeTag":"\#(tag)","recordName":"mk-1","recordType":"Note"}}"#
            let updated = try #require(try await records("records/modify", Self.modify(update)).first)
            #expect(updated.fields?["count"]?.value == .int(4) && updated.fields?["title"]?.value == .string("Groceries"))
            #expect(updated.created?.userRecordName == "_alice" && updated.modified?.userRecordName == "_alice")
            let stale = #"{"operationType":"update","record":{"fields":{"count":{"value":5}},"recordChangeTag":"stale","recordName":"mk-1","recordType":"Note"}}"#
            #expect(try await records("records/modify", Self.modify(stale)).first?.serverErrorCode == "CONFLICT")

            // A batch, an existing name, a record without a name, a reference.
            let batch = try await records(
                "records/modify",
                Self.modify(
                    Self.create("mk-2", "Note", #""count":{"value":1},"title":{"value":"Hardware"}"#) + ","
                        + Self.create("mk-3", "Note", #""count":{"value":7},"title":{"value":"Books"}"#)))
            #expect(batch.map(\.recordName) == ["mk-2", "mk-3"] && batch.allSatisfy { $0.serverErrorCode == nil })
            let again = try await records("records/modify", Self.modify(Self.create("mk-2", "Note", #""title":{"value":"again"}"#)))
            #expect(again.first?.serverErrorCode == "EXISTS")
            let unnamed = try #require(try await records("records/modify", Self.modify(Self.create(nil, "Note", #""title":{"value":"Unnamed"}"#))).first)
            #expect(unnamed.serverErrorCode == nil && unnamed.recordName.flatMap(UUID.init(uuidString:)) != nil, "\(unnamed)")
            let item = try await records(
                "records/modify", Self.modify(Self.create("mk-item", "Item", #""note":{"value":{"action":"NONE","recordName":"mk-1"}}"#)))
            #expect(item.first?.fields?["note"] == Field(type: .REFERENCE, value: .reference("mk-1")))

            // queryRecords: all, EQUALS, IN with sort and limit, GREATER_THAN with desiredKeys, BEGINS_WITH.
            let all = try await records("records/query", Self.query(#""recordType":"Note""#, limit: 200))
            #expect(Set(all.compactMap(\.recordName)).isSuperset(of: ["mk-1", "mk-2", "mk-3"]))
            let books = try await records(
                "records/query", Self.query(#""filterBy":[{"comparator":"EQUALS","fieldName":"title","fieldValue":{"value":"Books"}}],"recordType":"Note""#))
            #expect(books.map(\.recordName) == ["mk-3"])
            let counted = try await records(
                "records/query",
                #"{"query":{"filterBy":[{"comparator":"IN","fieldName":"count","fieldValue":{"type":"INT64_LIST","value":[1,4,7]}}],"recordType":"Note","sortBy":[{"ascending":false,"fieldName":"count"}]},"resultsLimit":2,"zoneID":{"zoneName":"_defaultZone"}}"#)
            #expect(counted.map(\.recordName) == ["mk-3", "mk-1"])
            let above = try await records(
                "records/query",
                #"{"desiredKeys":["count"],"query":{"filterBy":[{"comparator":"GREATER_THAN","fieldName":"count","fieldValue":{"value":3}}],"recordType":"Note","sortBy":[{"ascending":true,"fieldName":"count"}]},"resultsLimit":100,"zoneID":{"zoneName":"_defaultZone"}}"#)
            #expect(above.map(\.recordName) == ["mk-1", "mk-3"] && above.allSatisfy { $0.fields.map { Array($0.keys) } == ["count"] })
            let prefixed = try await records(
                "records/query", Self.query(#""filterBy":[{"comparator":"BEGINS_WITH","fieldName":"title","fieldValue":{"value":"Hard"}}],"recordType":"Note""#))
            #expect(prefixed.map(\.recordName) == ["mk-2"])

            // forceUpdate keeps the other fields; replace (with its tag) and forceReplace drop them.
            let forced = try #require(
                try await records(
                    "records/modify",
                    Self.modify(#"{"operationType":"forceUpdate","record":{"fields":{"count":{"value":2}},"recordName":"mk-2","recordType":"Note"}}"#)
                ).first)
            #expect(forced.fields?["title"]?.value == .string("Hardware"))
            let forcedTag = try #require(forced.recordChangeTag)
            let replaced = try await records(
                "records/modify",
                Self.modify(#"{"operationType":"replace","record":{"fields":{"count":{"value":9}},"recordChangeTag":"\#(forcedTag)","recordName":"mk-2","recordType":"Note"}}"#))
            #expect(replaced.first?.serverErrorCode == nil && replaced.first?.fields?["title"] == nil)
            let forceReplaced = try await records(
                "records/modify",
                Self.modify(#"{"operationType":"forceReplace","record":{"fields":{"title":{"value":"X"}},"recordName":"mk-2","recordType":"Note"}}"#))
            #expect(forceReplaced.first?.serverErrorCode == nil && forceReplaced.first?.fields?["count"] == nil)

            // deleteRecord with the tag (MistKit sends empty fields and the type), then a lookup; forceDelete.
            let newTag = try #require(updated.recordChangeTag)
            let deleted = try await records(
                "records/modify",
                Self.modify(#"{"operationType":"delete","record":{"fields":{},"recordChangeTag":"\#(newTag)","recordName":"mk-1","recordType":"Note"}}"#))
            #expect(deleted.first?.serverErrorCode == nil && deleted.first?.recordName == "mk-1")
            #expect(try await records("records/lookup", #"{"records":[{"recordName":"mk-1"}]}"#).first?.serverErrorCode == "NOT_FOUND")
            let gone = try await records(
                "records/modify",
                Self.modify(#"{"operationType":"forceDelete","record":{"fields":{},"recordName":"mk-3","recordType":"Note"}}"#))
            #expect(gone.first?.serverErrorCode == nil && gone.first?.recordName == "mk-3")
            #expect(try LedgerAudit(server.ledger).audit(scratchPath: server.directory.child("audit")).ok)
        }
    }

    /// fetchCurrentUser, listZones and lookupZones in the private database, and discoverUserIdentities.
    @Test func usersAndZones() async throws {
        try await ServerHarness.run { server in
            _ = try await server.ledger.container(ServerHarness.container, userRecordName: "_alice").save(
                RecordZone(zoneID: RecordZoneID(zoneName: "Lists")))
            let user = try await Self.replay(server, User.self, .GET, "private", "users/current", as: "_alice")
            #expect(user.userRecordName == "_alice")
            // The default zone is listed before any record is written there, with its owner as MistKit reads it.
            let zones = try await Self.replay(server, Zones.self, .GET, "private", "zones/list", as: "_alice").zones ?? []
            #expect(zones.map { $0.zoneID?.zoneName } == ["_defaultZone", "Lists"])
            #expect(zones.allSatisfy { $0.zoneID?.ownerName == "_alice" })
            let looked = try await Self.replay(
                server, Zones.self, .POST, "private", "zones/lookup", as: "_alice", #"{"zones":[{"zoneName":"_defaultZone"},{"zoneName":"Lists"}]}"#)
            #expect(looked.zones?.map { $0.zoneID?.zoneName } == ["_defaultZone", "Lists"])
            // users/discover: the identities found (Bob), none for an address no user has.
            let found = try await Self.replay(
                server, Identities.self, .POST, "private", "users/discover", as: "_alice",
                #"{"lookupInfos":[{"emailAddress":"bob@example.com"},{"emailAddress":"nobody@example.com"},{"userRecordName":"_alice"}]}"#)
            #expect(found.users?.map(\.userRecordName) == ["_bob", "_alice"])
            #expect(found.users?.first?.lookupInfo?.emailAddress == "bob@example.com")
        }
    }

    /// Bob, after accepting Alice's share of a zone: his shared database lists the zone with its
    /// owner, the only way a MistKit client learns whose zone it is.
    @Test func sharedDatabaseAfterAnAccept() async throws {
        try await ServerHarness.run { server in
            let alice = server.ledger.container(ServerHarness.container, userRecordName: "_alice")
            let zone = try await alice.save(RecordZone(zoneID: RecordZoneID(zoneName: "Lists"))).zoneID
            _ = try await alice.save(Record(recordType: "List", recordID: RecordID(recordName: "groceries", zoneID: zone)))
            let share = try await alice.share(recordZoneID: zone, title: "All lists", publicPermission: .none)
            _ = try await alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readWrite, to: share.url)
            let bob = server.ledger.container(ServerHarness.container, userRecordName: "_bob")
            _ = try await bob.accept(try await bob.shareMetadata(for: share.url))
            try await server.ledger.waitForResidualTasks(timeout: .seconds(120))

            let user = try await Self.replay(server, User.self, .GET, "shared", "users/current", as: "_bob")
            #expect(user.userRecordName == "_bob")
            let zones = try await Self.replay(server, Zones.self, .GET, "shared", "zones/list", as: "_bob").zones ?? []
            #expect(zones.map { $0.zoneID?.zoneName } == ["Lists"] && zones.first?.zoneID?.ownerName == "_alice")
            let looked = try await Self.replay(
                server, Zones.self, .POST, "shared", "zones/lookup", as: "_bob", #"{"zones":[{"ownerName":"_alice","zoneName":"Lists"}]}"#)
            #expect(looked.zones?.map { $0.zoneID?.ownerName } == ["_alice"])
        }
    }

    /// The keys read for MistKit's sake are checked like every other: a zoneID's `ownerName` that is
    /// not a string is refused even beside `ownerRecordName`, and so is any lookup info key of
    /// users/discover that is not a string (found by schemathesis).
    @Test func mistKitsKeysAreTypeChecked() async throws {
        try await ServerHarness.run { server in
            let zoneID: [String: Any] = ["zoneName": "Z", "ownerRecordName": "_alice", "ownerName": [:] as [String: Any]]
            let lookup = try await server.post("records/lookup", as: "_alice", ["zoneID": zoneID, "records": [["recordName": "r"]]])
            #expect(lookup.status == 400 && lookup.json["serverErrorCode"] as? String == "BAD_REQUEST", "\(lookup.text)")
            let zones = try await server.post("zones/lookup", as: "_alice", ["zones": [zoneID]])
            #expect(zones.status == 400, "\(zones.text)")
            let discover = try await server.post(
                "users/discover", as: "_alice",
                ["lookupInfos": [["emailAddress": "bob@example.com", "userRecordName": [:] as [String: Any]]]])
            #expect(discover.status == 400, "\(discover.text)")
        }
    }

    /// A server-to-server key as MistKit signs (bodiless GETs with an empty hash field; POSTs with the
    /// body's hash), and an API token alone: 421 with Apple's error dictionary and a redirect.
    @Test func serverToServerAndAPITokenOnly() async throws {
        try await ServerHarness.run { server in
            let (key, entry) = try server.aliceServerKey()
            for endpoint in ["users/current", "zones/list"] {
                let subpath = ClientCompatibilityTests.path("public", endpoint)
                let signed = try ClientCompatibilityTests.signed(key, keyID: entry.id, subpath: subpath, body: nil, emptyHashField: true)
                let reply = try await server.send(.GET, server.baseURL + subpath, headers: Self.headers(body: nil) + signed)
                #expect(reply.status == 200, "\(endpoint): \(reply.text)")
            }
            let body = #"{"query":{"recordType":"Notice"},"resultsLimit":200,"zoneID":{"zoneName":"_defaultZone"}}"#
            let anonymous = try await server.send(
                .POST,
                "\(server.baseURL)/database/1/\(ServerHarness.container)/development/public/records/query?ckAPIToken=\(server.apiToken)",
                body: Array(body.utf8), headers: Self.headers(body: body))
            #expect(anonymous.status == 421)
            let error = try JSONDecoder().decode(ErrorResponse.self, from: Data(anonymous.body))
            #expect(error.serverErrorCode == .AUTHENTICATION_REQUIRED && error.redirectURL != nil && error.uuid != nil)
        }
    }
}
