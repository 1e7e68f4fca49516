import Foundation
import ShareLedger
import TestSupport
import Testing

/// Runs the built `share-ledger` and decodes the JSON object it printed.
private func runJSON(_ arguments: [String]) async throws -> (status: Int32, object: [String: Any], stderr: String) {
    let run = try await runProduct("share-ledger", arguments)
    let object = try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any]
    return (run.status, object ?? [:], run.stderr)
}

@Suite("share-ledger simulate")
struct SimulateCLITests {
    /// A small, fast run: 4 clients, 24 users, no flushes.
    static func simulate(_ path: String, seed: Int, actions: Int = 1_200) async throws -> (status: Int32, object: [String: Any], stderr: String) {
        try await runJSON([
            "simulate", "--path", path, "--users", "24", "--clients", "4", "--actions", String(actions), "--seed", String(seed),
            "--durability", "unsafeNoSync", "--json",
        ])
    }

    @Test("a small run: every outcome as intended, intended errors happen, nothing left pending")
    func smallRun() async throws {
        let dir = TemporaryDirectory()
        let run = try await Self.simulate(dir.child("ledger"), seed: 7)
        #expect(run.status == 0, "\(run.stderr) \(run.object["problems"] ?? "")")
        let summary = run.object
        #expect(summary["actions"] as? Int == 1_200)
        #expect(summary["unexpectedErrors"] as? Int == 0, "\(summary["problems"] ?? "")")
        #expect(summary["unexpectedSuccesses"] as? Int == 0)
        #expect(summary["mismatches"] as? Int == 0)
        #expect(summary["pendingResidualTasks"] as? Int == 0)
        #expect((summary["events"] as? Int ?? 0) > 0)
        #expect((summary["actionsPerSecond"] as? Double ?? 0) > 0)
        let accepted = try #require(summary["acceptedParticipants"] as? Int)
        #expect(accepted > 0)
        #expect(summary["participantZones"] as? Int == accepted)
        let errors = try #require(summary["errorsByCode"] as? [String: Int])
        #expect(!errors.isEmpty)
        // The provoked mistakes: unknown URLs, uninvited accepts, stale tags, sharing a shared record.
        for code in ["unknownItem", "permissionFailure", "serverRecordChanged", "alreadyShared"] {
            #expect((errors[code] ?? 0) > 0, "no \(code) in \(errors)")
        }
        #expect(summary["intendedErrors"] as? Int == errors.values.reduce(0, +))
        let latency = try #require(summary["latencyMicros"] as? [String: [String: Int]])
        for kind in ["shareMetadata", "accept", "addParticipant"] {
            let figures = try #require(latency[kind], "no latency for \(kind)")
            #expect((figures["p50"] ?? 0) > 0)
            #expect((figures["p99"] ?? 0) >= (figures["p50"] ?? 0))
        }

        // The ledger it wrote holds together.
        let verify = try await runProduct("share-ledger", ["verify", "--path", dir.child("ledger")])
        #expect(verify.status == 0, "\(verify.stdout)")
    }

    @Test("the same seed makes the same calls and provokes the same errors")
    func sameSeedSameRun() async throws {
        let dir = TemporaryDirectory()
        let first = try await Self.simulate(dir.child("a"), seed: 11, actions: 800)
        let second = try await Self.simulate(dir.child("b"), seed: 11, actions: 800)
        #expect(first.status == 0 && second.status == 0, "\(first.stderr) \(second.stderr)")
        #expect(first.object["actions"] as? Int == second.object["actions"] as? Int)
        let errorsA = try #require(first.object["errorsByCode"] as? [String: Int])
        let errorsB = try #require(second.object["errorsByCode"] as? [String: Int])
        #expect(errorsA == errorsB)
        #expect(first.object["events"] as? Int == second.object["events"] as? Int)
        #expect(first.object["acceptedParticipants"] as? Int == second.object["acceptedParticipants"] as? Int)
    }

    @Test("a second run on the same ledger uses new names and stays consistent")
    func secondRunSameLedger() async throws {
        let dir = TemporaryDirectory()
        let first = try await Self.simulate(dir.child("ledger"), seed: 3, actions: 600)
        let second = try await Self.simulate(dir.child("ledger"), seed: 3, actions: 600)
        #expect(first.status == 0 && second.status == 0, "\(second.stderr) \(second.object["problems"] ?? "")")
        #expect(second.object["unexpectedErrors"] as? Int == 0)
        #expect(second.object["participantZones"] as? Int == second.object["acceptedParticipants"] as? Int)
    }

    @Test("bad options are refused before anything is written; --help lists the new commands")
    func validation() async throws {
        let dir = TemporaryDirectory()
        let bad = try await runProduct("share-ledger", ["simulate", "--path", dir.child("x"), "--users", "5", "--clients", "4"])
        #expect(bad.status != 0)
        #expect(bad.stderr.contains("--users"))
        #expect(!FileManager.default.fileExists(atPath: dir.child("x")))
        let help = try await runProduct("share-ledger", ["--help"])
        for command in ["simulate", "fetch", "accept"] { #expect(help.stdout.contains(command)) }
    }
}

@Suite("share-ledger fetch and accept")
struct FetchAcceptCLITests {
    static let container = "iCloud.com.example.notes"

    /// A ledger where alice shares "list" (with a child) and invited bob by email; carol is not invited.
    static func makeLedger(_ path: String) async throws -> URL {
        let ledger = try ShareLedger.open(Fixtures.configuration(path))
        try await ledger.registerUser("_alice", in: container, emailAddress: "alice@example.com")
        try await ledger.registerUser("_bob", in: container, emailAddress: "bob@example.com")
        try await ledger.registerUser("_carol", in: container)
        let alice = ledger.container(container, userRecordName: "_alice")
        let zone = RecordZoneID(zoneName: "Notes")
        _ = try await alice.save(RecordZone(zoneID: zone))
        let list = RecordID(recordName: "list", zoneID: zone)
        _ = try await alice.save(
            Record(recordType: "List", recordID: list, fields: ["title": .string("Groceries"), "color": .string("green")]))
        _ = try await alice.save(
            Record(recordType: "Item", recordID: RecordID(recordName: "item", zoneID: zone), fields: ["name": .string("milk")], parent: list))
        let share = try await alice.share(rootRecord: list, title: "Groceries")
        _ = try await alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly, to: share.url)
        await ledger.close()
        return share.url
    }

    @Test("fetch shows the invitee's metadata; accept accepts and runs the residual task; strangers get errors")
    func fetchThenAccept() async throws {
        let dir = TemporaryDirectory()
        let path = dir.child("ledger")
        let url = try await Self.makeLedger(path).absoluteString
        let common = ["--container", Self.container, "--path", path]

        let fetched = try await runJSON(["fetch", url, "--as", "_bob", "--root-record", "--keys", "title", "--json"] + common)
        #expect(fetched.status == 0, "\(fetched.stderr)")
        let metadata = fetched.object
        #expect(metadata["containerIdentifier"] as? String == Self.container)
        #expect(metadata["owner"] as? String == "_alice")
        #expect(metadata["role"] as? String == "privateUser")
        #expect(metadata["status"] as? String == "pending")
        #expect(metadata["permission"] as? String == "readOnly")
        #expect(metadata["rootRecordName"] as? String == "list")
        let root = try #require(metadata["rootRecord"] as? [String: Any])
        #expect((root["fields"] as? [String: Any])?.keys.sorted() == ["title"])
        let share = try #require(metadata["share"] as? [String: Any])
        let participants = try #require(share["participants"] as? [[String: Any]])
        #expect(participants.map { $0["user"] as? String } == ["_alice", "_bob"])

        let text = try await runProduct("share-ledger", ["fetch", url, "--as", "_bob"] + common)
        #expect(text.status == 0)
        #expect(text.stdout.contains("you           privateUser, pending, readOnly"), "\(text.stdout)")

        let accepted = try await runJSON(["accept", url, "--as", "_bob", "--json"] + common)
        #expect(accepted.status == 0, "\(accepted.stderr)")
        #expect(accepted.object["status"] as? String == "accepted")
        #expect(accepted.object["role"] as? String == "privateUser")
        #expect(accepted.object["residualTasksCompleted"] as? Int == 1)
        #expect(accepted.object["sharedDatabaseZones"] as? [String] == ["Notes (owner _alice)"])

        let again = try await runProduct("share-ledger", ["fetch", url, "--as", "_bob"] + common)
        #expect(again.stdout.contains("you           privateUser, accepted, readOnly"), "\(again.stdout)")

        // Carol has no invitation: the private share does not exist for her.
        let stranger = try await runJSON(["fetch", url, "--as", "_carol", "--json"] + common)
        #expect(stranger.status == 1)
        #expect((stranger.object["error"] as? [String: Any])?["name"] as? String == "unknownItem")
        let strangerAccept = try await runProduct("share-ledger", ["accept", url, "--as", "_carol"] + common)
        #expect(strangerAccept.status == 1)
        #expect(strangerAccept.stderr.contains("unknownItem"))
        // Not a URL; an unknown user; a ledger that is not there.
        let notURL = try await runJSON(["fetch", "not a url", "--as", "_bob", "--json"] + common)
        #expect(notURL.status == 1)
        #expect((notURL.object["error"] as? [String: Any])?["name"] as? String == "invalidArguments")
        let nobody = try await runProduct("share-ledger", ["accept", url, "--as", "_nobody"] + common)
        #expect(nobody.status == 1)
        #expect(nobody.stderr.contains("notAuthenticated"))
        let missing = try await runProduct("share-ledger", ["fetch", url, "--as", "_bob", "--container", Self.container, "--path", dir.child("none")])
        #expect(missing.status == 2)

        // What the commands did is in the ledger.
        let ledger = try ShareLedger.open(Fixtures.configuration(path))
        let bob = ledger.container(Self.container, userRecordName: "_bob")
        #expect(try bob.participatingShares(status: [.accepted]).count == 1)
        let stats = try ledger.statistics()
        #expect(stats.pendingResidualTasks == 0)
        #expect(stats.participantZones == 1)
        await ledger.close()
    }
}
