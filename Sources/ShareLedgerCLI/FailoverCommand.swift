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
            Waits (at most --timeout seconds) until the writer lease of the shard is free or expired \
            and takes it by compare-and-set (of standbys racing, one wins), applies the stream into \
            the ledger at --path (created when missing) until it holds every event the stream holds, \
            then ships every commit to the stream, renews the lease every third of --lease-seconds and \
            runs the residual-task worker (tasks the old writer left pending are done once). Writers \
            of the application open the same --path meanwhile. Runs until SIGTERM or SIGINT (exit 0, \
            the lease released), or exits 1 when the lease stayed held, was lost, or another writer \
            fenced this one off. The first writer of a shard starts the same way: a lease nobody \
            holds is taken at once. With --json, one JSON object per line: "tookOver", then "stopped".
            """)

    @OptionGroup var ledger: LedgerOptions
    @OptionGroup var natsOptions: NATSOptions

    @Option(help: "This writer's name in the lease (default: host name and process id).")
    var holder: String?

    @Option(help: "How long the lease lasts unless renewed, in seconds (a dead writer is replaced after it).")
    var leaseSeconds = 5.0

    @Option(help: "Seconds to wait for the lease and the catch-up at most.")
    var timeout = 60

    @Option(help: "Replicas of the stream and the lease bucket when they are created (3 for a 3-node cluster).")
    var replicas = 3

    func validate() throws {
        if !(1...5).contains(replicas) { throw ValidationError("--replicas must be 1 to 5") }
        if !(leaseSeconds >= 0.2 && leaseSeconds <= 600) { throw ValidationError("--lease-seconds must be 0.2 to 600") }
        if !(1...86_400).contains(timeout) { throw ValidationError("--timeout must be 1 to 86400 seconds") }
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
        let lease = try await WriterLease.open(
            servers: servers, shard: shard, holder: holder, duration: .milliseconds(Int64(leaseSeconds * 1000)), replicas: replicas)
        defer { lease.close() }
        let follower = LedgerFollower(ledger: sharing, configuration: FollowerConfiguration(servers: servers, shard: shard, logger: logger))
        let grant: WriterLease.Grant
        do {
            grant = try await Failover.takeOver(lease: lease, follower: follower, timeout: .seconds(timeout))
        } catch {
            follower.close()
            throw error
        }
        follower.close()
        var report = Report(
            event: "tookOver", shard: shard.shard, holder: holder, term: grant.record.term,
            tookOverAt: try sharing.log.head().position.rawValue)
        print(report: report)

        var configuration = ShipperConfiguration(servers: servers, shard: shard, logger: logger)
        configuration.replicas = replicas
        let shipper = LedgerShipper(log: sharing.log, configuration: configuration)
        defer { shipper.close() }
        let lost = Mutex<WriterLease.Record??>(nil)
        let keeper = WriterLeaseKeeper(lease: lease, logger: logger) { record in lost.withLock { $0 = .some(record) } }
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
                    + "; this process stopped writing: rebuild this ledger as a replica with share-ledger follow")
        }
        _ = try? await shipper.shipAvailable()  // what was committed before the signal, when NATS answers
        _ = try? await lease.release()  // the next writer need not wait for the lease to expire
        report.event = "stopped"
        report.shipper = shipper.statistics
        return report
    }

    /// Writes a line straight to standard output (unbuffered: a caller watching the output of this
    /// long-running command sees "tookOver" when it happens).
    private func print(report: Report) {
        var line: String
        if ledger.json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            guard let data = try? encoder.encode(report) else { return }
            line = String(decoding: data, as: UTF8.self)
        } else if report.event == "tookOver" {
            line = "took over shard \(report.shard) as \(report.holder) (term \(report.term)) at position \(report.tookOverAt); shipping"
        } else {
            let shipped = report.shipper
            line =
                "stopped writing shard \(report.shard): shipped through \(shipped?.shippedPosition ?? 0) "
                + "(\(shipped?.eventsShipped ?? 0) events), lease released"
        }
        line += "\n"
        FileHandle.standardOutput.write(Data(line.utf8))
    }
}
