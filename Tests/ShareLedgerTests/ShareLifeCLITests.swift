import Foundation
import ShareLedger
import TestSupport
import Testing

/// A share's whole life driven by hand through `share-ledger`'s subcommands: each
/// goes through the library's public API, so the log records it and the ledger audits clean after.
@Suite("share-ledger: a share's life by hand")
struct ShareLifeCLITests {
    static let container = "iCloud.com.example.notes"

    /// Runs `share-ledger` as `user` (when given) in the test container on the ledger at `path`.
    struct Runner {
        let path: String

        func run(_ arguments: [String], as user: String? = nil, json: Bool = true) async throws -> CLIOutcome {
            var full = arguments + ["--path", path, "--container", ShareLifeCLITests.container]
            if let user { full += ["--as", user] }
            if json { full.append("--json") }
            return try await runCLI(full)
        }

        /// Runs a command that must succeed; returns its JSON object.
        func ok(_ arguments: [String], as user: String? = nil, sourceLocation: SourceLocation = #_sourceLocation) async throws
            -> [String: Any]
        {
            let outcome = try await run(arguments, as: user)
            #expect(outcome.exited(0), "\(arguments.prefix(2)): \(outcome.summary)", sourceLocation: sourceLocation)
            return try #require(jsonObject(outcome.stdout), "\(outcome.summary)", sourceLocation: sourceLocation)
        }

        /// Runs a command that must fail with exit 1 and `code`.
        func fails(
            _ arguments: [String], as user: String? = nil, _ code: String, sourceLocation: SourceLocation = #_sourceLocation
        ) async throws {
            let outcome = try await run(arguments, as: user)
            #expect(outcome.exited(1), "\(arguments.prefix(2)): \(outcome.summary)", sourceLocation: sourceLocation)
            let error = jsonObject(outcome.stdout)?["error"] as? [String: Any]
            #expect(error?["name"] as? String == code, "\(arguments.prefix(2)): \(outcome.summary)", sourceLocation: sourceLocation)
        }
    }

    /// The participant entry of `user` in a share report.
    static func participant(_ share: [String: Any]?, user: String) -> [String: Any]? {
        (share?["participants"] as? [[String: Any]])?.first { $0["user"] as? String == user }
    }

    @Test("register, zone, records, share, look up, invite, fetch, accept, write, set permission, leave, remove, make public, delete")
    func wholeLife() async throws {
        let dir = TemporaryDirectory()
        let cli = Runner(path: dir.child("ledger"))
        // Accounts (user register creates the ledger).
        for (user, extra) in [("_alice", ["--email", "alice@example.com"]), ("_bob", ["--email", "bob@example.com"]),
                              ("_carol", ["--phone", "+1 555 0123"])] {
            _ = try await cli.ok(["user", "register", user] + extra)
        }
        // Alice: a zone and two records, the second below the first.
        let zone = try await cli.ok(["zone", "create", "Lists"], as: "_alice")
        #expect(zone["zoneName"] as? String == "Lists")
        #expect(zone["ownerName"] as? String == "_alice")
        let list = try await cli.ok(["record", "save", "groceries", "--zone", "Lists", "--type", "List", "--field", "title=Groceries"], as: "_alice")
        #expect((list["fields"] as? [String: Any])?["title"] as? String == "Groceries")
        _ = try await cli.ok(["record", "save", "item", "--zone", "Lists", "--type", "Item", "--parent", "groceries", "--field", "name=milk"], as: "_alice")
        let zones = try await cli.run(["zone", "list"], as: "_alice")
        #expect(zones.exited(0), "\(zones.summary)")
        let listed = (try? JSONSerialization.jsonObject(with: Data(zones.stdout.utf8))) as? [[String: Any]]
        #expect(listed?.map { $0["zoneName"] as? String } == ["Lists"], "\(zones.stdout)")

        // Share the hierarchy; the URL comes back.
        let created = try await cli.ok(["share", "create", "--zone", "Lists", "--record", "groceries", "--title", "Groceries"], as: "_alice")
        let share = try #require(created["share"] as? [String: Any])
        let url = try #require(share["url"] as? String)
        #expect(share["rootRecordName"] as? String == "groceries")
        #expect(share["zoneWide"] as? Bool == false)

        // Look people up: an account, an address nobody has, a user that does not exist (partial failure, exit 1).
        let lookup = try await cli.run(
            ["share", "lookup", "--email", "bob@example.com", "--email", "dave@unclaimed.example", "--user", "_nobody"], as: "_alice")
        #expect(lookup.exited(1), "\(lookup.summary)")
        let lookedUp = try #require(jsonObject(lookup.stdout), "\(lookup.summary)")
        let results = try #require(lookedUp["results"] as? [[String: Any]])
        #expect(results.count == 3)
        #expect((results[0]["participant"] as? [String: Any])?["user"] as? String == "_bob")
        #expect((results[1]["participant"] as? [String: Any])?["hasAccount"] as? Bool == false)
        #expect((results[2]["error"] as? [String: Any])?["name"] as? String == "unknownItem")
        #expect((lookedUp["error"] as? [String: Any])?["name"] as? String == "partialFailure")

        // Invite Bob by email (readWrite) and Carol by phone.
        let invitedBob = try await cli.ok(["share", "invite", url, "--email", "bob@example.com", "--permission", "readWrite"], as: "_alice")
        let bobEntry = try #require(invitedBob["participant"] as? [String: Any])
        #expect(bobEntry["user"] as? String == "_bob")
        #expect(bobEntry["status"] as? String == "pending")
        #expect(bobEntry["permission"] as? String == "readWrite")
        let invitedCarol = try await cli.ok(["share", "invite", url, "--phone", "+1 555 0123"], as: "_alice")
        #expect((invitedCarol["participant"] as? [String: Any])?["user"] as? String == "_carol")

        // Bob fetches the metadata and accepts; he reads and writes the shared records.
        let fetched = try await cli.ok(["fetch", url], as: "_bob")
        #expect(fetched["role"] as? String == "privateUser")
        #expect(fetched["status"] as? String == "pending")
        let accepted = try await cli.ok(["accept", url], as: "_bob")
        #expect(accepted["status"] as? String == "accepted")
        #expect((accepted["sharedDatabaseZones"] as? [String])?.first?.hasPrefix("Lists") == true)
        let item = try await cli.ok(["record", "fetch", "item", "--zone", "Lists", "--owner", "_alice"], as: "_bob")
        let tag = try #require(item["recordChangeTag"] as? String)
        let written = try await cli.ok(
            ["record", "save", "item", "--zone", "Lists", "--owner", "_alice", "--field", "name=bread", "--change-tag", tag], as: "_bob")
        #expect((written["fields"] as? [String: Any])?["name"] as? String == "bread")
        #expect(written["parent"] as? String == "groceries", "an update keeps what it does not change")
        // The same stale tag again: serverRecordChanged.
        try await cli.fails(
            ["record", "save", "item", "--zone", "Lists", "--owner", "_alice", "--field", "name=jam", "--change-tag", tag],
            as: "_bob", "serverRecordChanged")

        // Alice makes Bob an administrator with readOnly permission, named by user record name.
        let changed = try await cli.ok(
            ["share", "set-permission", url, "--user", "_bob", "--permission", "readOnly", "--role", "administrator"], as: "_alice")
        #expect((changed["participant"] as? [String: Any])?["role"] as? String == "administrator")
        #expect((changed["participant"] as? [String: Any])?["permission"] as? String == "readOnly")

        // Carol accepts, then leaves; afterwards the private share is hidden from her.
        _ = try await cli.ok(["accept", url], as: "_carol")
        let left = try await cli.ok(["share", "leave", url], as: "_carol")
        #expect(left["action"] as? String == "left")
        // The in-process worker may have run the zone removal before the command waited for it.
        #expect(left["residualTasksCompleted"] is Int)
        try await cli.fails(["fetch", url], as: "_carol", "unknownItem")

        // Alice removes Bob (by participant id this time); his zone goes.
        let bobID = try #require(bobEntry["participantID"] as? String)
        let removed = try await cli.ok(["share", "remove", url, "--participant", bobID], as: "_alice")
        #expect((removed["participant"] as? [String: Any])?["status"] as? String == "removed")
        #expect(removed["residualTasksCompleted"] is Int)
        try await cli.fails(["record", "fetch", "item", "--zone", "Lists", "--owner", "_alice"], as: "_bob", "unknownItem")

        // Public: anyone with the URL may join; Carol joins as a public user.
        let opened = try await cli.ok(["share", "set-public", url, "--permission", "readOnly"], as: "_alice")
        #expect((opened["share"] as? [String: Any])?["publicPermission"] as? String == "readOnly")
        let joined = try await cli.ok(["accept", url], as: "_carol")
        #expect(joined["role"] as? String == "publicUser")
        try await cli.fails(["share", "set-public", url, "--permission", "none"], as: "_carol", "permissionFailure")

        // Alice deletes the share: the URL is unknown now; the zone can be shared as a whole.
        let deleted = try await cli.ok(["share", "delete", url], as: "_alice")
        #expect(deleted["action"] as? String == "deleted")
        try await cli.fails(["fetch", url], as: "_carol", "unknownItem")
        let wide = try await cli.ok(["share", "create", "--zone", "Lists", "--title", "Everything", "--public", "readWrite"], as: "_alice")
        #expect((wide["share"] as? [String: Any])?["zoneWide"] as? Bool == true)
        #expect((wide["share"] as? [String: Any])?["publicPermission"] as? String == "readWrite")

        // Every step is in the log, and the log holds together.
        let audit = try await runCLI(["audit", "--path", dir.child("ledger"), "--json"])
        #expect(audit.exited(0), "\(audit.summary)")
        #expect(jsonObject(audit.stdout)?["ok"] as? Bool == true)
        let history = try await runCLI(["history", "--path", dir.child("ledger"), "--container", Self.container, "--json"])
        #expect(history.exited(0), "\(history.summary)")
        for name in ["ZoneCreated", "RecordSaved", "ShareCreated", "ShareParticipantFetched", "ParticipantAdded", "ParticipantUpdated",
                     "ShareAccepted", "ParticipantRemoved", "PublicPermissionChanged", "ShareDeleted"] {
            #expect(history.stdout.contains(name), "history lacks \(name)")
        }
    }

    @Test("text output: share create ends with the URL alone; lookup and invite say what they did")
    func textOutput() async throws {
        let dir = TemporaryDirectory()
        let cli = Runner(path: dir.child("ledger"))
        _ = try await cli.ok(["user", "register", "_alice"])
        _ = try await cli.ok(["user", "register", "_bob", "--email", "bob@example.com"])
        _ = try await cli.ok(["zone", "create", "Trips"], as: "_alice")
        let created = try await cli.run(["share", "create", "--zone", "Trips", "--title", "Trips"], as: "_alice", json: false)
        #expect(created.exited(0), "\(created.summary)")
        let lines = created.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "shared zone Trips as a whole")
        let url = try #require(lines.last)
        #expect(url.hasPrefix("https://share.localhost/share/0") && url.hasSuffix("#Trips"), "\(created.stdout)")
        let invited = try await cli.run(["share", "invite", url, "--user", "_bob", "--role", "administrator"], as: "_alice", json: false)
        #expect(invited.exited(0), "\(invited.summary)")
        #expect(invited.stdout.hasPrefix("invited _bob as administrator with readOnly permission"), "\(invited.stdout)")
        let lookup = try await cli.run(["share", "lookup", "--email", "bob@example.com", "--phone", "+1 555 0199"], as: "_alice", json: false)
        #expect(lookup.exited(0), "\(lookup.summary)")
        #expect(lookup.stdout.contains("account _bob"))
        #expect(lookup.stdout.contains("no account"))
    }

    @Test("refusals: bad arguments exit 64 before anything is opened; failed calls exit 1 with a typed error; no ledger exits 2")
    func refusals() async throws {
        let dir = TemporaryDirectory()
        let cli = Runner(path: dir.child("ledger"))
        // No ledger yet: 2, and nothing is created.
        let missing = try await cli.run(["zone", "create", "Lists"], as: "_alice")
        #expect(missing.exited(2), "\(missing.summary)")
        #expect(!FileManager.default.fileExists(atPath: dir.child("ledger")))
        _ = try await cli.ok(["user", "register", "_alice"])
        _ = try await cli.ok(["user", "register", "_bob"])
        _ = try await cli.ok(["zone", "create", "Lists"], as: "_alice")
        _ = try await cli.ok(["record", "save", "r", "--zone", "Lists", "--type", "Note"], as: "_alice")
        let url = try #require((try await cli.ok(["share", "create", "--zone", "Lists", "--record", "r"], as: "_alice")["share"] as? [String: Any])?["url"] as? String)
        // Refused arguments: 64.
        for arguments in [
            ["share", "invite", url],  // nobody named
            ["share", "invite", url, "--email", "a@example.com", "--user", "_bob"],  // two people
            ["share", "invite", url, "--email", "a@example.com", "--email", "b@example.com"],  // the same option twice
            ["share", "remove", url, "--user", "_bob", "--user", "_alice"],
            ["share", "create", "--zone", "Lists", "--public", "everyone"],
            ["share", "invite", url, "--user", "_bob", "--role", "owner"],
            ["share", "remove", url],
            ["share", "lookup"],
            ["record", "save", "x", "--zone", "Lists"],  // a new record needs a type
            ["record", "save", "x", "--zone", "Lists", "--type", "T", "--field", "novalue"],
        ] {
            let outcome = try await cli.run(arguments, as: "_alice")
            #expect(outcome.exited(64), "\(arguments): \(outcome.summary)")
        }
        // One erasure per call: a repeated option is refused, not reduced to its last value.
        let twice = try await cli.run(["forget", "--user", "_bob", "--user", "_alice"])
        #expect(twice.exited(64), "\(twice.summary)")
        let participants = try #require((try await cli.ok(["fetch", url], as: "_alice")["share"] as? [String: Any])?["participants"] as? [Any])
        #expect(participants.count == 1, "nothing was invited by the refused calls")
        // Failed calls: 1, with CloudKit's codes.
        try await cli.fails(["share", "invite", url, "--user", "_nobody"], as: "_alice", "unknownItem")
        try await cli.fails(["share", "invite", url, "--user", "_alice"], as: "_bob", "unknownItem")  // not in the share: learns nothing
        try await cli.fails(["share", "create", "--zone", "Lists", "--record", "r"], as: "_bob", "zoneNotFound")  // Bob has no such zone
        try await cli.fails(["share", "create", "--zone", "Lists"], as: "_alice", "invalidArguments")  // the zone holds a hierarchy share
        try await cli.fails(["share", "remove", url, "--user", "_bob"], as: "_alice", "unknownItem")  // not a participant
        try await cli.fails(["share", "leave", url], as: "_alice", "invalidArguments")  // the owner cannot leave
        try await cli.fails(["share", "delete", url], as: "_nobody", "notAuthenticated")
        try await cli.fails(["share", "delete", "not a url"], as: "_alice", "invalidArguments")
        try await cli.fails(["share", "lookup", "--user", "_nobody"], as: "_alice", "partialFailure")
        try await cli.fails(["share", "set-public", url, "--permission", "readOnly", "--if-change-tag", "1"], as: "_alice", "serverRecordChanged")
        // Text mode: the message on standard error, exit 1.
        let text = try await cli.run(["share", "invite", url, "--user", "_nobody"], as: "_alice", json: false)
        #expect(text.exited(1))
        #expect(text.stderr.hasPrefix("share-ledger: ") && text.stderr.contains("(unknownItem)"), "\(text.stderr)")
    }

    @Test("--help groups the commands; the sharing commands are listed under share")
    func help() async throws {
        let help = try await runCLI(["--help"])
        #expect(help.exited(0))
        for word in ["sharing by hand", "zone", "record", "share", "fetch", "accept", "simulate", "audit", "serve", "bench"] {
            #expect(help.stdout.lowercased().contains(word), "--help lacks \(word)")
        }
        let share = try await runCLI(["share", "--help"])
        #expect(share.exited(0))
        for command in ["create", "lookup", "invite", "set-permission", "set-public", "remove", "leave", "delete"] {
            #expect(share.stdout.contains(command), "share --help lacks \(command)")
        }
    }

    /// Users _alice, _bob and _carol, and Alice's share of record groceries in zone Lists: its URL.
    static func groceries(_ cli: Runner) async throws -> String {
        for user in ["_alice", "_bob", "_carol"] { _ = try await cli.ok(["user", "register", user]) }
        _ = try await cli.ok(["zone", "create", "Lists"], as: "_alice")
        _ = try await cli.ok(["record", "save", "groceries", "--zone", "Lists", "--type", "List"], as: "_alice")
        let created = try await cli.ok(["share", "create", "--zone", "Lists", "--record", "groceries"], as: "_alice")
        return try #require((created["share"] as? [String: Any])?["url"] as? String)
    }

    @Test("access requests by hand: allow, request (refused as an unknown URL while off), approve, deny, block, unblock; history and access --at show them")
    func accessRequests() async throws {
        let dir = TemporaryDirectory()
        let cli = Runner(path: dir.child("ledger"))
        let url = try await Self.groceries(cli)
        try await cli.fails(["share", "request-access", url], as: "_bob", "unknownItem")
        let allowed = try await cli.ok(["share", "allow-requests", url], as: "_alice")
        #expect((allowed["share"] as? [String: Any])?["allowsAccessRequests"] as? Bool == true)
        _ = try await cli.ok(["share", "request-access", url], as: "_bob")
        _ = try await cli.ok(["share", "request-access", url], as: "_carol")
        let approved = try await cli.ok(["share", "approve", url, "--user", "_bob", "--permission", "readWrite"], as: "_alice")
        let bob = Self.participant(approved["share"] as? [String: Any], user: "_bob")
        #expect(bob?["approvedRequester"] as? Bool == true && bob?["status"] as? String == "pending")
        #expect((approved["share"] as? [String: Any])?["requesters"] as? [String] == ["_carol"])
        let denied = try await cli.ok(["share", "deny", url, "--user", "_carol"], as: "_alice")
        #expect((denied["share"] as? [String: Any])?["requesters"] == nil)
        try await cli.fails(["share", "deny", url, "--user", "_carol"], as: "_alice", "unknownItem")
        let blocked = try await cli.ok(["share", "block", url, "--user", "_carol"], as: "_alice")
        #expect((blocked["share"] as? [String: Any])?["blockedIdentities"] as? [String] == ["_carol"])
        try await cli.fails(["share", "request-access", url], as: "_carol", "unknownItem")
        try await cli.fails(["share", "approve", url, "--user", "_carol"], as: "_bob", "permissionFailure")
        let access = try await runCLI(["access", "--share", url, "--at", "999", "--path", dir.child("ledger"), "--json"])
        let json = try #require(jsonObject(access.stdout), "\(access.summary)")
        #expect(json["blockedIdentities"] as? [String] == ["_carol"] && json["allowsAccessRequests"] as? Bool == true)
        _ = try await cli.ok(["share", "unblock", url, "--user", "_carol"], as: "_alice")
        _ = try await cli.ok(["share", "request-access", url], as: "_carol")
        let history = try await runCLI(["history", "--share", url, "--path", dir.child("ledger")])
        for type in ["AccessRequestsAllowedChanged", "AccessRequested", "AccessRequestDenied", "IdentityBlocked", "IdentityUnblocked"] {
            #expect(history.stdout.contains(type), "history lacks \(type)")
        }
        let audit = try await runCLI(["audit", "--path", dir.child("ledger")])
        #expect(audit.exited(0), "\(audit.summary)")
    }

    @Test("a one-time URL by hand: invite-one-time prints it, the first user accepts through it, the next learns nothing")
    func oneTimeURL() async throws {
        let dir = TemporaryDirectory()
        let cli = Runner(path: dir.child("ledger"))
        let url = try await Self.groceries(cli)
        let invited = try await cli.ok(["share", "invite-one-time", url, "--permission", "readWrite"], as: "_alice")
        let oneTime = try #require(invited["oneTimeURL"] as? String)
        #expect(oneTime != url)
        _ = try await cli.ok(["accept", oneTime], as: "_bob")
        try await cli.fails(["fetch", oneTime], as: "_carol", "unknownItem")
        let audit = try await runCLI(["audit", "--path", dir.child("ledger")])
        #expect(audit.exited(0), "\(audit.summary)")
    }
}
