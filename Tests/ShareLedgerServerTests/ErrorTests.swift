import AsyncHTTPClient
import Crypto
import Foundation
import NIOHTTP1
import ShareLedger
import ShareLedgerServer
import TestSupport
import Testing

/// Whole-request and per-item errors, credentials in every form, and the operations endpoints.
@Suite("Server: errors, credentials and operations")
struct ErrorTests {
    /// Each bad request gets CloudKit's error dictionary with the right HTTP status, and changes nothing.
    @Test func badRequestsChangeNothing() async throws {
        try await ServerHarness.run { server in
            let head = try server.ledger.log.head()
            let base = "\(server.baseURL)/database/1/\(ServerHarness.container)/development/public"
            let body = Array(#"{"shortGUIDs":[]}"#.utf8)

            // No credentials at all: AUTHENTICATION_REQUIRED (421) with where to sign in.
            let none = try await server.send(.POST, "\(base)/records/resolve", body: body)
            #expect(none.status == 421)
            #expect(none.json["serverErrorCode"] as? String == "AUTHENTICATION_REQUIRED")
            #expect(none.json["redirectURL"] is String && none.json["uuid"] is String)

            // An API token but no user.
            let noUser = try await server.send(.POST, "\(base)/records/resolve?ckAPIToken=\(server.apiToken)", body: body)
            #expect(noUser.status == 421)

            // A wrong API token, a wrong web auth token.
            let badAPI = try await server.send(.POST, "\(base)/records/resolve?ckAPIToken=nope&ckWebAuthToken=nope", body: body)
            #expect(badAPI.status == 401)
            #expect(badAPI.json["serverErrorCode"] as? String == "AUTHENTICATION_FAILED")
            let badWeb = try await server.send(
                .POST, "\(base)/records/resolve?ckAPIToken=\(server.apiToken)&ckWebAuthToken=slw_00", body: body)
            #expect(badWeb.status == 401)

            // Malformed JSON, a wrong type, a body that is not an object.
            for bad in ["{", #"{"shortGUIDs":"x"}"#, "[1,2]", #"{"shortGUIDs":[{"value":7}]}"#, #"{}"#] {
                let reply = try await server.send(
                    .POST, server.url("records/resolve", database: "public", as: "_bob"), body: Array(bad.utf8))
                #expect(reply.status == 400, "\(bad)")
                #expect(reply.json["serverErrorCode"] as? String == "BAD_REQUEST")
            }

            // Too many items; a body over the limit (64 KiB here).
            let many = try await server.post(
                "records/resolve", database: "public", as: "_bob", ["shortGUIDs": Array(repeating: ["value": "x"], count: 401)])
            #expect(many.status == 400)
            let huge = try await server.send(
                .POST, server.url("records/resolve", database: "public", as: "_bob"),
                body: Array(repeating: UInt8(ascii: " "), count: 200_000))
            #expect(huge.status == 413)

            // An unknown container, environment, database or endpoint; a wrong method.
            let unknown = try await server.send(
                .POST, server.url("records/resolve", as: "_bob", container: "iCloud.unknown"), body: body)
            #expect(unknown.status == 404)
            #expect(unknown.json["serverErrorCode"] as? String == "NOT_FOUND")
            let environment = try await server.send(
                .POST, "\(server.baseURL)/database/1/\(ServerHarness.container)/staging/public/records/resolve", body: body)
            #expect(environment.status == 404)
            let endpoint = try await server.send(.POST, server.url("records/nothing", as: "_bob"), body: body)
            #expect(endpoint.status == 404)
            let method = try await server.send(.GET, server.url("records/resolve", as: "_bob"))
            #expect(method.status == 405)

            // An atomic batch whose operations all fail (the zone does not exist) changes nothing.
            let atomic = try await server.post(
                "records/modify", as: "_alice",
                [
                    "atomic": true, "zoneID": ["zoneName": "Z"],
                    "operations": [
                        ["operationType": "create", "record": ["recordName": "a", "recordType": "T"]],
                        ["operationType": "create", "record": ["recordName": "b", "recordType": "T"]],
                    ],
                ])
            #expect(atomic.status == 200)
            let atomicResults = atomic.json["records"] as? [[String: Any]] ?? []
            #expect(atomicResults.count == 2 && atomicResults.allSatisfy { $0["serverErrorCode"] as? String == "ZONE_NOT_FOUND" })

            #expect(try server.ledger.log.head() == head)

            // Per-item errors in a 200: an unknown shortGUID (that fetch is logged, as in-process), a missing zone.
            let unknownGUID = try await server.post(
                "records/resolve", database: "public", as: "_bob",
                ["shortGUIDs": [["value": "0abcdefghijklmnopqrstuvwxy"], ["value": "not a token"]]])
            #expect(unknownGUID.status == 200)
            let results = unknownGUID.json["results"] as? [[String: Any]] ?? []
            #expect(results.count == 2 && results.allSatisfy { $0["serverErrorCode"] as? String == "NOT_FOUND" })
            let missingZone = try await server.post(
                "records/modify", as: "_alice",
                [
                    "zoneID": ["zoneName": "Missing"],
                    "operations": [["operationType": "create", "record": ["recordName": "a", "recordType": "T"]]],
                ])
            #expect(missingZone.status == 200)
            #expect((missingZone.json["records"] as? [[String: Any]])?.first?["serverErrorCode"] as? String == "ZONE_NOT_FOUND")

            // A revoked token stops working at once.
            try server.credentials.revoke(id: try #require(server.webTokenIDs["_bob"]))
            let revoked = try await server.send(.GET, server.url("users/caller", database: "public", as: "_bob"))
            #expect(revoked.status == 401)
        }
    }

    /// Server-to-server keys: a good signature acts as the key's user; a bad one, an old date or an
    /// unknown key id is refused.
    @Test func serverToServerSignatures() async throws {
        try await ServerHarness.run { server in
            let (key, entry) = try server.aliceServerKey()
            let subpath = "/database/1/\(ServerHarness.container)/development/public/users/caller"
            let body = Array("{}".utf8)
            func headers(
                date: Date, keyID: String = entry.id, signWith signer: P256.Signing.PrivateKey = key
            ) throws -> [(String, String)] {
                let formatter = ISO8601DateFormatter()
                formatter.formatOptions = [.withInternetDateTime]
                let dateText = formatter.string(from: date)
                let bodyHash = Data(SHA256.hash(data: body)).base64EncodedString()
                let signature = try signer.signature(for: Array("\(dateText):\(bodyHash):\(subpath)".utf8))
                return [
                    ("X-Apple-CloudKit-Request-KeyID", keyID), ("X-Apple-CloudKit-Request-ISO8601Date", dateText),
                    ("X-Apple-CloudKit-Request-SignatureV1", signature.derRepresentation.base64EncodedString()),
                ]
            }
            let good = try await server.send(.POST, server.baseURL + subpath, body: body, headers: try headers(date: Date()))
            #expect(good.status == 200, "\(good.text)")
            #expect((good.json["users"] as? [[String: Any]])?.first?["userRecordName"] as? String == "_alice")

            let old = try await server.send(
                .POST, server.baseURL + subpath, body: body, headers: try headers(date: Date().addingTimeInterval(-3600)))
            #expect(old.status == 401)
            let wrongKey = try await server.send(
                .POST, server.baseURL + subpath, body: body,
                headers: try headers(date: Date(), signWith: P256.Signing.PrivateKey()))
            #expect(wrongKey.status == 401)
            #expect(wrongKey.json["serverErrorCode"] as? String == "AUTHENTICATION_FAILED")
            let unknownKey = try await server.send(
                .POST, server.baseURL + subpath, body: body, headers: try headers(date: Date(), keyID: "nope"))
            #expect(unknownKey.status == 401)
            // The signature covers the body: another body does not verify.
            let otherBody = try await server.send(
                .POST, server.baseURL + subpath, body: Array(#"{"x":1}"#.utf8), headers: try headers(date: Date()))
            #expect(otherBody.status == 401)
        }
    }

    /// A log handler that keeps no metadata loses Hummingbird's request id: answers still carry one.
    @Test func logsOffStillAnswers() async throws {
        try await ServerHarness.run(keepingLogs: false) { server in
            let bad = try await server.send(
                .POST, server.url("records/resolve", database: "public", as: "_bob"), body: Array("{".utf8))
            #expect(bad.status == 400 && (bad.json["uuid"] as? String).flatMap(UUID.init(uuidString:)) != nil)
            let good = try await server.send(.GET, server.url("users/caller", database: "public", as: "_bob"))
            #expect(good.status == 200)
        }
    }

    /// The value of the Prometheus sample `name` (with its labels, as written) in a /metrics page.
    static func sample(_ name: String, in page: String) -> Double? {
        page.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
    }

    /// /metrics shows the writer's queue depth and its group commits' sizes: three commands held
    /// behind a paused writer are one queue of three, then one commit of three (bucket `le="4"`).
    @Test func groupCommitMetrics() async throws {
        try await ServerHarness.run { server in
            func page() async throws -> String { try await server.send(.GET, server.baseURL + "/metrics").text }
            let histogram = "shareledger_ledger_group_commit_commands"
            let before = try await page()
            let threeOrFour = { (page: String) -> Double in
                (Self.sample("\(histogram)_bucket{le=\"4\"}", in: page) ?? 0) - (Self.sample("\(histogram)_bucket{le=\"2\"}", in: page) ?? 0)
            }
            #expect(Self.sample("\(histogram)_count", in: before) ?? 0 >= 2)  // the harness's two users

            server.ledger.log.setWriterPaused(true)
            let ledger = server.ledger
            let users = Task {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for name in ["_c1", "_c2", "_c3"] {
                        group.addTask { try await ledger.registerUser(name, in: ServerHarness.container) }
                    }
                    try await group.waitForAll()
                }
            }
            while server.ledger.writerQueueDepth < 3 { await Task.yield() }
            let held = try await page()
            #expect(Self.sample("shareledger_ledger_writer_queue_depth", in: held) ?? 0 >= 3, "\(held)")
            server.ledger.log.setWriterPaused(false)
            try await users.value

            let after = try await page()
            #expect(threeOrFour(after) >= threeOrFour(before) + 1, "\(after)")
            #expect((Self.sample("\(histogram)_sum", in: after) ?? 0) >= (Self.sample("\(histogram)_sum", in: before) ?? 0) + 3)
            #expect(after.contains("# TYPE \(histogram) histogram") && after.contains("\(histogram)_bucket{le=\"+Inf\"}"))
        }
    }

    /// /healthz, /readyz, /metrics and /openapi.yaml (which is docs/openapi.yaml).
    @Test func operationsEndpoints() async throws {
        try await ServerHarness.run { server in
            #expect(try await server.send(.GET, server.baseURL + "/healthz").status == 200)
            #expect(try await server.send(.GET, server.baseURL + "/readyz").status == 200)
            let metrics = try await server.send(.GET, server.baseURL + "/metrics")
            #expect(metrics.status == 200)
            #expect(
                metrics.text.contains("shareledger_ledger_events")
                    && metrics.text.contains("shareledger_ledger_residual_task_lag_seconds")
                    && metrics.text.contains("shareledger_ledger_writer_queue_depth 0"))
            let spec = try await server.send(.GET, server.baseURL + "/openapi.yaml")
            #expect(spec.status == 200)
            let committed = try String(contentsOf: packageRoot.appendingPathComponent("docs/openapi.yaml"), encoding: .utf8)
            #expect(
                spec.text.trimmingCharacters(in: .whitespacesAndNewlines)
                    == committed.trimmingCharacters(in: .whitespacesAndNewlines),
                "docs/openapi.yaml changed: run scripts/embed-openapi")
        }
    }
}
