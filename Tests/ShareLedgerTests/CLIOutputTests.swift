import Foundation
import ShareLedger
import TestSupport
import Testing

/// Smaller CLI behaviours: `access --json`, exit code 64,
/// `history --limit`, and `simulate` on a full ledger (the worker's count: `WorkerCLITests`).
@Suite("The share-ledger command: outputs and limits")
struct CLIOutputTests {
    @Test("access --json names roles, permissions and statuses, and gives the time in ISO 8601")
    func accessJSON() async throws {
        let (dir, path, url) = try await WorkerCLITests.ledgerWithPendingTask()
        _ = dir
        let run = try await runCLI(["access", "--path", path, "--share", url.absoluteString, "--at", "100", "--json"])
        #expect(run.exited(0), "\(run.summary)")
        let access = try #require(jsonObject(run.stdout), "\(run.summary)")
        #expect((access["recordedAt"] as? String)?.hasPrefix("20") == true, "\(access)")
        #expect(access["publicPermission"] as? String == "none")
        let participants = try #require(access["participants"] as? [[String: Any]])
        #expect(participants.map { $0["role"] as? String } == ["owner", "privateUser"], "\(participants)")
        #expect(participants.map { $0["acceptanceStatus"] as? String } == ["accepted", "accepted"])
        #expect(participants.last?["permission"] as? String == "readOnly")
    }

    @Test("history --limit below 1 is refused before the ledger is opened (64); the README lists exit code 64")
    func limitsAndExitCodes() async throws {
        let dir = TemporaryDirectory()
        for limit in ["-1", "0"] {
            let run = try await runCLI(["history", "--path", dir.child("none"), "--container", "iCloud.x", "--limit=\(limit)"])
            #expect(run.exited(64), "--limit=\(limit): \(run.summary)")
        }
        let readme = try String(contentsOf: packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        #expect(readme.contains("64 the arguments were refused"))
        #expect(try await runCLI(["--help"]).stdout.contains("64"))
    }

    @Test("simulate on a full ledger stops after a run of storageFull, counts problems by kind and says why it stopped")
    func simulateStopsWhenFull() async throws {
        let dir = TemporaryDirectory()
        let run = try await runCLI([
            "simulate", "--path", dir.child("ledger"), "--actions", "20000", "--users", "60", "--clients", "2",
            "--max-size-mib", "1", "--durability", "unsafeNoSync", "--json",
        ])
        #expect(run.exited(1), "\(run.summary)")
        let summary = try #require(jsonObject(run.stdout), "\(run.summary)")
        #expect((summary["stoppedEarly"] as? String)?.contains("storageFull") == true, "\(summary)")
        #expect((summary["actions"] as? Int ?? 0) < 20_000)
        let kinds = try #require(summary["problemsByKind"] as? [String: Int])
        #expect((kinds["unexpected error storageFull"] ?? 0) > 0, "\(kinds)")
        let problems = try #require(summary["problems"] as? [String])
        #expect(problems.count <= 5 * kinds.count)
    }
}
