import Foundation
import NIOHTTP1
import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// A zone-wide share (`cloudkit.zoneshare`) over records/modify: created with an invitation,
/// resolved, updated (title, public permission, participants) and deleted, each as CloudKit's
/// record dictionaries.
@Suite("Server: zone shares and share updates")
struct ZoneShareTests {
    static func share(_ reply: ServerHarness.Reply) -> [String: Any]? {
        (reply.json["records"] as? [[String: Any]])?.first
    }

    @Test func zoneShareLife() async throws {
        try await ServerHarness.run { server in
            _ = try await server.post(
                "zones/modify", as: "_alice",
                ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Team"]]]]])
            let invitation: [String: Any] = [
                "userIdentity": ["lookupInfo": ["emailAddress": "bob@example.com"]], "permission": "READ_ONLY", "type": "USER",
            ]
            let created = try await server.modify(
                "create",
                [
                    "recordName": "cloudkit.zoneshare", "recordType": "cloudkit.share",
                    "fields": ["cloudkit.title": ["value": "Team", "type": "STRING"]], "participants": [invitation],
                ], in: "Team", as: "_alice")
            let share = try #require(Self.share(created), "\(created.text)")
            #expect(share["recordName"] as? String == "cloudkit.zoneshare")
            #expect(share["share"] == nil)  // no root record: the whole zone is shared
            let guid = try #require(share["shortGUID"] as? String)

            let resolved = try await server.post(
                "records/resolve", database: "public", as: "_bob",
                ["shortGUIDs": [["value": guid, "shouldFetchRootRecord": true]]])
            let result = try #require((resolved.json["results"] as? [[String: Any]])?.first)
            #expect(result["participantStatus"] as? String == "INVITED")
            #expect(result["rootRecordName"] == nil && result["rootRecord"] == nil)
            #expect((result["zoneID"] as? [String: Any])?["zoneName"] as? String == "Team")

            // Update: a new title, a public permission, Bob's permission raised; a stale tag is a CONFLICT.
            let tag = try #require(share["recordChangeTag"] as? String)
            func update(_ changes: [String: Any], tag: String) async throws -> ServerHarness.Reply {
                var record: [String: Any] = [
                    "recordName": "cloudkit.zoneshare", "recordType": "cloudkit.share", "recordChangeTag": tag,
                ]
                record.merge(changes) { _, new in new }
                return try await server.modify("update", record, in: "Team", as: "_alice")
            }
            let raised = try await update(
                [
                    "fields": ["cloudkit.title": ["value": "Team notes", "type": "STRING"]],
                    "participants": [
                        [
                            "userIdentity": ["lookupInfo": ["emailAddress": "bob@example.com"]], "permission": "READ_WRITE",
                            "type": "USER",
                        ]
                    ],
                ], tag: tag)
            let updated = try #require(Self.share(raised), "\(raised.text)")
            #expect(
                ((updated["fields"] as? [String: Any])?["cloudkit.title"] as? [String: Any])?["value"] as? String == "Team notes")
            let bob = (updated["participants"] as? [[String: Any]])?.first { $0["type"] as? String == "USER" }
            #expect(bob?["permission"] as? String == "READ_WRITE")
            let stale = try await update(["publicPermission": "READ_ONLY"], tag: tag)
            #expect(Self.share(stale)?["serverErrorCode"] as? String == "CONFLICT")

            // Removing Bob from the list removes him.
            let newTag = try #require(updated["recordChangeTag"] as? String)
            let removed = try await update(["participants": []], tag: newTag)
            let afterRemoval = try #require(Self.share(removed), "\(removed.text)")
            let statuses = (afterRemoval["participants"] as? [[String: Any]])?.filter { $0["type"] as? String == "USER" }
                .map { $0["acceptanceStatus"] as? String }
            #expect(statuses?.allSatisfy { $0 == "REMOVED" } ?? true)

            // Delete the share; resolving it then is a per-item NOT_FOUND.
            let deleted = try await server.modify(
                "forceDelete", ["recordName": "cloudkit.zoneshare", "recordType": "cloudkit.share"], in: "Team", as: "_alice")
            #expect(Self.share(deleted)?["deleted"] as? Bool == true, "\(deleted.text)")
            let gone = try await server.post("records/resolve", database: "public", as: "_bob", ["shortGUIDs": [["value": guid]]])
            #expect((gone.json["results"] as? [[String: Any]])?.first?["serverErrorCode"] as? String == "NOT_FOUND")

            let report = try LedgerAudit(server.ledger).audit(scratchPath: server.directory.child("audit-scratch"))
            #expect(report.ok, "\(report.problems)")
        }
    }
}
