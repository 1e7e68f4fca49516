import Foundation
import ShareLedger
import TestSupport
import Testing

@testable import ShareLedgerReplication

/// Shipping, following, fencing, leases and failover on a 3-node loopback JetStream cluster (one per
/// test, a second or so to start). Serialized: each test runs its own cluster on the shared cores.
@Suite(.serialized, .enabled(if: Cluster.isAvailable, Comment(rawValue: Cluster.skipMessage)))
struct ReplicationTests {
    func shipper(_ log: EventLog, _ cluster: Cluster, shard: String = "s1") throws -> LedgerShipper {
        LedgerShipper(
            log: log,
            configuration: ShipperConfiguration(
                servers: cluster.servers, shard: try ShardNames(shard: shard), logger: Ledgers.logger("shipper")))
    }

    func follower(_ ledger: ShareLedger, _ cluster: Cluster, shard: String = "s1") throws -> LedgerFollower {
        LedgerFollower(
            ledger: ledger,
            configuration: FollowerConfiguration(
                servers: cluster.servers, shard: try ShardNames(shard: shard), logger: Ledgers.logger("follower")))
    }

    /// The replica's head, chain, read models and audit equal the primary's; the stream's sequence
    /// is the ledger's position; a new shipper resumes after the stream's last sequence.
    @Test func replicaEqualsPrimary() async throws {
        let cluster = try Cluster()
        let primary = try Ledgers.open(cluster.directory.makeChild("primary"))
        try await Ledgers.share(primary, round: 0)
        try await primary.completeResidualTasks()
        let shipper1 = try shipper(primary.log, cluster)
        let first = try await shipper1.shipAvailable()
        let head = try primary.log.head()
        #expect(first.shippedPosition == head.position.rawValue)
        #expect(first.eventsShipped == head.position.rawValue)
        #expect(first.lagPositions == 0)
        shipper1.close()

        // A new shipper (a restart) resumes after the stream's last sequence: nothing is sent again.
        try await Ledgers.share(primary, round: 1)
        let restarted = try shipper(primary.log, cluster)
        let second = try await restarted.shipAvailable()
        let newHead = try primary.log.head()
        #expect(second.shippedPosition == newHead.position.rawValue)
        #expect(second.eventsShipped == newHead.position.rawValue - head.position.rawValue)
        restarted.close()

        let replica = try Ledgers.open(cluster.directory.makeChild("replica"))
        let follower = try follower(replica, cluster)
        let replicaHead = try await follower.catchUp(timeout: .seconds(20))
        follower.close()
        #expect(replicaHead == newHead)
        #expect(try replica.log.verifyChain().isValid)
        let (primaryAt, primaryDigest) = try primary.readModelDigest()
        let (replicaAt, replicaDigest) = try replica.readModelDigest()
        #expect(primaryAt == replicaAt)
        #expect(primaryDigest == replicaDigest)
        #expect(try replica.statistics().pendingResidualTasks == primary.statistics().pendingResidualTasks)
        let audit = try replica.audit(scratchPath: cluster.directory.child("audit"))
        #expect(audit.ok, "\(audit.problems)")
        // Every stored event is byte for byte the primary's.
        let a = try primary.log.storedEvents(after: .start, limit: 10_000)
        let b = try replica.log.storedEvents(after: .start, limit: 10_000)
        #expect(a == b)
        await replica.close()
        await primary.close()
    }

    /// A ledger whose history differs from the stream's is refused, and nothing is published.
    @Test func refusesAStreamWithAnotherHistory() async throws {
        let cluster = try Cluster()
        let primary = try Ledgers.open(cluster.directory.makeChild("primary"))
        try await Ledgers.append(primary.log, count: 20)
        try await shipper(primary.log, cluster).shipAvailable()

        let other = try Ledgers.open(cluster.directory.makeChild("other"))
        try await Ledgers.append(other.log, count: 30, stream: "other")
        let intruder = try shipper(other.log, cluster)
        await #expect(throws: ReplicationError.self) { try await intruder.shipAvailable() }
        do {
            try await intruder.shipAvailable()
        } catch {
            #expect(error.code == .diverged)
            #expect(error.message.contains("position 20"))
        }
        // A ledger behind the stream is refused too (it would have to follow first).
        let behind = try Ledgers.open(cluster.directory.makeChild("behind"))
        try await Ledgers.append(behind.log, count: 5)
        do {
            try await shipper(behind.log, cluster).shipAvailable()
            Issue.record("a ledger behind the stream shipped")
        } catch let error as ReplicationError {
            #expect(error.code == .diverged)
        }
        let connection = try await NATSConnection.connect(servers: cluster.servers, name: "check")
        let state = try await connection.call("state") { c throws(ReplicationError) in try c.streamState(name: "LEDGER_s1") }
        #expect(state?.lastSequence == 20)
        #expect(state?.denyDelete == true && state?.denyPurge == true && state?.replicas == 3)
        connection.close()
        await behind.close()
        await other.close()
        await primary.close()
    }

    /// Two writers publishing the same position with `Nats-Expected-Last-Sequence`: exactly one is
    /// stored each round (position 1, expecting 0, included); two holders racing for an expired lease:
    /// exactly one gets it each round.
    @Test func racingWritersExactlyOneWins() async throws {
        let cluster = try Cluster()
        let a = try await NATSConnection.connect(servers: cluster.servers, name: "a")
        let b = try await NATSConnection.connect(servers: [cluster.servers[2]], name: "b")
        _ = try await a.call("stream") { c throws(ReplicationError) in
            try c.ensureStream(name: "LEDGER_race", subject: "ledger.race.events", replicas: 3, duplicatesWindow: .seconds(60))
        }
        for round in UInt64(1)...40 {
            async let first = a.call("a") { c throws(ReplicationError) in
                try c.publishBatch(subject: "ledger.race.events", [.init(sequence: round, data: [1], messageID: "\(round):a", expectedLastMessageID: nil)])
            }
            async let second = b.call("b") { c throws(ReplicationError) in
                try c.publishBatch(subject: "ledger.race.events", [.init(sequence: round, data: [2], messageID: "\(round):b", expectedLastMessageID: nil)])
            }
            let outcomes = [try await first[round], try await second[round]]
            let stored = outcomes.filter { if case .stored(let sequence, false) = $0 { return sequence == round } else { return false } }
            #expect(stored.count == 1, "round \(round): \(outcomes)")
        }
        let state = try await a.call("state") { c throws(ReplicationError) in try c.streamState(name: "LEDGER_race") }
        #expect(state?.lastSequence == 40)

        let shard = try ShardNames(shard: "race")
        let leaseA = try await WriterLease.open(servers: cluster.servers, shard: shard, holder: "a", duration: .seconds(30))
        let leaseB = try await WriterLease.open(servers: cluster.servers, shard: shard, holder: "b", duration: .seconds(30))
        for round in 1...20 {
            async let grantA = leaseA.acquire()
            async let grantB = leaseB.acquire()
            let grants = try await [grantA, grantB]
            #expect(grants.filter(\.held).count == 1, "round \(round): \(grants)")
            let winner = grants[0].held ? leaseA : leaseB
            // The loser sees the winner's lease, unexpired.
            let loser = grants[0].held ? leaseB : leaseA
            #expect(try await loser.acquire().held == false)
            #expect(try await winner.release())
        }
        leaseA.close()
        leaseB.close()
        a.close()
        b.close()
    }
}
