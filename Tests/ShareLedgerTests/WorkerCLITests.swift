import Foundation
import ShareLedger
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("share-ledger worker and tasks")
struct WorkerCLITests {
    /// A ledger on disk with one accepted participant whose zone task is pending.
    /// A ledger where Bob accepted Alice's share and his zone task is pending: the fixture's
    /// directory, the ledger's path and the share's URL.
    static func ledgerWithPendingTask() async throws -> (TemporaryDirectory, String, URL) {
        let (f, share) = try await SharingFixture.withShare(inviting: LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        await f.ledger.close()
        return (f.dir, f.dir.child("ledger"), share.url)
    }

    private func ledgerWithPendingTask() async throws -> (TemporaryDirectory, String) {
        let (dir, path, _) = try await Self.ledgerWithPendingTask()
        return (dir, path)
    }

    private func json(_ text: String) throws -> Any { try JSONSerialization.jsonObject(with: Data(text.utf8)) }

    @Test("tasks lists the pending task; worker --drain completes it; stats agrees")
    func drain() async throws {
        let (dir, path) = try await ledgerWithPendingTask()
        _ = dir
        let listed = try await runProduct("share-ledger", ["tasks", "--path", path, "--json"])
        #expect(listed.status == 0, "\(listed.stderr)")
        let tasks = try #require(try json(listed.stdout) as? [[String: Any]])
        #expect(tasks.count == 1)
        #expect(tasks.first?["kind"] as? String == "createZone")
        #expect(tasks.first?["userRecordName"] as? String == "_bob")

        let drained = try await runProduct("share-ledger", ["worker", "--path", path, "--drain", "--json"])
        #expect(drained.status == 0, "\(drained.stderr)")
        let summary = try #require(try json(drained.stdout) as? [String: Any])
        #expect(summary["completed"] as? Int == 1)
        #expect(summary["pendingResidualTasks"] as? Int == 0)

        let stats = try #require(try json(try await runProduct("share-ledger", ["stats", "--path", path, "--json"]).stdout) as? [String: Any])
        #expect(stats["pendingResidualTasks"] as? Int == 0)
        #expect(stats["participantZones"] as? Int == 1)
        #expect(stats["acceptedParticipants"] as? Int == 1)
        #expect(stats["parkedResidualTasks"] as? Int == 0)

        let retry = try await runProduct("share-ledger", ["tasks", "retry", "--path", path, "12345"])
        #expect(retry.status == 1)
        #expect(retry.stderr.contains("no parked residual task 12345"))
        let bad = try await runProduct("share-ledger", ["tasks", "retry", "--path", path])
        #expect(bad.status != 0)
    }

    @Test("worker --drain saves a read-model snapshot when --snapshot-every events have passed, and keeps the newest --keep-snapshots")
    func drainSavesSnapshots() async throws {
        let (dir, path) = try await ledgerWithPendingTask()
        _ = dir
        func snapshots() async throws -> [UInt64] {
            let listed = try await runProduct("share-ledger", ["snapshot", "--list", "--path", path, "--json"])
            return try #require(try json(listed.stdout) as? [[String: Any]]).compactMap { ($0["position"] as? NSNumber)?.uint64Value }
        }
        let head = { () async throws -> UInt64 in
            let stats = try #require(try json(try await runProduct("share-ledger", ["stats", "--path", path, "--json"]).stdout) as? [String: Any])
            return try #require((stats["headPosition"] as? NSNumber)?.uint64Value)
        }
        let before = try await head()
        // The default interval (100,000) is far away: nothing saved.
        #expect(try await runProduct("share-ledger", ["worker", "--path", path, "--drain"]).status == 0)
        #expect(try await snapshots().isEmpty)
        // The drain appended the zone's completion; a short interval is due now.
        #expect(try await runProduct("share-ledger", ["worker", "--path", path, "--drain", "--snapshot-every", "5"]).status == 0)
        #expect(try await snapshots() == [before + 1])
        #expect(try await runProduct("share-ledger", ["worker", "--path", path, "--drain", "--snapshot-every", "1"]).status == 0)
        #expect(try await snapshots() == [before + 1], "no event since: not due")
        #expect(try await runProduct("share-ledger", ["worker", "--path", path, "--keep-snapshots", "-1"]).status != 0)
    }

    @Test("worker runs until SIGTERM, doing the work, and exits 0")
    func untilSIGTERM() async throws {
        let (dir, path) = try await ledgerWithPendingTask()
        let outPath = dir.child("worker.out")
        let worker = try ChildProcess(builtProduct("share-ledger"), ["worker", "--path", path, "--json"], stdout: outPath)
        defer { worker.send(SIGKILL) }  // if the test gives up before its end
        // Wait until the task is done (read-only look through the library), then stop the worker.
        var configuration = ShareLedger.Configuration(path: path, createIfMissing: false, readOnly: true)
        configuration.residualTaskWorker = nil
        try await waitUntil("the worker completed the pending task") {
            let reader = try ShareLedger.open(configuration)
            let pending = try reader.statistics().pendingResidualTasks
            await reader.close()
            return pending == 0
        }
        worker.send(SIGTERM)
        let ended = await worker.exit()
        #expect(ended.exited(0), "\(ended.summary)")
        let output = String(decoding: FileManager.default.contents(atPath: outPath) ?? Data(), as: UTF8.self)
        let summary = try #require(try json(output) as? [String: Any])
        #expect(summary["pendingResidualTasks"] as? Int == 0)
        // It says what it did (it used to print 0 whatever it completed).
        #expect(summary["completed"] as? Int == 1, "\(summary)")
    }
}
