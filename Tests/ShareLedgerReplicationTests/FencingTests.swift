import Foundation
import ShareLedger
import Synchronization
import TestSupport
import Testing

@testable import ShareLedgerReplication

/// Fencing by term, as an operator meets it: a writer whose failover process dies or is paused past
/// its lease is refused, and the new writer continues.
extension ReplicationTests {
    /// `simulate` as the application's client, on `path`, acknowledged as `replication`.
    func write(_ path: String, _ urls: String, shard: String, replicated: Bool, in directory: TemporaryDirectory) async throws
        -> (status: Int32, json: [String: Any])
    {
        try await run(
            ["simulate", "--path", path, "--users", "3", "--clients", "1", "--actions", "6", "--durability", "unsafeNoSync",
             "--replication", replicated ? "replicated" : "local", "--nats", urls, "--shard", shard, "--json"], in: directory)
    }

    /// The process that runs the command: `share-ledger` runs each command in a child of itself
    /// (its supervisor, which forwards SIGTERM and SIGINT but cannot forward SIGSTOP), so a pause
    /// or a crash of the command is a signal to that child.
    func commandProcess(of supervisor: pid_t) throws -> pid_t {
        let entries = try FileManager.default.contentsOfDirectory(atPath: "/proc")
        for entry in entries {
            guard let pid = pid_t(entry), let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { continue }
            // After "pid (name) ": state, then the parent's pid.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, pid_t(fields[1]) == supervisor { return pid }
        }
        throw ClusterError(text: "process \(supervisor) has no child")
    }

    /// `share-ledger failover` on `path` as `holder`, with a 2-second lease.
    func launchFailover(_ path: String, _ holder: String, shard: String, _ urls: String, in directory: TemporaryDirectory) throws
        -> (process: ChildProcess, output: URL)
    {
        try launch(
            ["failover", "--path", path, "--nats", urls, "--shard", shard, "--holder", holder, "--lease-seconds", "2", "--json"],
            in: directory)
    }

    /// Waits until the `failover` writing `output` took over: a state, however long a loaded machine
    /// makes it take. A process that exits instead fails the wait at once, with what it printed.
    func untilTookOver(_ process: ChildProcess, _ output: URL, _ who: String) async throws {
        try await until("\(who) took over", seconds: 300) {
            if jsonLines(output).contains(where: { $0["event"] as? String == "tookOver" }) { return true }
            guard process.isRunning else {
                throw ClusterError(
                    text: "\(who)'s failover exited before taking over: \((try? String(contentsOf: output, encoding: .utf8)) ?? "")")
            }
            return false
        }
    }

    /// A's `failover` once it took over, and one write on A acknowledged as replicated.
    func writerWithOneWrite(_ path: String, shard: String, _ urls: String, in directory: TemporaryDirectory) async throws
        -> (process: ChildProcess, output: URL)
    {
        let (process, output) = try launchFailover(path, "A", shard: shard, urls, in: directory)
        try await untilTookOver(process, output, "A")
        let first = try await write(path, urls, shard: shard, replicated: true, in: directory)
        #expect(first.status == 0, "\(first.json)")
        return (process, output)
    }

    func errorName(_ json: [String: Any]) -> String? { (json["error"] as? [String: Any])?["name"] as? String }

    /// Whether `simulate` was refused by the ledger's role: its acknowledgement failed with
    /// `notWriter` (replicated), or every action was refused with it and nothing was written (local).
    func refusedAsNotWriter(_ json: [String: Any]) -> Bool {
        if errorName(json) == "notWriter" { return true }
        let refused = (json["errorsByCode"] as? [String: Any])?["notWriter"] as? Int ?? 0
        return refused > 0 && json["events"] as? Int == 0
    }

    /// The first reproduction: A's `failover` is killed with SIGKILL; B takes over (term 2) and
    /// publishes its term marker. A write on A, acknowledged `replicated`, is refused (its lease
    /// token ran out) and the stream does not move; B's writes continue and B keeps running.
    @Test func killedWritersLedgerIsRefusedAndTheNewWriterContinues() async throws {
        let cluster = try await Cluster()
        let urls = cluster.servers.joined(separator: ",")
        let pathA = cluster.directory.child("A")
        let pathB = cluster.directory.child("B")
        func failover(_ path: String, _ holder: String) throws -> (process: ChildProcess, output: URL) {
            try launchFailover(path, holder, shard: "X", urls, in: cluster.directory)
        }
        let (processA, _) = try await writerWithOneWrite(pathA, shard: "X", urls, in: cluster.directory)
        // kill -9 of the command (its supervisor then dies of the same signal).
        kill(try commandProcess(of: processA.pid), SIGKILL)
        await processA.exit()

        let (processB, outputB) = try failover(pathB, "B")
        try await untilTookOver(processB, outputB, "B")
        let tookOver = jsonLines(outputB)[0]
        #expect(tookOver["term"] as? Int == 2)
        let marker = try #require(tookOver["tookOverAt"] as? Int)
        #expect(try await streamLast(cluster, "LEDGER_X").last == UInt64(marker))

        // A's ledger refuses the write: nothing committed there, nothing published.
        let headA = try LedgerRole.read(at: pathA)
        #expect(headA == .writer(shard: "X", term: 1))
        let refused = try await write(pathA, urls, shard: "X", replicated: true, in: cluster.directory)
        #expect(refused.status == 1)
        #expect(refusedAsNotWriter(refused.json), "\(refused.json)")
        #expect(try await streamLast(cluster, "LEDGER_X").last == UInt64(marker))

        // B continues, acknowledged as replicated, and is still the writer.
        let continued = try await write(pathB, urls, shard: "X", replicated: true, in: cluster.directory)
        #expect(continued.status == 0, "\(continued.json)")
        let through = try #require(continued.json["replicatedThrough"] as? Int)
        #expect(through > marker)
        #expect(try await streamLast(cluster, "LEDGER_X").last == UInt64(through))
        #expect(jsonLines(outputB).count == 1)  // no "stopped": B runs on
        processB.send(SIGTERM)
        let stopped = await processB.exit()
        #expect(stopped.exited(0), "\(stopped.summary)")
    }

    /// The second reproduction: A's `failover` is stopped (SIGSTOP) for longer than its lease; B
    /// takes over; a local write on A is refused; A resumes (SIGCONT), finds its lease lost, records
    /// itself deposed and exits; A still refuses writes, and B continues.
    @Test func pausedWriterIsRefusedAfterItResumes() async throws {
        let cluster = try await Cluster()
        let urls = cluster.servers.joined(separator: ",")
        let pathA = cluster.directory.child("A")
        let pathB = cluster.directory.child("B")
        func failover(_ path: String, _ holder: String) throws -> (process: ChildProcess, output: URL) {
            try launchFailover(path, holder, shard: "Y", urls, in: cluster.directory)
        }
        let (processA, _) = try await writerWithOneWrite(pathA, shard: "Y", urls, in: cluster.directory)

        let commandA = try commandProcess(of: processA.pid)
        kill(commandA, SIGSTOP)
        let (processB, outputB) = try failover(pathB, "B")
        try await untilTookOver(processB, outputB, "B")
        let marker = try #require(jsonLines(outputB)[0]["tookOverAt"] as? Int)

        let local = try await write(pathA, urls, shard: "Y", replicated: false, in: cluster.directory)
        #expect(local.status == 1)
        #expect(refusedAsNotWriter(local.json), "\(local.json)")

        kill(commandA, SIGCONT)
        let endedA = await processA.exit()
        #expect(endedA.exited(1), "\(endedA.summary)")
        // Deposed in term 1 (naming term 2 when the keeper could read the lease, nil when its first
        // renewal after resuming failed and the lease had expired).
        let roleA = try LedgerRole.read(at: pathA)
        #expect(roleA == .deposed(shard: "Y", term: 1, newerTerm: 2) || roleA == .deposed(shard: "Y", term: 1, newerTerm: nil), "\(roleA)")
        let afterResume = try await write(pathA, urls, shard: "Y", replicated: true, in: cluster.directory)
        #expect(afterResume.status == 1)
        #expect(refusedAsNotWriter(afterResume.json), "\(afterResume.json)")
        #expect(try await streamLast(cluster, "LEDGER_Y").last == UInt64(marker))

        let continued = try await write(pathB, urls, shard: "Y", replicated: true, in: cluster.directory)
        #expect(continued.status == 0, "\(continued.json)")
        #expect((continued.json["replicatedThrough"] as? Int ?? 0) > marker)

        // The deposed writer's log is a prefix of the stream (it wrote nothing after its term): it
        // re-joins as a replica.
        let rejoined = try await run(["rejoin", "--path", pathA, "--nats", urls, "--shard", "Y", "--json"], in: cluster.directory)
        #expect(rejoined.status == 0, "\(rejoined.json)")
        #expect(try LedgerRole.read(at: pathA) == .replica(shard: "Y"))
        processB.send(SIGTERM)
        _ = await processB.exit()
    }
}

extension ReplicationTests {
    /// A takeover whose catch-up takes most of the lease (a loaded machine: 1.8 s of a 2 s lease
    /// pass between taking the lease and the term marker, on an injected monotonic clock) renews the
    /// lease and publishes its marker, instead of giving up with `leaseHeld` and leaving the shard
    /// without a writer while every standby does the same in turn.
    @Test func slowTakeoverRenewsItsLeaseAndBecomesTheWriter() async throws {
        let cluster = try await Cluster()
        let shard = try ShardNames(shard: "slow")
        let lease = try await WriterLease.open(servers: cluster.servers, shard: shard, holder: "n1", duration: .seconds(2))
        let path = cluster.directory.makeChild("n1")
        let ledger = try Ledgers.open(path)
        let follower = try follower(ledger, cluster, shard: "slow")
        let calls = Atomic<Int>(0)
        let start = LedgerRole.monotonicNanos()
        // The first reading is the one taken just before the lease; every later one is 1.8 s on.
        let takeover = try await Failover.takeOver(
            lease: lease, follower: follower, timeout: .seconds(120), streamReplicas: 3,
            monotonic: { calls.add(1, ordering: .relaxed).newValue == 1 ? start : start + 1_800_000_000 })
        #expect(takeover.grant.record.term == 1)
        #expect(try LedgerRole.read(at: path) == .writer(shard: "slow", term: 1))
        #expect(takeover.heldUntilNanos > start + 1_800_000_000 + 500_000_000)
        #expect(try await streamLast(cluster, "LEDGER_slow").last == takeover.markerPosition.rawValue)
        follower.close()
        _ = try? await lease.release()
        lease.close()
        await ledger.close()
    }

    /// A second lease instance with the same holder name (a restarted process, or one started beside
    /// a paused one) is another holder: it cannot take the live lease as a renewal, and takes it
    /// after it expired under a new term.
    @Test func sameHolderNameInAnotherProcessIsAnotherTenure() async throws {
        let cluster = try await Cluster()
        let shard = try ShardNames(shard: "tenure")
        let first = try await WriterLease.open(servers: cluster.servers, shard: shard, holder: "n1", duration: .seconds(1))
        let second = try await WriterLease.open(servers: cluster.servers, shard: shard, holder: "n1", duration: .seconds(1))
        let taken = try await first.acquire()
        #expect(taken.held && taken.record.term == 1)
        #expect(try await second.acquire().held == false)
        #expect(try await first.acquire().record.term == 1)  // the instance's own renewal keeps the term
        var retaken: WriterLease.Grant?
        try await until("the first instance's lease expired and the second took it") {
            let grant = try await second.acquire()
            if grant.held { retaken = grant }
            return grant.held
        }
        #expect(retaken?.record.term == 2)
        #expect(try await first.acquire().held == false)
        first.close()
        second.close()
    }
}

/// The role of a ledger directory, without NATS: what each role lets append, on an injected
/// monotonic clock.
@Suite struct LedgerRoleTests {
    final class Clock: Sendable {
        let now = Atomic<UInt64>(1_000_000_000)
        func advance(_ nanoseconds: UInt64) { now.add(nanoseconds, ordering: .relaxed) }
    }

    func open(_ path: String, clock: Clock, worker: Bool = false) throws -> ShareLedger {
        var configuration = ShareLedger.Configuration(path: path, durability: .unsafeNoSync)
        configuration.residualTaskWorker = worker ? ResidualTaskWorker.Configuration() : nil
        configuration.log.monotonicClock = { clock.now.load(ordering: .relaxed) }
        return try ShareLedger.open(configuration)
    }

    func append(_ ledger: ShareLedger) async throws(LedgerError) {
        try await ledger.log.append(
            [EventDraft(type: "example.Note", payload: [1])], to: "notes",
            metadata: CommandMetadata(container: Ledgers.container, actor: "_writer"))
    }

    func refusal(_ ledger: ShareLedger) async -> LedgerError? {
        do {
            try await append(ledger)
            return nil
        } catch {
            return error
        }
    }

    /// A writer appends while its lease token leaves more than the margin, and is refused from the
    /// moment it does not (or names another term), without anything written.
    @Test func writerAppendsOnlyWithinItsLease() async throws {
        let directory = TemporaryDirectory("writerLease")
        let path = directory.makeChild("ledger")
        let clock = Clock()
        let ledger = try open(path, clock: clock)
        try await append(ledger)  // standalone
        try LedgerRole.writer(shard: "s", term: 3).write(at: path)
        #expect(await refusal(ledger)?.code == .notWriter)  // no token
        let start = clock.now.load(ordering: .relaxed)
        try WriterLeaseToken(shard: "s", term: 3, holder: "w", heldUntilNanos: start + 3_000_000_000, marginNanos: 750_000_000)
            .write(at: path)
        try await append(ledger)
        clock.advance(2_200_000_000)  // 0.8 s left: more than the margin
        try await append(ledger)
        clock.advance(100_000_000)  // 0.7 s left: within the margin
        let late = await refusal(ledger)
        #expect(late?.code == .notWriter && late?.message.contains("safety margin") == true)
        try WriterLeaseToken(shard: "s", term: 2, holder: "w", heldUntilNanos: start + 60_000_000_000, marginNanos: 0).write(at: path)
        #expect(await refusal(ledger)?.code == .notWriter)  // a token of another term
        #expect(try ledger.log.head().position.rawValue == 3)
        await ledger.close()
    }

    /// A replica refuses every append — raw, a registration, a logged metadata fetch — naming its
    /// role, and its head does not move (no fork); it still applies replicated events. A deposed
    /// writer refuses too. Neither runs the residual-task worker.
    @Test func replicaAndDeposedRefuseEveryAppend() async throws {
        let directory = TemporaryDirectory("replicaRefuses")
        let clock = Clock()
        let primary = try open(directory.makeChild("primary"), clock: clock)
        let url = try #require(try await Ledgers.share(primary, round: 0, shares: 1).first)
        let replicaPath = directory.makeChild("replica")
        try LedgerRole.replica(shard: "s").write(at: replicaPath)
        let replica = try open(replicaPath, clock: clock, worker: true)
        try await replica.applyReplicated(try primary.log.storedEvents(after: .start, limit: 10_000))
        let head = try replica.log.head()
        #expect(head == (try primary.log.head()))

        let raw = await refusal(replica)
        #expect(raw?.code == .notWriter && raw?.message.contains("replica of shard s") == true)
        await #expect(throws: LedgerError.self) {
            _ = try await replica.registerUser("_new", in: Ledgers.container, emailAddress: "new@example.com")
        }
        let guest = replica.container(Ledgers.container, userRecordName: "_g0x0")
        do {
            _ = try await guest.shareMetadata(for: url)
            Issue.record("a metadata fetch on a replica was answered (and logged)")
        } catch {
            #expect(error.code == .notWriter)
        }
        #expect(try replica.log.head() == head)

        // New events of the primary still apply.
        try await append(primary)
        try await replica.applyReplicated(try primary.log.storedEvents(after: head.position, limit: 10))
        #expect(try replica.log.head() == (try primary.log.head()))

        try LedgerRole.deposed(shard: "s", term: 4, newerTerm: 5).write(at: replicaPath)
        let deposed = await refusal(replica)
        #expect(deposed?.code == .notWriter && deposed?.message.contains("deposed") == true)
        await replica.close()
        await primary.close()
    }
}
