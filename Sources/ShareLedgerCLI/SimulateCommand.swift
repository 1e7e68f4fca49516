import ArgumentParser
import Foundation
import Histogram
import ShareLedger

/// `share-ledger simulate`: a seeded, realistic sharing workload from concurrent clients, with
/// throughput, latency percentiles and a check that the ledger answered every call as intended.
struct SimulateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate",
        abstract: "Run a seeded sharing workload against a ledger (created when missing) and report on it.",
        discussion: """
            Concurrent clients each act for their own users in one of three containers: zones, records \
            with parent chains, hierarchy and zone-wide shares (private and public), invitations by \
            account, email, phone and by addresses no account has (then verified), metadata fetches \
            (single and batch, with and without root records), accepts, permission changes, removals, \
            leaving, share deletions, edits by participants, and the mistakes real clients make \
            (unknown URLs, accepting uninvited, stale change tags, sharing a shared record, a second \
            zone-wide share, ...). Each call has an intended outcome; the errors provoked on purpose \
            are counted by code, anything else is unexpected.

            The seed fixes every choice of the workload: runs with the same seed and options make the \
            same calls and get the same errors (share tokens and ids stay random). Residual tasks are \
            drained at the end.

            With --verbose, every failed call is logged to standard error with its error. Like every \
            log line and error message of ShareLedger, these carry no personal data: email addresses \
            and phone numbers appear only as placeholders such as <email #3f2a91c0d4e1>.

            Exit 0 when every outcome was as intended and nothing is left pending, 1 otherwise.
            """)

    @OptionGroup var ledger: LedgerOptions

    @Option(help: "Users, spread over the clients (each client needs at least 3).")
    var users = 200

    @Option(help: "API calls in all, registrations included (at least twice --users).")
    var actions = 20_000

    @Option(help: "Concurrent clients, each acting for its own users.")
    var clients = 8

    @Option(help: "The seed of the workload's choices.")
    var seed: UInt64 = 1

    @Option(help: "durable (default), relaxed or unsafeNoSync.")
    var durability: Durability = .durable

    @Option(
        name: .customLong("max-size-mib"),
        help: "The largest the ledger may grow to, in MiB (default: no limit); past it calls fail with storageFull.")
    var maxSizeMiB: Int?

    /// The containers the clients act in.
    static let containers = ["iCloud.com.example.sim.notes", "iCloud.com.example.sim.photos", "iCloud.com.example.sim.tasks"]

    func validate() throws {
        guard (1...256).contains(clients) else { throw ValidationError("--clients must be 1...256") }
        guard users >= 3 * clients else { throw ValidationError("--users must be at least 3 × --clients (\(3 * clients))") }
        guard users <= 100_000 else { throw ValidationError("--users must be at most 100,000") }
        guard actions >= 2 * users else { throw ValidationError("--actions must be at least 2 × --users (\(2 * users))") }
        if let maxSizeMiB, !(1...(1 << 20)).contains(maxSizeMiB) { throw ValidationError("--max-size-mib must be 1...1048576") }
    }

    @OptionGroup var replicationAck: ReplicationAckOptions

    func run() async throws {
        let sharing = try ledger.openSharing(create: true, durability: durability, maximumMapSize: maxSizeMiB.map { $0 << 20 })
        let json = ledger.json
        var summary: SimulationSummary
        do {
            summary = try await runReportingErrors(json: json) { () async throws(LedgerError) in
                defer { Output.endProgress() }
                return try await simulate(sharing)
            }
            summary.replicatedThrough = try await runReportingReplicationErrors(json: json) {
                try await replicationAck.acknowledge(sharing.log, logger: ledger.logger)
            }
        } catch {
            await sharing.close()
            throw error
        }
        await sharing.close()
        if json {
            Output.printJSON(summary)
        } else {
            printText(summary)
        }
        if !summary.isClean { throw ExitCode(1) }
    }

    private func simulate(_ sharing: ShareLedger) async throws(LedgerError) -> SimulationSummary {
        let before = try sharing.statistics()
        // Names carry the number of events before the run, so runs on the same ledger do not collide.
        let tag = "s\(before.events)"
        let progress = SimulationProgress()
        let clients = self.clients
        let (users, actions, seed) = (self.users, self.actions, self.seed)
        let started = ContinuousClock.now
        let reporter = Task {
            while !Task.isCancelled {
                let done = progress.value
                let seconds = (ContinuousClock.now - started).seconds
                Output.progress(
                    "simulate: \(Output.grouped(Double(done)))/\(Output.grouped(Double(actions))) actions "
                        + "(\(Output.grouped(Double(done) / max(seconds, 0.001)))/s)")
                try? await Task.sleep(for: .milliseconds(200))
            }
        }
        var tally = await withTaskGroup(of: SimulationTally.self) { group in
            for index in 0..<clients {
                let share = { (total: Int) in total / clients + (index < total % clients ? 1 : 0) }
                group.addTask {
                    var client = SimulationClient(
                        index: index, ledger: sharing, progress: progress, containers: Self.containers, tag: tag,
                        users: share(users), actions: share(actions), seed: seed)
                    return await client.run()
                }
            }
            var total = SimulationTally()
            for await tally in group { total.merge(tally) }
            return total
        }
        let seconds = (ContinuousClock.now - started).seconds
        reporter.cancel()
        let drainStarted = ContinuousClock.now
        // A run stopped early (a full disk, say) would only wait out the drain's time limit: the
        // tasks cannot be completed either. They stay pending, and the summary says so.
        let completed: Int
        if progress.stopped == nil {
            Output.progress("simulate: draining residual tasks")
            completed = try await ResidualTaskDrain.drain(sharing)
        } else {
            completed = 0
        }
        let drainSeconds = (ContinuousClock.now - drainStarted).seconds
        let after = try sharing.statistics()
        for difference in tally.expected.differences(before: before, after: after) {
            tally.mismatches += 1
            tally.problem("mismatch", difference)
        }
        let latency = tally.latency.mapValues { histogram in
            SimulationSummary.Latency(
                count: histogram.totalCount, p50: histogram.valueAtPercentile(50), p99: histogram.valueAtPercentile(99),
                max: histogram.max)
        }
        return SimulationSummary(
            seed: seed, clients: clients, users: users, containers: Self.containers, durability: durability.rawValue,
            actions: tally.actions, seconds: seconds, actionsPerSecond: Double(tally.actions) / max(seconds, 0.000_001),
            events: after.events - before.events, errorsByCode: tally.errorsByCode, intendedErrors: tally.intendedErrors,
            unexpectedErrors: tally.unexpectedErrors, unexpectedSuccesses: tally.unexpectedSuccesses,
            mismatches: tally.mismatches, problemsByKind: tally.problemsByKind, problems: tally.problems,
            stoppedEarly: progress.stopped, residualTasksCompleted: completed,
            drainSeconds: drainSeconds, pendingResidualTasks: after.pendingResidualTasks, shares: after.shares,
            participants: after.participants, acceptedParticipants: after.acceptedParticipants,
            participantZones: after.participantZones, latencyMicros: latency, example: tally.example)
    }

    private func printText(_ s: SimulationSummary) {
        print(
            "simulated \(Output.grouped(Double(s.actions))) actions from \(s.clients) clients for \(s.users) users in "
                + "\(String(format: "%.2f", s.seconds)) s: \(Output.grouped(s.actionsPerSecond)) actions/s (\(s.durability))")
        print(
            "events written \(Output.grouped(Double(s.events))); residual tasks completed \(s.residualTasksCompleted) "
                + "in \(String(format: "%.2f", s.drainSeconds)) s, pending \(s.pendingResidualTasks)")
        print(
            "ledger: \(s.shares) shares, \(s.participants) participants (\(s.acceptedParticipants) accepted), "
                + "\(s.participantZones) participant zones")
        print(
            "outcomes: \(s.intendedErrors) intended errors, \(s.unexpectedErrors) unexpected errors, "
                + "\(s.unexpectedSuccesses) unexpected successes, \(s.mismatches) mismatches")
        print("errors by code:")
        for (code, count) in s.errorsByCode.sorted(by: { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }) {
            print("  " + code.rightPad(32) + Output.grouped(Double(count)).leftPad(8))
        }
        print("latency (µs)".rightPad(34) + "count".leftPad(8) + "p50".leftPad(8) + "p99".leftPad(8) + "max".leftPad(9))
        for (kind, latency) in s.latencyMicros.sorted(by: { $0.key < $1.key }) {
            print(
                "  " + kind.rightPad(32) + Output.grouped(Double(latency.count)).leftPad(8)
                    + String(latency.p50).leftPad(8) + String(latency.p99).leftPad(8) + String(latency.max).leftPad(9))
        }
        if !s.problemsByKind.isEmpty {
            print("problems by kind:")
            for (kind, count) in s.problemsByKind.sorted(by: { $0.key < $1.key }) {
                print("  " + kind.rightPad(32) + Output.grouped(Double(count)).leftPad(8))
            }
        }
        if let through = s.replicatedThrough { print("replicated: the stream acknowledged through position \(through)") }
        for problem in s.problems { print("PROBLEM \(problem)") }
        if let reason = s.stoppedEarly { print("STOPPED EARLY: \(reason)") }
        if s.participantZones != s.acceptedParticipants {
            print("PROBLEM \(s.participantZones) participant zones for \(s.acceptedParticipants) accepted participants")
        }
        if let example = s.example {
            print("try: share-ledger fetch '\(example.url)' --as \(example.user) --container \(example.container) --path \(ledger.path)")
        }
    }
}

/// Where a simulation run (and `share-ledger accept`) waits for the residual tasks: the ledger's
/// in-process worker completes them as the run goes; this waits until none is due.
enum ResidualTaskDrain {
    /// Waits until no residual task is due; returns how many were still pending when it started.
    static func drain(_ ledger: ShareLedger) async throws(LedgerError) -> Int {
        let pending = try ledger.statistics().pendingResidualTasks
        try await ledger.waitForResidualTasks(timeout: .seconds(120))
        return pending - (try ledger.statistics().pendingResidualTasks)
    }

    /// Waits until no residual task is due; returns how many tasks were completed after `since` (the
    /// head before the command's change): the in-process worker may complete a task the change
    /// caused before this wait begins, so pending counts would miss it.
    static func drain(_ ledger: ShareLedger, since: LogPosition) async throws(LedgerError) -> Int {
        try await ledger.waitForResidualTasks(timeout: .seconds(120))
        var completed = 0
        var after = since
        while true {
            let chunk = try ledger.log.events(after: after, limit: 4_096)
            guard let last = chunk.last else { return completed }
            completed += chunk.filter {
                $0.eventType == "shareledger.events.v1.ParticipantZoneCreated"
                    || $0.eventType == "shareledger.events.v1.ParticipantZoneRemoved"
            }.count
            after = last.position
        }
    }
}
