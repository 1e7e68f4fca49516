import AsyncHTTPClient
import Crypto
import Foundation
import NIOHTTP1
import ShareLedger
@testable import ShareLedgerServer
import TestSupport
import Testing

/// The report pages `serve` shows operators under `/reports`: an operator token opens them, every
/// other credential is refused, bad parameters get 400, and no email or phone appears unless asked.
@Suite("Server: operators' report pages")
struct OperatorPagesTests {
    /// A share of _alice's inviting _bob by email, accepted by _bob; returns its token (shortGUID).
    static func makeShare(_ server: ServerHarness) async throws -> String {
        let zone = try await server.post(
            "zones/modify", as: "_alice", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Notes"]]]]])
        #expect(zone.status == 200, "\(zone.text)")
        let record = try await server.modify("create", ["recordName": "Note-1", "recordType": "Note", "fields": [:]], in: "Notes", as: "_alice")
        #expect(record.status == 200, "\(record.text)")
        let shared = try await server.modify(
            "create",
            [
                "recordType": "cloudkit.share", "forRecord": ["recordName": "Note-1"], "publicPermission": "NONE",
                "participants": [
                    ["userIdentity": ["lookupInfo": ["emailAddress": "bob@example.com"]], "permission": "READ_WRITE", "type": "USER"]
                ],
            ], in: "Notes", as: "_alice")
        #expect(shared.status == 200, "\(shared.text)")
        let shortGUID = try #require((shared.json["records"] as? [[String: Any]])?.first?["shortGUID"] as? String)
        let accepted = try await server.post("records/accept", database: "public", as: "_bob", ["shortGUIDs": [["value": shortGUID]]])
        #expect(accepted.status == 200, "\(accepted.text)")
        return shortGUID
    }

    static func bearer(_ token: String) -> [(String, String)] { [("Authorization", "Bearer \(token)")] }

    static func escaped(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? text
    }

    @Test func operatorTokenOpensThePagesWithoutPersonalData() async throws {
        try await ServerHarness.run { server in
            let token = try await Self.makeShare(server)
            let issued = try server.credentials.createOperatorToken(name: "ops on call")
            #expect(issued.token.hasPrefix("slo_"))
            let auth = Self.bearer(issued.token)
            let base = server.baseURL
            let container = Self.escaped(ServerHarness.container)

            let index = try await server.send(.GET, "\(base)/reports", headers: auth)
            #expect(index.status == 200)
            #expect(index.text.components(separatedBy: "<form").count - 1 == 3)
            #expect(index.text.contains("action=\"/reports/share\"") && index.text.contains("action=\"/reports/user\""))

            let shareToken = try #require(ShareToken(token))
            let shareURL = try #require(ShareURL.make(host: server.ledger.configuration.shareURLHost, token: shareToken, title: "Notes"))
            let pages = [
                "\(base)/reports/share?url=\(token)",
                "\(base)/reports/share?url=\(Self.escaped(shareURL.absoluteString))",
                "\(base)/reports/user?name=_bob&container=\(container)",
                "\(base)/reports/access-review?container=\(container)&from=1",
            ]
            for url in pages {
                let page = try await server.send(.GET, url, headers: auth)
                #expect(page.status == 200, "\(url): \(page.text)")
                #expect(page.headers.contains { $0.0.lowercased() == "content-type" && $0.1.hasPrefix("text/html") })
                #expect(page.headers.contains { $0.0.lowercased() == "content-security-policy" })
                #expect(page.text.contains("_bob"), "\(url)")
                #expect(!page.text.contains("<script"))
                // No email or phone unless asked for.
                #expect(!page.text.contains("@example.com"), "\(url)")
            }
            let share = try await server.send(.GET, "\(base)/reports/share?url=\(token)", headers: auth)
            #expect(share.text.contains("_alice") && share.text.contains("<svg"))

            // Asked for explicitly: the share's page shows the participants' emails.
            let contact = try await server.send(.GET, "\(base)/reports/share?url=\(token)&contact=1", headers: auth)
            #expect(contact.status == 200)
            #expect(contact.text.contains("bob@example.com"))

            // The review as CSV, with a form's encoding (`+` for a space is not needed here, but the time is escaped).
            let csv = try await server.send(
                .GET, "\(base)/reports/access-review?container=\(container)&to=\(Self.escaped("2100-01-01T00:00:00Z"))&format=csv",
                headers: auth)
            #expect(csv.status == 200, "\(csv.text)")
            #expect(csv.headers.contains { $0.0.lowercased() == "content-type" && $0.1.hasPrefix("text/csv") })
            #expect(csv.text.contains("_bob") && !csv.text.contains("@example.com"))

            // The token as the password of HTTP Basic authentication (what a browser sends).
            let basic = Data("ops:\(issued.token)".utf8).base64EncodedString()
            let browser = try await server.send(.GET, "\(base)/reports/user?name=_bob&container=\(container)", headers: [("Authorization", "Basic \(basic)")])
            #expect(browser.status == 200)
            #expect(browser.text.contains("_bob"))
        }
    }

    @Test func everyOtherCredentialIsRefused() async throws {
        try await ServerHarness.run { server in
            _ = try await Self.makeShare(server)
            let key = try server.credentials.registerServerKey(
                container: ServerHarness.container, userRecordName: "_alice",
                publicKeyPEM: P256.Signing.PrivateKey().publicKey.pemRepresentation)
            let operatorToken = try server.credentials.createOperatorToken(name: "ops").token
            let revoked = try server.credentials.createOperatorToken(name: "former ops")
            try server.credentials.revoke(id: revoked.entry.id)
            let base = server.baseURL
            let container = Self.escaped(ServerHarness.container)
            let bobWeb = try #require(server.webTokens["_bob"])
            let cases: [(String, [(String, String)], String, Int)] = [
                ("none", [], "", 401),
                ("unknown bearer", Self.bearer("slo_" + String(repeating: "0", count: 64)), "", 401),
                ("revoked operator token", Self.bearer(revoked.token), "", 401),
                ("API token as bearer", Self.bearer(server.apiToken), "", 403),
                ("web auth token as bearer", Self.bearer(bobWeb), "", 403),
                ("CloudKit query tokens", [], "&ckAPIToken=\(server.apiToken)&ckWebAuthToken=\(bobWeb)", 403),
                ("server-to-server key", [("X-Apple-CloudKit-Request-KeyID", key.id)], "", 403),
            ]
            for path in ["/reports", "/reports/share?url=x", "/reports/user?name=_bob&container=\(container)",
                "/reports/access-review?container=\(container)"]
            {
                for (label, headers, query, status) in cases {
                    let url = base + path + (path.contains("?") ? query : query.isEmpty ? "" : "?" + query.dropFirst())
                    let reply = try await server.send(.GET, url, headers: headers)
                    #expect(reply.status == status, "\(label) on \(path): \(reply.status) \(reply.text)")
                    #expect(!reply.text.contains("_bob") && !reply.text.contains("_alice") && !reply.text.contains("<svg"), "\(label)")
                    if status == 401 {
                        #expect(reply.headers.contains { $0.0.lowercased() == "www-authenticate" && $0.1.hasPrefix("Basic") })
                    }
                }
            }
            // An operator token reaches nothing under /database/1/.
            let asAPI = try await server.send(
                .POST, "\(base)/database/1/\(ServerHarness.container)/development/private/zones/list?ckAPIToken=\(operatorToken)",
                body: Array("{}".utf8))
            #expect(asAPI.status == 401, "\(asAPI.text)")
        }
    }

    @Test func badParametersGetAClear400() async throws {
        try await ServerHarness.run { server in
            let token = try await Self.makeShare(server)
            let auth = Self.bearer(try server.credentials.createOperatorToken(name: "ops").token)
            let base = server.baseURL
            let container = Self.escaped(ServerHarness.container)
            let cases: [(String, String)] = [
                ("/reports/share", "url is required"),
                ("/reports/share?url=not%20a%20share", "url must be"),
                ("/reports/share?url=\(token)&from=yesterday", "from must be"),
                ("/reports/share?url=\(token)&contact=maybe", "contact must be"),
                ("/reports/share?url=\(Self.escaped(String(repeating: "x", count: 5_000)))", "longer than"),
                ("/reports/user?name=_bob", "container is required"),
                ("/reports/user?container=\(container)", "name is required"),
                ("/reports/access-review?container=\(container)&format=pdf", "format must be"),
                ("/reports/access-review?container=\(container)&to=18446744073709551616", "to must be"),
                ("/reports/access-review", "container is required"),
            ]
            for (path, message) in cases {
                let reply = try await server.send(.GET, base + path, headers: auth)
                #expect(reply.status == 400, "\(path): \(reply.status) \(reply.text)")
                #expect(reply.text.contains(message), "\(path): \(reply.text)")
            }
        }
    }
}
