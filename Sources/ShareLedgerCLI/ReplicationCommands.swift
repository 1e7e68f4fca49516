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
        } catch where error.code == .notWriter {
            throw ReplicationError(
                error.code, "not acknowledged as replicated (this ledger's head is position \(head); nothing of it is "
                    + "acknowledged while this ledger may not write): " + error.message)
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
        abstract: "Ship a shard writer's committed events to the shard's NATS JetStream stream, position for position.",
        discussion: """
            Only for a directory that is its shard's writer (failover runs its own shipper; a \
            standalone ledger is refused, as it holds no lease); each publish checks the writer's \
            lease token and term. Creates the stream when missing (file storage, --replicas replicas, deletes and purges \
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
            // Only a shard's writer ships: a standalone ledger holds no lease, and shipping it would
            // make a second writer beside the lease holder.
            if case .standalone = try LedgerRole.read(at: ledger.path) {
                await log.close()
                throw ReplicationError(
                    .notWriter, "this ledger is standalone: only a shard's writer ships, under its lease; run share-ledger "
                        + "failover on it (it takes the lease, publishes its term marker and ships)")
            }
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

extension FollowCommand {
    /// Records the directory at `path` as a replica of `shard`; refuses a writer's or a deposed
    /// writer's directory (retire or re-join it first) and another shard's.
    static func becomeReplica(path: String, shard: ShardNames) async throws {
        let role = try LedgerRole.read(at: path)
        switch role {
        case .standalone, .replica(shard.shard):
            try LedgerRole.replica(shard: shard.shard).write(at: path)
        case .writer:
            throw ReplicationError(
                .notWriter, "this ledger is the \(role): it does not follow; stop its failover first (it steps down to a replica)")
        case .deposed:
            throw ReplicationError(
                .fenced, "this ledger is a \(role): its unshipped events are not the stream's; re-join it (share-ledger "
                    + "rejoin) or follow into a fresh directory")
        case .replica:
            throw ReplicationError(.invalidArguments, "this ledger is a \(role), not of shard \(shard.shard)")
        }
    }
}

/// `share-ledger rejoin`: a deposed writer becomes a replica again, when its log is a prefix of the stream.
struct RejoinCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rejoin",
        abstract: "Make a deposed writer (or any shard member) a replica again, if its log is a prefix of the shard's stream.",
        discussion: """
            Compares the ledger's last event with the stream's event at the same position: equal (the \
            ledger holds nothing the stream lacks), the directory is recorded as a replica of the \
            shard and can follow or stand by again; otherwise it exits 1 (diverged), naming the \
            position, and the directory is left deposed: move it away and follow into a fresh one.
            """)

    @OptionGroup var ledger: LedgerOptions
    @OptionGroup var natsOptions: NATSOptions

    func run() async throws {
        let log = try ledger.open(create: false, readOnly: true)
        let report: Failover.Rejoined
        do {
            report = try await runReportingReplicationErrors(json: ledger.json) { () async throws -> Failover.Rejoined in
                try await Failover.rejoin(log: log, servers: try natsOptions.servers(), shard: try natsOptions.names())
            }
        } catch {
            await log.close()
            throw error
        }
        await log.close()
        if ledger.json {
            Output.printJSON(report)
        } else {
            print("rejoined shard \(report.shard) as a replica at position \(report.headPosition) (stream at \(report.streamPosition))")
        }
    }
}

/// `share-ledger follow`: a read replica that applies a shard's stream into its own ledger.
struct FollowCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "follow",
        abstract: "Apply a shard's stream into a replica ledger (--path), verifying the chain and projecting read models.",
        discussion: """
            The replica (created when missing; its directory recorded as a replica of the shard) holds \
            the same events, byte for byte, and the same read models as the primary at its head; the \
            read commands (history, audit, verify, stats) work on it. It refuses every write, a \
            logged metadata fetch (fetch, accept) included, with notWriter: send those to the shard's \
            writer. Follows until SIGTERM or SIGINT; with --once, applies up to the stream's last \
            sequence as it is at the start, then exits.
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
            do {
                try await Self.becomeReplica(path: ledger.path, shard: try natsOptions.names())
            } catch {
                await replica.close()
                throw error
            }
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

/// `share-ledger shard`: the shard map (container → shard) in the NATS key-value bucket `shareledger_shards`.
struct ShardCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "shard",
        abstract: "Read or set which shard holds a container (the shard map on NATS).",
        subcommands: [Assign.self, Show.self])

    /// Options of both subcommands.
    struct Common: ParsableArguments {
        @Option(name: .long, help: "NATS servers, comma-separated.")
        var nats: String

        @Argument(help: "The container, e.g. iCloud.com.example.notes.")
        var container: String

        @Flag(help: "Print JSON.")
        var json = false

        func servers() throws -> [String] { try NATSOptions.parse(["--nats", nats]).servers() }
    }

    /// What both print.
    struct Report: Encodable {
        var container: String
        var shard: String
    }

    static func print(_ report: Report, json: Bool) {
        if json { Output.printJSON(report) } else { Swift.print("\(report.container) → shard \(report.shard)") }
    }

    /// `shard assign CONTAINER --to S`: before the container's first command (moving one is not supported).
    struct Assign: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Assign a container to a shard, before its first command (moving a container between shards is not supported).")

        @OptionGroup var common: Common

        @Option(help: "The shard.")
        var to: String

        func run() async throws {
            let report = try await runReportingReplicationErrors(json: common.json) { () async throws -> Report in
                let shard = try ShardNames(shard: to)
                let servers = try common.servers()
                // Opening the bucket is retried through a leader election (a cluster just started,
                // or a node restarting), as failover does.
                let router = try await Failover.retrying(until: ContinuousClock.now + .seconds(30)) { () throws(ReplicationError) in
                    try await ShardRouter.open(servers: servers)
                }
                defer { router.close() }
                try await router.assign(common.container, to: shard)
                return Report(container: common.container, shard: shard.shard)
            }
            ShardCommand.print(report, json: common.json)
        }
    }

    /// `shard show CONTAINER`.
    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the shard that holds a container.")

        @OptionGroup var common: Common

        func run() async throws {
            let report = try await runReportingReplicationErrors(json: common.json) { () async throws -> Report in
                let servers = try common.servers()
                // Opening the bucket is retried through a leader election (a cluster just started,
                // or a node restarting), as failover does.
                let router = try await Failover.retrying(until: ContinuousClock.now + .seconds(30)) { () throws(ReplicationError) in
                    try await ShardRouter.open(servers: servers)
                }
                defer { router.close() }
                return Report(container: common.container, shard: try await router.shard(of: common.container).shard)
            }
            ShardCommand.print(report, json: common.json)
        }
    }
}
