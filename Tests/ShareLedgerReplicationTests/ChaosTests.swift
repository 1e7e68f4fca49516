import Foundation
import TestSupport
import Testing

extension ReplicationTests {
    /// `scripts/chaos`, a short seeded run: kills and pauses of the writer and kills of NATS nodes
    /// under a workload of `replicated` writes that share and accept; the checker finds nothing
    /// acknowledged lost, no command twice, terms increasing, no fork, every residual task done once
    /// (with accepted participants to check), and the healed shard acknowledges writes again.
    @Test func chaosShortRun() async throws {
        let run = try await runProcess(
            packageRoot.appendingPathComponent("scripts/chaos"),
            ["--seed", "7", "--events", "6", "--binary", builtProduct("share-ledger").path], timeLimit: .seconds(175))
        #expect(run.exited(0), "\(run.summary)")
        let summary = (try? JSONSerialization.jsonObject(with: Data(run.stdout.utf8))) as? [String: Any]
        #expect((summary?["acknowledged"] as? Int ?? 0) > 0, "\(run.summary)")
        #expect((summary?["acknowledgedAfterHeal"] as? Int ?? 0) >= 2, "\(run.summary)")
        #expect((summary?["acceptedParticipants"] as? Int ?? 0) > 0, "\(run.summary)")
        #expect(summary?["acceptedParticipants"] as? Int == summary?["participantZones"] as? Int, "\(run.summary)")
        let problems = summary?["problems"] as? [String: Int] ?? ["unread": 1]
        #expect(problems.values.allSatisfy { $0 == 0 }, "\(run.summary)")
    }
}
