import Crypto
import Foundation
import NIOHTTP1
import ShareLedger
@testable import ShareLedgerServer
import TestSupport
import Testing

/// What real CloudKit Web Services clients need of the server: Apple's credential formats, a
/// server-to-server path that refuses replays and keeps keys to their environment and database,
/// the calls such clients make, and fields sent without a type.
@Suite("Server: what real clients need")
struct ClientCompatibilityTests {
    typealias JSON = [String: Any]

    static func isHex64(_ text: String) -> Bool {
        text.utf8.count == 64 && text.allSatisfy { $0.isHexDigit && !$0.isUppercase }
    }

    @Test func apiTokensAndKeyIDsAreInApplesFormAndOldTokensStillWork() async throws {
        try await ServerHarness.run { server in
            #expect(Self.isHex64(server.apiToken), "\(server.apiToken)")
            let key = try server.credentials.registerServerKey(
                container: ServerHarness.container, userRecordName: "_alice",
                publicKeyPEM: P256.Signing.PrivateKey().publicKey.pemRepresentation)
            #expect(Self.isHex64(key.id), "\(key.id)")
            // A token of the earlier form (`sla_` and 64 hex digits), as its file entry stands.
            let old = "sla_" + String(repeating: "ab", count: 32)
            let url = URL(fileURLWithPath: server.credentials.path)
            var file = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? JSON)
            var entries = file["credentials"] as? [JSON] ?? []
            entries.append([
                "id": "0123456789abcdef", "kind": "apiToken", "container": ServerHarness.container,
                "tokenSHA256": ServerCredentials.sha256Hex(old), "createdAt": "2026-11-01T00:00:00Z",
            ])
            file["credentials"] = entries
            try JSONSerialization.data(withJSONObject: file).write(to: url)
            server.credentials.refresh(force: true)
            let token = try #require(server.webTokens["_bob"])
            let reply = try await server.send(
                .GET,
                "\(server.baseURL)/database/1/\(ServerHarness.container)/development/public/users/caller?ckAPIToken=\(old)&ckWebAuthToken=\(token)")
            #expect(reply.status == 200, "\(reply.text)")
        }
    }

    /// Signs `subpath` (and `body`) as a server-to-server caller does.
    static func signed(
        _ key: P256.Signing.PrivateKey, keyID: String, subpath: String, body: [UInt8]?, emptyHashField: Bool = false,
        date: Date = Date()
    ) throws -> [(String, String)] {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        let dateText = formatter.string(from: date)
        let hash = emptyHashField ? "" : Data(SHA256.hash(data: body ?? [])).base64EncodedString()
        let signature = try key.signature(for: Array("\(dateText):\(hash):\(subpath)".utf8))
        return [
            ("X-Apple-CloudKit-Request-KeyID", keyID), ("X-Apple-CloudKit-Request-ISO8601Date", dateText),
            ("X-Apple-CloudKit-Request-SignatureV1", signature.derRepresentation.base64EncodedString()),
        ]
    }

    static func path(_ database: String, _ endpoint: String, environment: String = "development") -> String {
        "/database/1/\(ServerHarness.container)/\(environment)/\(database)/\(endpoint)"
    }

    @Test func aSignedRequestIsAcceptedOnce() async throws {
        try await ServerHarness.run { server in
            let (key, entry) = try server.aliceServerKey(allowingPrivateDatabases: true)
            _ = try await server.post("zones/modify", as: "_alice", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Z"]]]]])
            let subpath = Self.path("private", "records/modify")
            let body = Array(
                #"{"operations":[{"operationType":"forceReplace","record":{"recordName":"r","recordType":"T","zoneID":{"zoneName":"Z"}}}]}"#
                    .utf8)
            let headers = try Self.signed(key, keyID: entry.id, subpath: subpath, body: body)
            let first = try await server.send(.POST, server.baseURL + subpath, body: body, headers: headers)
            #expect(first.status == 200, "\(first.text)")
            let head = try server.ledger.log.head().position.rawValue
            let replayed = try await server.send(.POST, server.baseURL + subpath, body: body, headers: headers)
            #expect(replayed.status == 401 && replayed.json["serverErrorCode"] as? String == "AUTHENTICATION_FAILED", "\(replayed.text)")
            // The same signature in its raw form is the same signature.
            let der = try #require(Data(base64Encoded: headers[2].1))
            let raw = try P256.Signing.ECDSASignature(derRepresentation: der).rawRepresentation.base64EncodedString()
            let reencoded = try await server.send(
                .POST, server.baseURL + subpath, body: body, headers: [headers[0], headers[1], (headers[2].0, raw)])
            #expect(reencoded.status == 401, "\(reencoded.text)")
            #expect(try server.ledger.log.head().position.rawValue == head)
        }
    }

    @Test func replayMemoryIsBoundedAndForgetsExpiredSignatures() {
        let guardian = SignatureReplayGuard(capacity: 2)
        let now = Date(timeIntervalSince1970: 1_000)
        #expect(guardian.admit("a", expiry: now.addingTimeInterval(10), now: now) == .fresh)
        #expect(guardian.admit("a", expiry: now.addingTimeInterval(10), now: now) == .replayed)
        #expect(guardian.admit("b", expiry: now.addingTimeInterval(20), now: now) == .fresh)
        #expect(guardian.admit("c", expiry: now.addingTimeInterval(20), now: now) == .full)
        let later = now.addingTimeInterval(11)
        #expect(guardian.admit("c", expiry: later.addingTimeInterval(20), now: later) == .fresh)
        #expect(guardian.count == 2)
    }

    @Test func serverKeysKeepToTheirEnvironmentAndByDefaultToThePublicDatabase() async throws {
        try await ServerHarness.run { server in
            let (key, entry) = try server.aliceServerKey()
            func call(_ database: String, environment: String = "development") async throws -> ServerHarness.Reply {
                let subpath = Self.path(database, "zones/list", environment: environment)
                return try await server.send(
                    .POST, server.baseURL + subpath, body: Array("{}".utf8),
                    headers: try Self.signed(key, keyID: entry.id, subpath: subpath, body: Array("{}".utf8)))
            }
            #expect(try await call("public").status == 200)
            let privateDB = try await call("private")
            #expect(privateDB.status == 403 && privateDB.json["serverErrorCode"] as? String == "ACCESS_DENIED", "\(privateDB.text)")
            #expect(try await call("shared").status == 403)
            let production = try await call("public", environment: "production")
            #expect(production.status == 401, "\(production.text)")
        }
    }

    @Test func aSignedGETWithAnEmptyBodyHashFieldIsAccepted() async throws {
        try await ServerHarness.run { server in
            let (key, entry) = try server.aliceServerKey()
            let subpath = Self.path("public", "users/caller")
            for emptyField in [true, false] {
                let reply = try await server.send(
                    .GET, server.baseURL + subpath,
                    headers: try Self.signed(key, keyID: entry.id, subpath: subpath, body: nil, emptyHashField: emptyField))
                #expect(reply.status == 200, "empty field \(emptyField): \(reply.text)")
            }
        }
    }

    @Test func fieldsWithoutATypeKeepTheFieldsTypeOrTheirOwn() async throws {
        try await ServerHarness.run { server in
            try await AtomicModifyTests.makeZones(server, ["Z"])
            func modify(_ type: String, _ fields: JSON, tag: String? = nil) async throws -> JSON {
                var record: JSON = ["recordName": "r", "recordType": "T", "zoneID": ["zoneName": "Z"], "fields": fields]
                if let tag { record["recordChangeTag"] = tag }
                let reply = try await server.post("records/modify", as: "_alice", ["operations": [["operationType": type, "record": record]]])
                return try #require((reply.json["records"] as? [JSON])?.first, "\(reply.text)")
            }
            func type(_ record: JSON, _ key: String) -> String? { ((record["fields"] as? JSON)?[key] as? JSON)?["type"] as? String }
            let created = try await modify(
                "create",
                [
                    "when": ["value": 1_700_000_000_000, "type": "TIMESTAMP"], "tags": ["value": ["a", "b"]],
                    "counts": ["value": [1, 2]], "ref": ["value": ["recordName": "other", "zoneID": ["zoneName": "Z"]]],
                ])
            #expect(type(created, "tags") == "STRING_LIST" && type(created, "counts") == "INT64_LIST", "\(created)")
            #expect(type(created, "ref") == "REFERENCE", "\(created)")
            // An untyped value of an existing field keeps the field's type: a date stays a date.
            let updated = try await modify("forceUpdate", ["when": ["value": 1_800_000_000_000]])
            #expect(type(updated, "when") == "TIMESTAMP", "\(updated)")
        }
    }

    @Test func theCallsClientsMake() async throws {
        try await ServerHarness.run { server in
            try await AtomicModifyTests.makeZones(server, ["Z"])
            let current = try await server.send(.GET, server.url("users/current", database: "public", as: "_bob"))
            #expect(current.status == 200 && current.json["userRecordName"] as? String == "_bob", "\(current.text)")
            let zones = try await server.post(
                "zones/lookup", as: "_alice", ["zones": [["zoneID": ["zoneName": "Z"]], ["zoneName": "Missing"]]])
            let found = zones.json["zones"] as? [JSON] ?? []
            #expect(found.count == 2, "\(zones.text)")
            #expect((found.first?["zoneID"] as? JSON)?["ownerRecordName"] as? String == "_alice", "\(zones.text)")
            #expect(found.last?["serverErrorCode"] as? String == "ZONE_NOT_FOUND", "\(zones.text)")
            // MistKit names a zone's owner `ownerName`: Bob asks in Alice's zone (not his own, which
            // does not exist), and learns nothing of it.
            let lookup = try await server.post(
                "records/lookup", database: "shared", as: "_bob",
                ["zoneID": ["zoneName": "Z", "ownerName": "_alice"], "records": [["recordName": "none"]]])
            #expect((lookup.json["records"] as? [JSON])?.first?["serverErrorCode"] as? String == "NOT_FOUND", "\(lookup.text)")
        }
    }
}
