import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import ShareLedger
import ShareLedgerReplication
import UnixSignals

/// Options of the commands that talk to NATS.
struct NATSOptions: ParsableArguments {
    @Option(name: .long, help: "NATS servers, comma-separated (nats://127.0.0.1:4222,nats://127.0.0.1:4223).")
    var nats: String

    @Option(name: .long, help: "The shard: its stream is LEDGER_<shard>.")
    var shard: String?

    @Option(name: .long, help: "The stream (LEDGER_<shard>); the same as --shard <shard>.")
    var stream: String?

    func names() throws(ReplicationError) -> ShardNames {
        if let stream {
            guard stream.hasPrefix("LEDGER_") else {
                throw ReplicationError(.invalidArguments, "a ledger's stream is named LEDGER_<shard>; \(stream.prefix(80)) is not")
            }
            let fromStream = String(stream.dropFirst("LEDGER_".count))
            if let shard, shard != fromStream {
                throw ReplicationError(.invalidArguments, "--shard \(shard.prefix(80)) and --stream \(stream.prefix(80)) disagree")
            }
            return try ShardNames(shard: fromStream)
        }
        return try ShardNames(shard: shard ?? "default")
    }

    func servers() throws(ReplicationError) -> [String] {
        try nats.split(separator: ",").map { text throws(ReplicationError) -> String in
            let trimmed = text.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty, trimmed.utf8.count <= 512 else {
                throw ReplicationError(.invalidArguments, "--nats takes URLs separated by commas, e.g. nats://127.0.0.1:4222")
            }
            return trimmed.contains("://") ? trimmed : "nats://\(trimmed)"
        }
    }
}

/// `--replication local|replicated` on the commands that write (accept, simulate): when the command
/// counts as done (docs/operations.md, "Durability across machines").
struct ReplicationAckOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "local: done at the LMDB commit (a shipper sends it on later); replicated: done only once the shard's "
                + "stream acknowledged it (needs --nats).", valueName: "local|replicated"))
    var replication: ReplicationDurability = .local

    @Option(name: .customLong("nats"), help: "With --replication replicated: the NATS servers, comma-separated.")
    var nats: String?

    @Option(name: .customLong("shard"), help: "With --replication replicated: the shard (its stream is LEDGER_<shard>).")
    var shard: String = "default"

    @Option(help: "With --replication replicated: seconds to wait for the stream's acknowledgement at most.")
    var replicationTimeout = 10

    func validate() throws {
        if replication == .replicated && nats == nil { throw ValidationError("--replication replicated needs --nats URL[,URL…]") }
        if !(1...3_600).contains(replicationTimeout) { throw ValidationError("--replication-timeout must be 1 to 3600 seconds") }
    }

    /// With `replicated`: ships what `log` has committed and returns the position the stream
    /// acknowledged (the head: the command's events and everything before them); nil with `local`.
    func acknowledge(_ log: EventLog, logger: Logger) async throws -> UInt64? {
        guard replication == .replicated, let nats else { return nil }
        let options = try NATSOptions.parse(["--nats", nats, "--shard", shard])
        let head = try log.head().position
        let shipper = LedgerShipper(
            log: log, configuration: ShipperConfiguration(servers: try options.servers(), shard: try options.names(), logger: logger))
        defer { shipper.close() }
        do {
            try await shipper.shipThrough(head, timeout: .seconds(replicationTimeout))
        } catch {
            throw ReplicationError(
                error.code, "the command is committed in this ledger (through position \(head)) but not acknowledged as replicated: "
                    + error.message)
        }
        return head.rawValue
    }
}

extension ReplicationDurability: ExpressibleByArgument {}

extension Output {
    /// Prints a replication failure: as JSON on standard output with --json, as text on standard error otherwise.
    static func failure(_ error: ReplicationError, json: Bool) {
        if json {
            printJSON(ErrorBody(error: .init(code: error.code.rawValue, name: error.code.name, message: error.message)))
        } else {
            FileHandle.standardError.write(Data("share-ledger: \(error.message) (\(error.code.name))\n".utf8))
        }
    }
}

/// Runs `body`, turning ledger and replication errors into exit code 1 with a clear message.
func runReportingReplicationErrors<R>(json: Bool, _ body: () async throws -> R) async throws -> R {
    do {
        return try await runReportingErrors(json: json, body)
    } catch let error as ReplicationError {
        Output.failure(error, json: json)
        throw ExitCode(1)
    }
}

/// `share-ledger replicate`: ships the ledger's committed events to its shard's JetStream stream.
struct ReplicateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replicate",
        abstract: "Ship every committed event to the shard's NATS JetStream stream, position for position.",
        discussion: """
            Creates the stream when missing (file storage, --replicas replicas, deletes and purges \
            denied), resumes after the stream's last sequence once the stream's event there is checked \
            against the ledger's, then ships new commits as they happen until SIGTERM or SIGINT (with \
            --once: what is committed now, then exits). Exits 1 when another writer fenced this one off \
            or the stream and the ledger disagree (nothing is published then).
            """)

    @OptionGroup var ledger: LedgerOptions
    @OptionGroup var natsOptions: NATSOptions

    @Option(help: "Replicas of the stream when it is created (3 for a 3-node cluster).")
    var replicas = 3

    @Flag(help: "Ship what is committed now, then exit.")
    var once = false

    func validate() throws {
        if !(1...5).contains(replicas) { throw ValidationError("--replicas must be 1 to 5") }
    }

    func run() async throws {
        let log = try ledger.open(create: false, readOnly: true)
        let statistics = try await runReportingReplicationErrors(json: ledger.json) { () async throws -> ShipperStatistics in
            var configuration = ShipperConfiguration(servers: try natsOptions.servers(), shard: try natsOptions.names(), logger: ledger.logger)
            configuration.replicas = replicas
            let shipper = LedgerShipper(log: log, configuration: configuration)
            defer { shipper.close() }
            if once { return try await shipper.shipAvailable() }
            let group = ServiceGroup(
                configuration: ServiceGroupConfiguration(
                    services: [.init(service: shipper)], gracefulShutdownSignals: [.sigterm, .sigint], logger: ledger.logger))
            do {
                try await group.run()
            } catch let error as ReplicationError {
                await log.close()
                throw error
            }
            return shipper.statistics
        }
        await log.close()
        if ledger.json {
            Output.printJSON(statistics)
        } else {
            print(
                "shipped through \(statistics.shippedPosition) to \(statistics.stream) (\(statistics.eventsShipped) events now); "
                    + "head \(statistics.headPosition), lag \(statistics.lagPositions) positions")
        }
    }
}

/// `share-ledger follow`: a read replica that applies a shard's stream into its own ledger.
struct FollowCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "follow",
        abstract: "Apply a shard's stream into a replica ledger (--path), verifying the chain and projecting read models.",
        discussion: """
            The replica (created when missing) holds the same events, byte for byte, and the same read \
            models as the primary at its head; every read command (fetch, history, audit, stats) works \
            on it. Follows until SIGTERM or SIGINT; with --once, applies up to the stream's last \
            sequence as it is at the start, then exits. Send the replica no commands.
            """)

    @OptionGroup var ledger: LedgerOptions
    @OptionGroup var natsOptions: NATSOptions

    @Flag(help: "Catch up with the stream, then exit.")
    var once = false

    @Option(help: "With --once: seconds to catch up at most.")
    var timeout = 60

    func run() async throws {
        let replica = try ledger.openWithoutWorker(create: true)
        let statistics = try await runReportingReplicationErrors(json: ledger.json) { () async throws -> FollowerStatistics in
            let follower = LedgerFollower(
                ledger: replica,
                configuration: FollowerConfiguration(servers: try natsOptions.servers(), shard: try natsOptions.names(), logger: ledger.logger))
            defer { follower.close() }
            do {
                if once {
                    try await follower.catchUp(timeout: .seconds(max(1, timeout)))
                } else {
                    let group = ServiceGroup(
                        configuration: ServiceGroupConfiguration(
                            services: [.init(service: follower)], gracefulShutdownSignals: [.sigterm, .sigint],
                            logger: ledger.logger))
                    try await group.run()
                }
            } catch {
                await replica.close()
                throw error
            }
            return follower.statistics
        }
        await replica.close()
        if ledger.json {
            Output.printJSON(statistics)
        } else {
            print(
                "replica at \(statistics.appliedPosition) of \(statistics.stream) (stream at \(statistics.streamPosition)); "
                    + "\(statistics.eventsApplied) events applied now")
        }
    }
}
