import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import ShareLedger
import ShareLedgerReplication
import Synchronization
import UnixSignals

/// `share-ledger failover`: a standby takes a shard's writer lease once it is free or expired,
/// catches up from the stream and then is the shard's writer: it ships, renews the lease and runs the
/// residual-task worker until SIGTERM or SIGINT, or until it is deposed.
struct FailoverCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "failover",
        abstract: "Take a shard's expired writer lease, catch up from its stream, then ship as its writer.",
        discussion: """
            Run the same command on every node of the shard. Records --path (created when missing) \
            as a replica of the shard, follows the stream while it waits (with --timeout, at most that many seconds) \
            until the writer lease is free or expired, takes it by compare-and-set (of standbys \
            racing, one wins; a new term), applies the rest of the stream, publishes a term marker \
            at the stream's head + 1 (an older writer's next publish fails) and records the \
            directory as the shard's writer. Then it ships every commit, renews the lease and the \
            lease token next to the ledger every third of --lease-seconds (appends of every process \
            on the directory commit only while the token leaves a quarter of the lease) and runs the \
            residual-task worker. The application writes to the same --path meanwhile. Runs until \
            SIGTERM or SIGINT (exit 0: shipped, stepped down to a replica, lease released), or exits \
            1 when the lease stayed held (timedOut), or was lost or a newer writer fenced this one \
            (the directory is then deposed and refuses writes until share-ledger rejoin). With \
            --json, one JSON object per line: "tookOver", then "stopped".
            """)

    @OptionGroup var ledger: LedgerOptions
    @OptionGroup var natsOptions: NATSOptions

    @Option(help: "This writer's name in the lease (default: host name and process id).")
    var holder: String?

    @Option(help: "How long the lease lasts unless renewed, in seconds (a dead writer is replaced after it).")
    var leaseSeconds = 5.0

    @Option(help: "Seconds to wait for the lease at most (default: no limit; a standby waits until it is needed).")
    var timeout: Int?

    @Option(help: "Replicas of the stream and the lease bucket when they are created (3 for a 3-node cluster).")
    var replicas = 3

    func validate() throws {
        if !(1...5).contains(replicas) { throw ValidationError("--replicas must be 1 to 5") }
        if !(leaseSeconds >= 0.2 && leaseSeconds <= 600) { throw ValidationError("--lease-seconds must be 0.2 to 600") }
        if let timeout, !(1...86_400).contains(timeout) { throw ValidationError("--timeout must be 1 to 86400 seconds") }
        if let holder, holder.isEmpty || holder.utf8.count > 200 { throw ValidationError("--holder must be 1 to 200 bytes") }
    }

    /// What `failover --json` prints, one line per step.
    struct Report: Encodable {
        /// `tookOver` (the lease is held and the ledger caught up: this process is the writer) or `stopped`.
        var event: String
        /// The shard.
        var shard: String
        /// The lease's holder (this process).
        var holder: String
        /// The lease's term (one more at every change of holder).
        var term: UInt64
        /// The ledger's head when it took over.
        var tookOverAt: UInt64
        /// The shipper's figures (with `stopped`).
        var shipper: ShipperStatistics?
    }

    func run() async throws {
        let sharing = try ledger.openWithoutWorker(create: true)
        let logger = ledger.logger
        let holder = self.holder ?? "\(ProcessInfo.processInfo.hostName)-\(getpid())"
        let report = try await runReportingReplicationErrors(json: ledger.json) { () async throws -> Report in
            do {
                return try await takeOverAndWrite(sharing, holder: holder, logger: logger)
            } catch {
                await sharing.close()
                throw error
            }
        }
        await sharing.close()
        print(report: report)
    }

    private func takeOverAndWrite(_ sharing: ShareLedger, holder: String, logger: Logger) async throws -> Report {
        let servers = try natsOptions.servers()
        let shard = try natsOptions.names()
        // Opening the lease bucket is retried through a leader election (a NATS node restarting).
        let lease = try await Failover.retrying(until: ContinuousClock.now + .seconds(60)) { () throws(ReplicationError) in
            try await WriterLease.open(
                servers: servers, shard: shard, holder: holder, duration: .milliseconds(Int64(leaseSeconds * 1000)), replicas: replicas)
        }
        defer { lease.close() }
        let follower = LedgerFollower(ledger: sharing, configuration: FollowerConfiguration(servers: servers, shard: shard, logger: logger))
        let takeover: Failover.Takeover
        do {
            // Without --timeout a standby waits as long as the writer lives (ten years, in effect).
            takeover = try await Failover.takeOver(
                lease: lease, follower: follower, timeout: .seconds(timeout ?? 315_360_000), streamReplicas: replicas)
        } catch {
            follower.close()
            throw error
        }
        follower.close()
        let grant = takeover.grant
        var report = Report(
            event: "tookOver", shard: shard.shard, holder: holder, term: grant.record.term,
            tookOverAt: takeover.markerPosition.rawValue)
        print(report: report)

        var configuration = ShipperConfiguration(servers: servers, shard: shard, logger: logger)
        configuration.replicas = replicas
        let shipper = LedgerShipper(log: sharing.log, configuration: configuration)
        defer { shipper.close() }
        let lost = Mutex<WriterLease.Record??>(nil)
        let path = sharing.log.configuration.path
        let term = grant.record.term
        let keeper = WriterLeaseKeeper(lease: lease, logger: logger, ledgerPath: path, term: term) { record in
            // The lease is gone (the keeper removed the token: appends stopped): this ledger is
            // deposed until an operator re-joins it as a replica.
            try? LedgerRole.deposed(shard: shard.shard, term: term, newerTerm: record?.term).write(at: path)
            lost.withLock { $0 = .some(record) }
        }
        let worker = ResidualTaskWorker(ledger: sharing, configuration: ResidualTaskWorker.Configuration(logger: logger))
        // The keeper returns when the lease is lost: that ends the group (the writer must stop).
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [
                    .init(service: keeper, successTerminationBehavior: .gracefullyShutdownGroup),
                    .init(service: shipper), .init(service: worker),
                ],
                gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
        if let record = lost.withLock({ $0 }) {
            throw ReplicationError(
                .leaseHeld, "the writer lease of shard \(shard.shard) was lost"
                    + (record.map { " to \($0.holder) (term \($0.term))" } ?? " (NATS unreachable until it expired)")
                    + "; this ledger stopped writing and is recorded as deposed: re-join it as a replica with share-ledger "
                    + "rejoin (or rebuild it with share-ledger follow)")
        }
        // A graceful stop: ship what was committed before the signal (when NATS answers and the
        // lease is still ours), then step down: the token goes (appends stop), the role becomes
        // replica (its log is a prefix of the stream's once shipped), the lease is released so the
        // next writer need not wait for it to expire.
        WriterLeaseToken.remove(at: path)
        var finalConfiguration = configuration
        finalConfiguration.checksRole = false  // the lease is still this process's; no append commits any more
        let finalShipper = LedgerShipper(log: sharing.log, configuration: finalConfiguration)
        defer { finalShipper.close() }
        let lastShipping = try? await finalShipper.shipAvailable()
        let shippedAll = lastShipping.map { $0.lagPositions == 0 } ?? false
        try? (shippedAll ? LedgerRole.replica(shard: shard.shard) : LedgerRole.deposed(shard: shard.shard, term: term, newerTerm: nil))
            .write(at: path)
        _ = try? await lease.release()
        report.event = "stopped"
        report.shipper = shipper.statistics
        return report
    }

    /// Writes a line straight to standard output (unbuffered: a caller watching the output of this
    /// long-running command sees "tookOver" when it happens).
    private func print(report: Report) {
        let line: String
        if ledger.json {
            guard let json = Output.compactJSON(report) else { return }
            line = json
        } else if report.event == "tookOver" {
            line = "took over shard \(report.shard) as \(report.holder) (term \(report.term)) at position \(report.tookOverAt); shipping"
        } else {
            let shipped = report.shipper
            line =
                "stopped writing shard \(report.shard): shipped through \(shipped?.shippedPosition ?? 0) "
                + "(\(shipped?.eventsShipped ?? 0) events), lease released"
        }
        Output.writeLine(line)
    }
}
