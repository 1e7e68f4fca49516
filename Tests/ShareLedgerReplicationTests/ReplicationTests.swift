import Foundation
import ShareLedger
import ShareLedgerAudit
import Synchronization
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
            configuration: try {
                var configuration = ShipperConfiguration(
                    servers: cluster.servers, shard: try ShardNames(shard: shard), logger: Ledgers.logger("shipper"))
                configuration.callTimeout = Ledgers.callTimeout
                return configuration
            }())
    }

    func follower(_ ledger: ShareLedger, _ cluster: Cluster, shard: String = "s1") throws -> LedgerFollower {
        LedgerFollower(
            ledger: ledger,
            configuration: try {
                var configuration = FollowerConfiguration(
                    servers: cluster.servers, shard: try ShardNames(shard: shard), logger: Ledgers.logger("follower"))
                configuration.callTimeout = Ledgers.callTimeout
                return configuration
            }())
    }

    /// The replica's head, chain, read models and audit equal the primary's; the stream's sequence
    /// is the ledger's position; a new shipper resumes after the stream's last sequence.
    @Test func replicaEqualsPrimary() async throws {
        let cluster = try await Cluster()
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
        let replicaHead = try await follower.catchUp(timeout: .seconds(120))
        follower.close()
        #expect(replicaHead == newHead)
        #expect(try replica.log.verifyChain().isValid)
        let (primaryAt, primaryDigest) = try primary.readModelDigest()
        let (replicaAt, replicaDigest) = try replica.readModelDigest()
        #expect(primaryAt == replicaAt)
        #expect(primaryDigest == replicaDigest)
        #expect(try replica.statistics().pendingResidualTasks == primary.statistics().pendingResidualTasks)
        let audit = try LedgerAudit(replica).audit(scratchPath: cluster.directory.child("audit"))
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
        let cluster = try await Cluster()
        let primary = try Ledgers.open(cluster.directory.makeChild("primary"))
        try await Ledgers.append(primary.log, count: 20)
        try await shipper(primary.log, cluster).shipAvailable()

        let other = try Ledgers.open(cluster.directory.makeChild("other"))
        try await Ledgers.append(other.log, count: 30, stream: "other")
        let intruder = try shipper(other.log, cluster)
        await #expect(throws: ReplicationError.self) { try await intruder.shipAvailable() }
        let refusal = try await shipAnswer(intruder)
        #expect(refusal?.code == .diverged, "\(String(describing: refusal))")
        #expect(refusal?.message.contains("position 20") == true)
        // A ledger behind the stream is refused too (it would have to follow first).
        let behind = try Ledgers.open(cluster.directory.makeChild("behind"))
        try await Ledgers.append(behind.log, count: 5)
        let behindRefusal = try await shipAnswer(try shipper(behind.log, cluster))
        #expect(behindRefusal?.code == .diverged, "a ledger behind the stream: \(String(describing: behindRefusal))")
        let connection = try await NATSConnection.connect(servers: cluster.servers, name: "check", wait: Ledgers.callTimeout)
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
        let cluster = try await Cluster()
        let a = try await NATSConnection.connect(servers: cluster.servers, name: "a", wait: Ledgers.callTimeout)
        let b = try await NATSConnection.connect(servers: [cluster.servers[2]], name: "b", wait: Ledgers.callTimeout)
        // A cluster just formed may not place a replicated stream yet (a timeout, or JetStream's "no
        // suitable peers", both `timedOut`); the shipper retries that, and so does this direct call.
        var created: ReplicationError?
        for _ in 1...5 {
            created = await a.result("stream") { c throws(ReplicationError) in
                _ = try c.ensureStream(name: "LEDGER_race", subject: "ledger.race.events", replicas: 3, duplicatesWindow: .seconds(60))
            }
            guard created?.code == .timedOut else { break }
            try await Task.sleep(for: .milliseconds(500))
        }
        if let created { throw created }
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

    /// kill -9 the stream's leader while the primary appends and the shipper ships: every event
    /// acknowledged before the kill, and every later one, ends up in the stream exactly as the ledger
    /// holds it (the shipper rides out the election), and the restarted node rejoins.
    @Test func streamLeaderKilledDuringAppends() async throws {
        let cluster = try await Cluster()
        let primary = try Ledgers.open(cluster.directory.makeChild("primary"))
        let shipper = try shipper(primary.log, cluster)
        let shipping = Task { try await shipper.run() }
        let appending = Task { try await Ledgers.append(primary.log, count: 1_500) }
        // A command acknowledged with durability `replicated` returns only once the stream has it.
        let early = try await primary.log.append(
            [EventDraft(type: "example.Early", payload: [1])], to: "early", metadata: CommandMetadata(container: Ledgers.container, actor: "_t"))
        try await shipper.acknowledge(early.positions, durability: .replicated, timeout: .seconds(120))
        #expect(shipper.statistics.shippedPosition >= early.positions.upperBound.rawValue)
        try await shipper.waitUntilShipped(300, timeout: .seconds(120))
        let connection = try await NATSConnection.connect(servers: cluster.servers, name: "check", wait: Ledgers.callTimeout)
        let leader = try await connection.call("state") { c throws(ReplicationError) in try c.streamState(name: "LEDGER_s1") }?.leader
        let node = try #require(leader.flatMap(Cluster.node(named:)))
        let acknowledged = shipper.statistics.shippedPosition
        cluster.kill9(node)
        try await appending.value
        let head = try primary.log.head()
        try await shipper.acknowledge(head.position...head.position, durability: .replicated, timeout: .seconds(120))
        shipping.cancel()
        _ = try? await shipping.value
        #expect(acknowledged >= 300)
        #expect(shipper.statistics.shippedPosition == head.position.rawValue)

        let replica = try Ledgers.open(cluster.directory.makeChild("replica"))
        let follower = try follower(replica, cluster)
        #expect(try await follower.catchUp(timeout: .seconds(120)) == head)
        follower.close()
        #expect(try replica.log.verifyChain().isValid)
        #expect(try replica.log.storedEvents(after: .start, limit: 5_000) == primary.log.storedEvents(after: .start, limit: 5_000))

        // The killed node comes back and catches up: the stream has a leader and all the events.
        try await cluster.start(node)
        let state = try await connection.call("state") { c throws(ReplicationError) in try c.streamState(name: "LEDGER_s1") }
        #expect(state?.lastSequence == head.position.rawValue)
        connection.close()
        await replica.close()
        await primary.close()
    }

    /// The writer dies; a standby takes the lease once it expires, catches up from the stream,
    /// publishes its term marker and continues: positions gapless, the chain intact, every residual
    /// task done exactly once; the deposed writer's next publish is fenced by the marker, it records
    /// itself deposed and refuses local writes.
    @Test func standbyTakesOverWhenTheWriterDies() async throws {
        let cluster = try await Cluster()
        let shard = try ShardNames(shard: "s1")
        // The writer: holds the lease, ships, leaves residual tasks pending (does one of three).
        let writer = try Ledgers.open(cluster.directory.makeChild("writer"))
        let writerLease = try await WriterLease.open(servers: cluster.servers, shard: shard, holder: "writer", duration: .seconds(1))
        #expect(try await writerLease.acquire().held)
        let writerShipper = try shipper(writer.log, cluster)
        try await Ledgers.share(writer, round: 0)
        #expect(try await writer.completeResidualTasks(limit: 1) == 1)
        try await writerShipper.shipAvailable()
        let handedOver = try writer.log.head()

        // The standby follows; a takeover while the writer's lease is fresh does not succeed.
        let standbyPath = cluster.directory.makeChild("standby")
        let replica = try Ledgers.open(standbyPath)
        let follower = try follower(replica, cluster)
        let standbyLease = try await WriterLease.open(servers: cluster.servers, shard: shard, holder: "standby", duration: .seconds(3))
        // Renewed just before, so that the writer's lease is fresh however long the steps above took
        // on a loaded machine (its 1 s could run out in them, and the standby rightly took it). A
        // renewal after its lease ran out is a new term: the standby's is the one after it.
        let renewed = try await writerLease.acquire()
        #expect(renewed.held)
        let term = renewed.record.term + 1
        #expect(try await standbyLease.acquire().held == false)

        // The writer dies (no more renewals); the standby takes over after the lease expires and
        // keeps the lease (and its token) from then on.
        let takeover = try await Failover.takeOver(lease: standbyLease, follower: follower, timeout: .seconds(120))
        let grant = takeover.grant
        let keeper = WriterLeaseKeeper(
            lease: standbyLease, logger: Ledgers.logger("keeper"), ledgerPath: standbyPath, term: grant.record.term) { _ in }
        let keeping = Task { try await keeper.run() }
        #expect(grant.held && grant.record.term == term)
        #expect(takeover.markerPosition.rawValue == handedOver.position.rawValue + 1)
        #expect(try LedgerRole.read(at: standbyPath) == .writer(shard: "s1", term: term))
        follower.close()
        let markerEvent = try #require(try replica.log.storedEvent(at: takeover.markerPosition))
        #expect(TermMarker.decode(markerEvent) == TermMarker(shard: "s1", term: term, holder: "standby"))
        await replica.close()
        let standby = try Ledgers.open(standbyPath, worker: true)
        try await standby.waitForResidualTasks()
        let standbyShipper = try shipper(standby.log, cluster)
        try await Ledgers.share(standby, round: 1)
        try await standby.waitForResidualTasks()
        let shipped = try await standbyShipper.shipAvailable()
        let head = try standby.log.head()
        #expect(shipped.shippedPosition == head.position.rawValue)

        // The deposed writer appends locally and tries to ship: fenced by the marker; it records
        // itself deposed (naming the newer term) and refuses local writes from then on.
        try await Ledgers.append(writer.log, count: 1)
        do {
            try await writerShipper.shipAvailable()
            Issue.record("the deposed writer shipped")
        } catch {
            #expect(error.code == .fenced)
            #expect(error.message.contains("Term \(term)"))
        }
        #expect(writerShipper.statistics.fenced)
        #expect(try LedgerRole.read(at: writer.log.configuration.path) == .deposed(shard: "s1", term: 0, newerTerm: term))
        await #expect(throws: LedgerError.self) { try await Ledgers.append(writer.log, count: 1) }

        // One history: the stream is the standby's log, gapless, its prefix the writer's up to the handover.
        let connection = try await NATSConnection.connect(servers: cluster.servers, name: "check", wait: Ledgers.callTimeout)
        let state = try await connection.call("state") { c throws(ReplicationError) in try c.streamState(name: "LEDGER_s1") }
        #expect(state?.lastSequence == head.position.rawValue && state?.messages == head.position.rawValue)
        connection.close()
        #expect(try standby.log.verifyChain().isValid)
        let before = try writer.log.storedEvents(after: .start, limit: Int(handedOver.position.rawValue))
        #expect(try standby.log.storedEvents(after: .start, limit: Int(handedOver.position.rawValue)) == before)
        // Every accept's residual task was done once: six accepts, six zones created, none pending.
        let events = try standby.log.events(after: .start, limit: 10_000)
        let zonesCreated = events.filter { $0.eventType == "shareledger.events.v1.ParticipantZoneCreated" }
        let stats = try standby.statistics()
        #expect(zonesCreated.count == 6)
        #expect(stats.acceptedParticipants == 6 && stats.participantZones == 6 && stats.pendingResidualTasks == 0)
        keeping.cancel()
        _ = try? await keeping.value
        writerLease.close()
        standbyLease.close()
        await standby.close()
        await writer.close()
    }

    /// `shard assign` started while no node of the cluster answers (a cluster just started, or
    /// electing a leader) waits for it, as failover does, instead of failing at once.
    @Test func shardAssignWaitsForTheCluster() async throws {
        let cluster = try await Cluster()
        for node in 1...3 { cluster.kill9(node) }
        let urls = cluster.servers.joined(separator: ",")
        let (process, output) = try launch(
            ["shard", "assign", "iCloud.com.example.waits", "--to", "s1", "--nats", urls, "--json"], in: cluster.directory)
        // The command is running before any node is back: it cannot have assigned anything yet.
        for node in 1...3 { try await cluster.start(node) }
        let ended = await process.exit()
        let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
        #expect(ended.status == 0, "\(text)")
        let shown = try await run(["shard", "show", "iCloud.com.example.waits", "--nats", urls, "--json"], in: cluster.directory)
        #expect(shown.status == 0 && shown.json["shard"] as? String == "s1", "\(shown.json)")
    }

    /// The router sends a container's commands to its shard's writer (the one responder in the
    /// `writer` queue group) and its reads to a replica; it refuses cross-container commands before
    /// sending anything, and says "no writer" when nobody answers a shard.
    @Test func routerSendsCommandsToTheShardWriter() async throws {
        let cluster = try await Cluster()
        let writer = try Ledgers.open(cluster.directory.makeChild("writer"))
        let s1 = try ShardNames(shard: "s1")
        let log = writer.log
        let commands = ShardResponder(servers: cluster.servers, shard: s1, role: .writer, logger: Ledgers.logger("writer")) { container, body in
            // The application's command: here, append the body as an event in the container.
            let result = try? await log.append(
                [EventDraft(type: "example.Routed", payload: body)], to: "routed", metadata: CommandMetadata(container: container, actor: "_r"))
            return Array("\(result?.positions.upperBound.rawValue ?? 0)".utf8)
        }
        let reads = ShardResponder(servers: cluster.servers, shard: s1, role: .replica, logger: Ledgers.logger("replica")) { container, _ in
            Array("\(container) at \((try? log.head().position.rawValue) ?? 0)".utf8)
        }
        let running = [Task { try await commands.run() }, Task { try await reads.run() }]
        let router = try await ShardRouter.open(servers: cluster.servers)
        try await router.assign("iCloud.a", to: s1)
        try await router.assign("iCloud.b", to: try ShardNames(shard: "s2"))
        #expect(try await router.shard(of: "iCloud.a") == s1)
        // The responders subscribe asynchronously: retry "no writer" until they are up (bounded).
        let reply = try await untilAnswered { () async throws(ReplicationError) in
            try await router.command(Array("hello".utf8), containers: ["iCloud.a"])
        }
        #expect(String(decoding: reply, as: UTF8.self) == "1")
        #expect(try writer.log.event(at: 1)?.container == "iCloud.a")
        let read = try await untilAnswered { () async throws(ReplicationError) in try await router.read([], container: "iCloud.a") }
        #expect(String(decoding: read, as: UTF8.self) == "iCloud.a at 1")
        do {
            _ = try await router.command([], containers: ["iCloud.a", "iCloud.b"])
            Issue.record("a cross-container command was sent")
        } catch {
            #expect(error.code == .crossContainer)
        }
        do {
            _ = try await router.command([], containers: ["iCloud.b"])
            Issue.record("shard s2 has no writer, yet a command was answered")
        } catch {
            #expect(error.code == .noWriter)
        }
        do {
            _ = try await router.command([], containers: ["iCloud.unassigned"])
            Issue.record("an unassigned container was routed")
        } catch {
            #expect(error.code == .invalidArguments)
        }
        #expect(try writer.log.head().position == 1)
        for task in running { task.cancel() }
        for task in running { _ = try? await task.value }
        router.close()
        await writer.close()
    }

    /// The lease keeper renews while it holds the lease and reports the moment another writer has it.
    @Test func leaseKeeperReportsTheLoss() async throws {
        let cluster = try await Cluster()
        let shard = try ShardNames(shard: "keep")
        let leaseA = try await WriterLease.open(servers: cluster.servers, shard: shard, holder: "a", duration: .seconds(1))
        let leaseB = try await WriterLease.open(servers: cluster.servers, shard: shard, holder: "b", duration: .seconds(1))
        let lostTo = Mutex<String?>(nil)
        let keeper = WriterLeaseKeeper(lease: leaseA, logger: Ledgers.logger("keeper")) { record in
            lostTo.withLock { $0 = record?.holder ?? "?" }
        }
        let keeping = Task { try await keeper.run() }
        try await until("the keeper holds the lease") { keeper.isHeld }
        #expect(try await leaseB.acquire().held == false)
        // A's lease ends (as if its renewals came too late) and B takes it: the keeper reports the loss.
        #expect(try await leaseA.release())
        #expect(try await leaseB.acquire().held)
        try await keeping.value
        #expect(lostTo.withLock { $0 } == "b")
        #expect(!keeper.isHeld)
        leaseA.close()
        leaseB.close()
    }

    /// `replicate`, `follow` and `stats --nats` from the command line, with --json, and a refusal.
    @Test func commandLine() async throws {
        let cluster = try await Cluster()
        let primaryPath = cluster.directory.makeChild("primary")
        let primary = try Ledgers.open(primaryPath)
        let url = try #require(try await Ledgers.share(primary, round: 0).first)
        let head = try primary.log.head().position.rawValue
        await primary.close()
        let urls = cluster.servers.joined(separator: ",")
        // Only a shard's writer ships: `replicate` refuses a standalone ledger (it holds no lease).
        let standalone = try await run(
            ["replicate", "--path", primaryPath, "--nats", urls, "--shard", "cli", "--once", "--json"], in: cluster.directory)
        #expect(standalone.status == 1)
        #expect((standalone.json["error"] as? [String: Any])?["name"] as? String == "notWriter")
        let reopened = try Ledgers.open(primaryPath)
        let shipped = try await shipper(reopened.log, cluster, shard: "cli").shipAvailable()
        #expect(shipped.shippedPosition == head)
        await reopened.close()
        let replicaPath = cluster.directory.child("replica")
        let followed = try await runRetryingTimeouts(
            ["follow", "--path", replicaPath, "--nats", urls, "--stream", "LEDGER_cli", "--once", "--json"], in: cluster.directory)
        #expect(followed.status == 0, "\(followed.json)")
        #expect(followed.json["appliedPosition"] as? Int == Int(head))
        #expect(try LedgerRole.read(at: replicaPath) == .replica(shard: "cli"))
        // A replica takes no writes: a logged fetch is refused with the replica's role named, and
        // its head stays the primary's (no fork).
        let fetched = try await run(
            ["fetch", "--path", replicaPath, url.absoluteString, "--as", "_g0x0", "--container", Ledgers.container, "--json"],
            in: cluster.directory)
        #expect(fetched.status == 1)
        let fetchError = fetched.json["error"] as? [String: Any]
        #expect(fetchError?["name"] as? String == "notWriter")
        #expect((fetchError?["message"] as? String)?.contains("replica of shard cli") == true)
        let replicaLedger = try Ledgers.open(replicaPath)
        #expect(try replicaLedger.log.head().position.rawValue == head)
        await replicaLedger.close()
        let stats = try await run(["stats", "--path", primaryPath, "--nats", urls, "--shard", "cli", "--json"], in: cluster.directory)
        let replication = stats.json["replication"] as? [String: Any]
        #expect(replication?["streamPosition"] as? Int == Int(head) && replication?["lagPositions"] as? Int == 0)
        let refused = try await run(["follow", "--path", replicaPath, "--nats", urls, "--stream", "OTHER", "--once", "--json"], in: cluster.directory)
        #expect(refused.status == 1)
        #expect((refused.json["error"] as? [String: Any])?["name"] as? String == "invalidArguments")

        // --replication replicated: the command is done once the stream acknowledged its events;
        // without a reachable cluster it fails (exit 1) though committed locally.
        let writerPath = cluster.directory.child("acknowledged")
        let simulated = try await run(
            ["simulate", "--path", writerPath, "--actions", "400", "--durability", "unsafeNoSync", "--replication", "replicated",
             "--nats", urls, "--shard", "ack", "--json"], in: cluster.directory)
        #expect(simulated.status == 0)
        let through = try #require(simulated.json["replicatedThrough"] as? Int)
        #expect(UInt64(through) == (try await streamLast(cluster, "LEDGER_ack").last))
        let unreachable = try await run(
            ["simulate", "--path", writerPath, "--actions", "400", "--replication", "replicated", "--nats", "nats://127.0.0.1:1",
             "--replication-timeout", "1", "--json"], in: cluster.directory)
        #expect(unreachable.status == 1)
        #expect((unreachable.json["error"] as? [String: Any])?["name"] as? String == "timedOut")
        #expect(try await run(["simulate", "--path", writerPath, "--replication", "replicated"], in: cluster.directory).status == 64)
    }

    /// `share-ledger failover` as processes: the first takes the free lease and writes (the
    /// application appends from another process, the command ships and runs the residual tasks);
    /// it is killed with SIGKILL; a second, on a standby directory, takes the expired lease, catches
    /// up from the stream and continues: the stream gapless and equal to its log, the prefix the old
    /// writer's, every residual task done exactly once; SIGTERM stops it with exit 0.
    @Test func failoverCommandContinuesAfterTheWriterIsKilled() async throws {
        let cluster = try await Cluster()
        let urls = cluster.servers.joined(separator: ",")
        let writerPath = cluster.directory.makeChild("writer")
        let writer = try Ledgers.open(writerPath)
        try await Ledgers.share(writer, round: 0)
        func failover(_ path: String, _ holder: String) throws -> (process: ChildProcess, output: URL) {
            try launch(
                ["failover", "--path", path, "--nats", urls, "--shard", "fo", "--holder", holder, "--lease-seconds", "2", "--json"],
                in: cluster.directory)
        }
        func settled(_ ledger: ShareLedger) async throws -> Bool {
            let head = try ledger.log.head().position.rawValue
            let streamed = try await streamLast(cluster, "LEDGER_fo").last
            return try ledger.statistics().pendingResidualTasks == 0 && streamed == head
        }

        let (writerProcess, writerOutput) = try failover(writerPath, "writer")
        try await until("the writer took over") { jsonLines(writerOutput).contains { $0["event"] as? String == "tookOver" } }
        try await Ledgers.share(writer, round: 1)
        try await until("the writer shipped everything and did its tasks") { try await settled(writer) }
        let handedOver = try writer.log.head()
        writerProcess.send(SIGKILL)
        await writerProcess.exit()

        let standbyPath = cluster.directory.child("standby")
        let (standbyProcess, standbyOutput) = try failover(standbyPath, "standby")
        try await until("the standby took over") { jsonLines(standbyOutput).contains { $0["event"] as? String == "tookOver" } }
        let tookOver = jsonLines(standbyOutput)[0]
        #expect(tookOver["term"] as? Int == 2 && tookOver["tookOverAt"] as? Int == Int(handedOver.position.rawValue) + 1)
        let standby = try Ledgers.open(standbyPath)
        #expect(try standby.log.head().position.rawValue == handedOver.position.rawValue + 1)
        // The killed writer's directory takes no more writes: its lease token ran out.
        do {
            try await Ledgers.append(writer.log, count: 1)
            Issue.record("the killed writer's ledger took a write")
        } catch {
            #expect((error as? LedgerError)?.code == .notWriter)
        }
        try await Ledgers.share(standby, round: 2)
        try await until("the standby shipped everything and did its tasks") { try await settled(standby) }
        // While the standby writes, a third waits for the lease in vain; bad arguments are refused.
        let refused = try await run(
            ["failover", "--path", cluster.directory.child("third"), "--nats", urls, "--shard", "fo", "--holder", "third", "--timeout", "1", "--json"],
            in: cluster.directory)
        #expect(refused.status == 1 && (refused.json["error"] as? [String: Any])?["name"] as? String == "timedOut")
        #expect(try await run(["failover", "--path", standbyPath, "--nats", urls, "--lease-seconds", "0"], in: cluster.directory).status == 64)
        standbyProcess.send(SIGTERM)
        let stopped = await standbyProcess.exit()
        #expect(stopped.exited(0), "\(stopped.summary)")
        #expect(jsonLines(standbyOutput).last?["event"] as? String == "stopped")
        // A graceful stop ships everything and steps down to a replica.
        #expect(try LedgerRole.read(at: standbyPath) == .replica(shard: "fo"))

        let head = try standby.log.head()
        let stream = try await streamLast(cluster, "LEDGER_fo")
        #expect(stream.last == head.position.rawValue && stream.messages == head.position.rawValue)
        #expect(try standby.log.verifyChain().isValid)
        let prefix = Int(handedOver.position.rawValue)
        #expect(try standby.log.storedEvents(after: .start, limit: prefix) == writer.log.storedEvents(after: .start, limit: prefix))
        let stats = try standby.statistics()
        let zonesCreated = try standby.log.events(after: .start, limit: 10_000).filter {
            $0.eventType == "shareledger.events.v1.ParticipantZoneCreated"
        }
        #expect(zonesCreated.count == 9 && stats.acceptedParticipants == 9 && stats.participantZones == 9)
        await standby.close()
        await writer.close()
    }

    /// ``run(_:in:)``, once more when the command answered `timedOut`: what its message advises
    /// (a cluster on a loaded machine can take longer than a call's limit to place a new stream).
    func runRetryingTimeouts(_ arguments: [String], in directory: TemporaryDirectory) async throws -> (status: Int32, json: [String: Any]) {
        let first = try await run(arguments, in: directory)
        guard first.status != 0, (first.json["error"] as? [String: Any])?["name"] as? String == "timedOut" else { return first }
        return try await run(arguments, in: directory)
    }

    func run(_ arguments: [String], in directory: TemporaryDirectory) async throws -> (status: Int32, json: [String: Any]) {
        let (process, output) = try launch(arguments, in: directory)
        let ended = await process.exit()
        let data = try Data(contentsOf: output)
        let json = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:]
        return (ended.status, json)
    }

    /// Starts `share-ledger` with `arguments`, its standard output in a file; stop it by its PID.
    func launch(_ arguments: [String], in directory: TemporaryDirectory) throws -> (process: ChildProcess, output: URL) {
        let output = directory.url.appendingPathComponent("output-\(UUID().uuidString).json")
        let process = try ChildProcess(builtProduct("share-ledger"), arguments, stdout: output.path)
        return (process, output)
    }

    /// The JSON lines a command printed so far.
    func jsonLines(_ url: URL) -> [[String: Any]] {
        let text = (try? String(contentsOf: url, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// The last sequence of a shard's stream (0 when it has none).
    /// Ships what `shipper`'s ledger has; returns nil when that worked, else the refusal. A Timeout
    /// answer (JetStream electing a leader; the error says "retry") is asked again.
    func shipAnswer(_ shipper: LedgerShipper) async throws -> ReplicationError? {
        var answer: ReplicationError?
        try await until("the stream answers the shipper") {
            do {
                try await shipper.shipAvailable()
                answer = nil
                return true
            } catch let error as ReplicationError where error.code == .timedOut {
                return false
            } catch let error as ReplicationError {
                answer = error
                return true
            }
        }
        return answer
    }

    /// A call that times out (JetStream answers Timeout while the cluster elects a leader) is asked again.
    func streamLast(_ cluster: Cluster, _ stream: String) async throws -> (last: UInt64, messages: UInt64) {
        var answer: (last: UInt64, messages: UInt64)?
        try await until("stream \(stream) tells its state") {
            do {
                let connection = try await NATSConnection.connect(servers: cluster.servers, name: "check", wait: Ledgers.callTimeout)
                defer { connection.close() }
                let state = try await connection.call("state") { c throws(ReplicationError) in try c.streamState(name: stream) }
                answer = (state?.lastSequence ?? 0, state?.messages ?? 0)
                return true
            } catch let error as ReplicationError where error.code == .timedOut {
                return false
            }
        }
        return try #require(answer)
    }

    /// Waits until `condition` holds (looked at every 50 ms), failing after `seconds`.
    func until(_ what: String, seconds: Int = 120, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while try await !condition() {
            guard ContinuousClock.now < deadline else { throw ClusterError(text: "timed out waiting until \(what)") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// Runs `body` until it does not fail with "no writer" (at most 50 times, 100 ms apart).
    func untilAnswered(_ body: () async throws(ReplicationError) -> [UInt8]) async throws -> [UInt8] {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await body()
            } catch {
                guard error.code == .noWriter, attempt < 50 else { throw error }
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }
}

extension NATSConnection {
    /// ``call(_:_:)``'s error, or nil when it succeeded (a retry loop around a typed-throws call in an
    /// async test crashed the 6.3 compiler's ownership verifier).
    func result(_ what: String, _ body: @escaping @Sendable (NATSConnection) throws(ReplicationError) -> Void) async -> ReplicationError? {
        do throws(ReplicationError) {
            try await call(what, body)
            return nil
        } catch {
            return error
        }
    }
}
