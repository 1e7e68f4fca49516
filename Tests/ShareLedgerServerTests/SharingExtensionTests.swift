import Foundation
import NIOHTTP1
import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// The newer sharing features over HTTP (extensions of CloudKit Web Services): access requests,
/// blocked identities, one-time URL participants, participant lookup by email, phone and id.
@Suite("Server: access requests, one-time URLs, participant lookup")
struct SharingExtensionTests {
    typealias JSON = [String: Any]

    /// Alice's zone Z with a record `root` shared (no participants); its shortGUID.
    static func share(_ server: ServerHarness) async throws -> String {
        let alice = server.ledger.container(ServerHarness.container, userRecordName: "_alice")
        let zone = RecordZoneID(zoneName: "Z")
        _ = try await alice.save(RecordZone(zoneID: zone))
        _ = try await alice.save(Record(recordType: "Note", recordID: RecordID(recordName: "root", zoneID: zone)))
        return try await alice.share(rootRecord: RecordID(recordName: "root", zoneID: zone)).token.text
    }

    static func users(_ share: JSON?, _ key: String) -> [String] {
        (share?[key] as? [JSON] ?? []).compactMap { ($0["userIdentity"] as? JSON)?["userRecordName"] as? String }
    }

    static func participant(_ share: JSON?, _ user: String) -> JSON? {
        (share?["participants"] as? [JSON] ?? []).first { ($0["userIdentity"] as? JSON)?["userRecordName"] as? String == user }
    }

    @Test func accessRequestsFromAskingToApprovalDenialAndBlocking() async throws {
        try await ServerHarness.run { server in
            let shortGUID = try await Self.share(server)
            let ask: JSON = ["shortGUIDs": [["value": shortGUID]]]
            // Off by default: the share answers as unknown.
            let refused = try await server.post("shares/accessRequests/request", database: "public", as: "_bob", ask)
            #expect(refused.status == 200, "\(refused.text)")
            #expect((refused.json["results"] as? [JSON])?.first?["serverErrorCode"] as? String == "NOT_FOUND", "\(refused.text)")

            let allowed = try await server.post(
                "shares/accessRequests/allow", as: "_alice", ["shortGUID": shortGUID, "allowsAccessRequests": true])
            #expect(allowed.status == 200 && (allowed.json["share"] as? JSON)?["allowsAccessRequests"] as? Bool == true, "\(allowed.text)")
            // Only the owner (or an administrator) manages the share.
            let notOwner = try await server.post(
                "shares/accessRequests/allow", as: "_bob", ["shortGUID": shortGUID, "allowsAccessRequests": false])
            #expect(notOwner.status >= 400, "\(notOwner.text)")

            let asked = try await server.post("shares/accessRequests/request", database: "public", as: "_bob", ask)
            #expect((asked.json["results"] as? [JSON])?.first?["requested"] as? Bool == true, "\(asked.text)")
            let bob: JSON = ["shortGUID": shortGUID, "users": [["userRecordName": "_bob"]]]
            let denied = try await server.post("shares/accessRequests/deny", as: "_alice", bob)
            #expect(denied.status == 200 && Self.users(denied.json["share"] as? JSON, "requesters").isEmpty, "\(denied.text)")

            _ = try await server.post("shares/accessRequests/request", database: "public", as: "_bob", ask)
            var approvedRequest = bob
            approvedRequest["permission"] = "READ_WRITE"
            let approved = try await server.post("shares/accessRequests/approve", as: "_alice", approvedRequest)
            let entry = Self.participant(approved.json["share"] as? JSON, "_bob")
            #expect(entry?["acceptanceStatus"] as? String == "INVITED" && entry?["permission"] as? String == "READ_WRITE", "\(approved.text)")

            // Blocking removes the participant and hides the share; unblocking lifts it.
            let blocked = try await server.post("shares/identities/block", as: "_alice", bob)
            #expect(Self.users(blocked.json["share"] as? JSON, "blockedIdentities") == ["_bob"], "\(blocked.text)")
            #expect(Self.participant(blocked.json["share"] as? JSON, "_bob")?["acceptanceStatus"] as? String != "INVITED")
            let whileBlocked = try await server.post("shares/accessRequests/request", database: "public", as: "_bob", ask)
            #expect((whileBlocked.json["results"] as? [JSON])?.first?["serverErrorCode"] as? String == "NOT_FOUND")
            let unblocked = try await server.post("shares/identities/unblock", as: "_alice", bob)
            #expect(unblocked.status == 200 && Self.users(unblocked.json["share"] as? JSON, "blockedIdentities").isEmpty, "\(unblocked.text)")
            let again = try await server.post("shares/accessRequests/request", database: "public", as: "_bob", ask)
            #expect((again.json["results"] as? [JSON])?.first?["requested"] as? Bool == true, "\(again.text)")

            // A share no one has: NOT_FOUND for the whole request.
            let unknown = try await server.post(
                "shares/identities/unblock", as: "_alice", ["shortGUID": "nope", "users": [["userRecordName": "_bob"]]])
            #expect(unknown.status == 404, "\(unknown.text)")
            let report = try LedgerAudit(server.ledger).audit(scratchPath: server.directory.child("audit-scratch"))
            #expect(report.ok, "\(report.problems)")
        }
    }

    @Test func aOneTimeURLParticipantIsTakenByWhoeverAcceptsThroughIt() async throws {
        try await ServerHarness.run { server in
            let shortGUID = try await Self.share(server)
            let added = try await server.post(
                "shares/oneTimeParticipants/add", as: "_alice", ["shortGUID": shortGUID, "permission": "READ_WRITE"])
            #expect(added.status == 200, "\(added.text)")
            let oneTime = try #require(added.json["oneTimeShortGUID"] as? String, "\(added.text)")
            #expect(oneTime != shortGUID && (added.json["oneTimeURL"] as? String)?.hasSuffix(oneTime) == true)
            let accepted = try await server.post("records/accept", database: "public", as: "_bob", ["shortGUIDs": [["value": oneTime]]])
            let result = (accepted.json["results"] as? [JSON])?.first
            #expect(result?["participantStatus"] as? String == "ACCEPTED" && result?["participantPermission"] as? String == "READ_WRITE", "\(accepted.text)")
            let participant = Self.participant(result?["share"] as? JSON, "_bob")
            #expect(participant?["participantId"] as? String == added.json["participantId"] as? String, "\(accepted.text)")
        }
    }

    @Test func participantLookupByEmailPhoneAndIdIsRecorded() async throws {
        try await ServerHarness.run { server in
            _ = try await server.ledger.registerUser("_carol", in: ServerHarness.container, emailAddress: "carol@example.com", phoneNumber: "+1 555 0199")
            let head = try server.ledger.log.head().position
            let byPhone = try await server.post(
                "users/lookup/phone", database: "public", as: "_alice", ["users": [["phoneNumber": "+15550199"], ["phoneNumber": "+15550000"]]])
            let phoneUsers = byPhone.json["users"] as? [JSON] ?? []
            #expect(phoneUsers.first?["userRecordName"] as? String == "_carol", "\(byPhone.text)")
            #expect(phoneUsers.last?["serverErrorCode"] as? String == "NOT_FOUND", "\(byPhone.text)")
            let byID = try await server.post("users/lookup/id", database: "public", as: "_alice", ["users": [["userRecordName": "_bob"]]])
            #expect((byID.json["users"] as? [JSON])?.first?["userRecordName"] as? String == "_bob", "\(byID.text)")
            let participants = try await server.post(
                "users/lookup/participants", database: "public", as: "_alice",
                ["lookupInfos": [["emailAddress": "carol@example.com"], ["emailAddress": "nobody@example.com"]]])
            let found = participants.json["participants"] as? [JSON] ?? []
            #expect(found.count == 2, "\(participants.text)")
            #expect((found.first?["userIdentity"] as? JSON)?["hasiCloudAccount"] as? Bool == true, "\(participants.text)")
            #expect((found.last?["userIdentity"] as? JSON)?["hasiCloudAccount"] as? Bool == false, "\(participants.text)")
            let bad = try await server.post(
                "users/lookup/participants", database: "public", as: "_alice", ["lookupInfos": [["emailAddress": "a@b.c", "phoneNumber": "1"]]])
            #expect(bad.status == 400, "\(bad.text)")
            // Each distinct lookup is one ShareParticipantFetched.
            #expect(try HostileClientTests.eventTypes(after: head, server.ledger) == Array(repeating: "ShareParticipantFetched", count: 5))
        }
    }
}
