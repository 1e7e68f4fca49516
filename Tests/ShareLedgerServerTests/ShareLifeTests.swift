import AsyncHTTPClient
import Foundation
import NIOHTTP1
import ShareLedger
import ShareLedgerAudit
import ShareLedgerServer
import TestSupport
import Testing

/// A share's whole life over HTTP, from a real client against the real server on loopback.
@Suite("Server: a share's life over HTTP")
struct ShareLifeTests {
    static let awkwardText = "a \"quoted\" \\ line\nand\ttab\u{01}\u{1F} é 🎉 </script>"

    /// Creates zone, record and share with an invitation as _alice; resolves and accepts as _bob;
    /// waits for the zone to appear in _bob's shared database; reads the shared record; then audits.
    @Test func shareLifeOverHTTP() async throws {
        try await ServerHarness.run { server in
            // The owner: a zone, a record, a share of it inviting _bob by email.
            let zone = try await server.post(
                "zones/modify", as: "_alice",
                ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Notes"]]]]])
            #expect(zone.status == 200)
            let record = try await server.modify(
                "create",
                [
                    "recordName": "Note-1", "recordType": "Note",
                    "fields": [
                        "title": ["value": "Groceries", "type": "STRING"], "count": ["value": 3],
                        "note": ["value": Self.awkwardText, "type": "STRING"], "ratio": ["value": 0.25],
                    ],
                ], in: "Notes", as: "_alice")
            #expect(record.status == 200, "\(record.text)")
            let saved = try #require((record.json["records"] as? [[String: Any]])?.first)
            #expect(saved["recordChangeTag"] is String)
            #expect(((saved["fields"] as? [String: Any])?["count"] as? [String: Any])?["type"] as? String == "INT64")
            // Quotes, backslashes, control characters and non-ASCII text come back as sent.
            #expect(((saved["fields"] as? [String: Any])?["note"] as? [String: Any])?["value"] as? String == Self.awkwardText)
            #expect(((saved["fields"] as? [String: Any])?["ratio"] as? [String: Any])?["value"] as? Double == 0.25)

            let shared = try await server.modify(
                "create",
                [
                    "recordType": "cloudkit.share", "forRecord": ["recordName": "Note-1"],
                    "fields": ["cloudkit.title": ["value": "Groceries", "type": "STRING"]], "publicPermission": "NONE",
                    "participants": [
                        ["userIdentity": ["lookupInfo": ["emailAddress": "bob@example.com"]], "permission": "READ_WRITE", "type": "USER"]
                    ],
                ], in: "Notes", as: "_alice")
            #expect(shared.status == 200, "\(shared.text)")
            let share = try #require((shared.json["records"] as? [[String: Any]])?.first)
            #expect(share["recordType"] as? String == "cloudkit.share")
            let shortGUID = try #require(share["shortGUID"] as? String)
            #expect((share["participants"] as? [[String: Any]])?.count == 2)

            // The participant: resolve (with the root record), accept.
            let resolved = try await server.post(
                "records/resolve", database: "public", as: "_bob",
                ["shortGUIDs": [["value": shortGUID, "shouldFetchRootRecord": true, "rootRecordDesiredKeys": ["title"]]]])
            #expect(resolved.status == 200, "\(resolved.text)")
            let result = try #require((resolved.json["results"] as? [[String: Any]])?.first)
            #expect(result["participantStatus"] as? String == "INVITED")
            #expect(result["participantPermission"] as? String == "READ_WRITE")
            #expect(result["databaseScope"] as? String == "SHARED")
            #expect(result["rootRecordName"] as? String == "Note-1")
            let rootFields = (result["rootRecord"] as? [String: Any])?["fields"] as? [String: Any]
            #expect(rootFields?.keys.sorted() == ["title"])
            #expect((result["ownerIdentity"] as? [String: Any])?["userRecordName"] as? String == "_alice")

            let accepted = try await server.post(
                "records/accept", database: "public", as: "_bob", ["shortGUIDs": [["value": shortGUID]]])
            #expect(accepted.status == 200, "\(accepted.text)")
            #expect((accepted.json["results"] as? [[String: Any]])?.first?["participantStatus"] as? String == "ACCEPTED")

            // The zone appears in _bob's shared database once the worker has run the residual task.
            try await server.ledger.waitForResidualTasks(timeout: .seconds(120))
            let zones = try await server.post("zones/list", database: "shared", as: "_bob", [:])
            #expect(zones.status == 200)
            let zoneIDs = (zones.json["zones"] as? [[String: Any]])?.compactMap { $0["zoneID"] as? [String: Any] } ?? []
            #expect(zoneIDs.contains { $0["zoneName"] as? String == "Notes" && $0["ownerRecordName"] as? String == "_alice" })

            // The shared record, and the share record, read from the shared database.
            let lookup = try await server.post(
                "records/lookup", database: "shared", as: "_bob",
                [
                    "zoneID": ["zoneName": "Notes", "ownerRecordName": "_alice"],
                    "records": [
                        ["recordName": "Note-1"], ["recordName": share["recordName"] as? String ?? ""], ["recordName": "Nope"],
                    ],
                ])
            #expect(lookup.status == 200, "\(lookup.text)")
            let found = lookup.json["records"] as? [[String: Any]] ?? []
            #expect(found.count == 3)
            #expect(found.first?["recordType"] as? String == "Note")
            #expect(found.dropFirst().first?["recordType"] as? String == "cloudkit.share")
            #expect(found.last?["serverErrorCode"] as? String == "NOT_FOUND")

            // Users.
            let caller = try await server.send(.GET, server.url("users/caller", database: "public", as: "_bob"))
            #expect((caller.json["users"] as? [[String: Any]])?.first?["userRecordName"] as? String == "_bob")
            let lookedUp = try await server.post(
                "users/lookup/email", database: "public", as: "_bob",
                ["users": [["emailAddress": "ALICE@example.com"], ["emailAddress": "nobody@example.com"]]])
            let users = lookedUp.json["users"] as? [[String: Any]] ?? []
            #expect(users.first?["userRecordName"] as? String == "_alice")
            #expect(users.last?["serverErrorCode"] as? String == "NOT_FOUND")

            // The ledger holds what the clients did, and audits clean.
            let stats = try server.ledger.statistics()
            #expect(stats.shares == 1 && stats.acceptedParticipants >= 1)
            let report = try LedgerAudit(server.ledger).audit(scratchPath: server.directory.child("audit-scratch"))
            #expect(report.ok, "\(report.problems)")
            // Its history is what the clients did, in order, each event by the acting user.
            let events = try server.ledger.log.events(after: LogPosition(rawValue: 0), limit: 1_000)
            let story = events.map { ($0.actor, $0.eventType.split(separator: ".").last.map(String.init) ?? "") }
            let expected = [
                ("_alice", "ZoneCreated"), ("_alice", "RecordSaved"), ("_alice", "ShareCreated"), ("_alice", "ParticipantAdded"),
                ("_bob", "ShareMetadataFetched"), ("_bob", "ShareAccepted"),
            ]
            var remaining = expected[...]
            for (actor, type) in story where remaining.first.map({ $0 == (actor, type) }) ?? false {
                remaining = remaining.dropFirst()
            }
            #expect(remaining.isEmpty, "\(story.map { "\($0.0) \($0.1)" })")

            // No token and no email address in any log line.
            let lines = server.logLines.all
            #expect(!lines.isEmpty)
            for line in lines {
                #expect(!line.contains(server.apiToken) && !server.webTokens.values.contains { line.contains($0) })
                #expect(!line.contains("@example.com"))
            }
            #expect(lines.contains { $0.contains("hb.request.id") && $0.contains("endpoint=records/accept") })
        }
    }
}
