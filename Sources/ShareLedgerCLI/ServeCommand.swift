import ArgumentParser
import Foundation
import Logging
import Metrics
import Prometheus
import ServiceLifecycle
import ShareLedger
import ShareLedgerReplication
import ShareLedgerServer
import UnixSignals

/// `share-ledger serve`: the ledger as an HTTP service in CloudKit Web Services' shape, until
/// SIGTERM/SIGINT (graceful: requests in flight finish, then the ledger closes).
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve the ledger over HTTP in CloudKit Web Services' shape.",
        discussion: """
            Endpoints under /database/1/{container}/{development|production}/{public|private|shared}/: \
            records/resolve, records/accept, records/lookup, records/query, records/modify, zones/list, zones/lookup, \
            zones/modify, users/caller, users/current, users/lookup/email; and /healthz, /readyz, /metrics, /openapi.yaml. \
            Requests need a container's API token and a user's web auth token (`share-ledger token`), or a \
            server-to-server signature. Runs the residual-task worker in-process. Stops on SIGTERM or SIGINT \
            after answering the requests in flight.

            With --shard S --nats URLS (the same command on every node of the shard, each with its own --path \
            and a copy of the credentials file): the node stands by as a replica that follows the shard's \
            stream and answers reads; one node takes the writer lease and writes (ships every commit, runs \
            the residual-task worker). A write that reaches a replica (records/modify, zones/modify, \
            records/accept, records/resolve, which logs the fetch) is forwarded to the writer over NATS and \
            answered with the writer's answer; while no node holds the lease it is answered TRY_AGAIN_LATER. \
            Requests for containers not assigned to S (share-ledger shard assign) are refused. When the writer \
            dies, a replica takes over after the lease (--lease-seconds) expires.
            """)

    @OptionGroup var ledger: LedgerOptions

    @Option(help: "The address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "The port to listen on (0 picks a free one; the log line and --json say which).")
    var port = 8080

    @Option(name: .customLong("max-body-bytes"), help: "The largest request body accepted (HTTP 413 above).")
    var maxBodyBytes = 2 * 1024 * 1024

    @Option(name: .customLong("max-items"), help: "The most items in one request.")
    var maxItems = 400

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel = "info"

    @Option(help: "Run as a member of this shard (with --nats): one node writes, the others are replicas that forward writes to it.")
    var shard: String?

    @Option(help: "NATS servers of the shard, comma-separated (nats://127.0.0.1:4222,nats://127.0.0.1:4223).")
    var nats: String?

    @Option(help: "With --shard: this node's name in the writer lease (default: host name and process id).")
    var holder: String?

    @Option(help: "With --shard: how long the writer lease lasts unless renewed, in seconds (a dead writer is replaced after it).")
    var leaseSeconds = 5.0

    @Option(help: "With --shard: replicas of the stream and the lease bucket when they are created (3 for a 3-node cluster).")
    var replicas = 3

    func validate() throws {
        if !(0...65_535).contains(port) { throw ValidationError("--port must be 0 to 65535") }
        if maxBodyBytes < 1_024 { throw ValidationError("--max-body-bytes must be 1024 or more") }
        if !(1...400).contains(maxItems) { throw ValidationError("--max-items must be 1 to 400") }
        if (shard == nil) != (nats == nil) { throw ValidationError("--shard and --nats go together") }
        if !(1...5).contains(replicas) { throw ValidationError("--replicas must be 1 to 5") }
        if !(leaseSeconds >= 0.2 && leaseSeconds <= 600) { throw ValidationError("--lease-seconds must be 0.2 to 600") }
        if let holder, holder.isEmpty || holder.utf8.count > 200 { throw ValidationError("--holder must be 1 to 200 bytes") }
        if Logger.Level(rawValue: logLevel) == nil {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
    }

    struct Listening: Encodable {
        var listening: String
        var port: Int
        var pid: Int32
    }

    /// What `serve --shard --json` prints at every change of the node's part in the shard.
    struct MemberLine: Encodable {
        /// `starting`, `standby`, `writer`, `deposed` or `stopped`.
        var shardMember: String
        var shard: String
        var holder: String
        var term: UInt64?
    }

    /// The shard membership of `serve --shard`: the member, the routing, the writer's answerer.
    struct Membership {
        var member: ShardMember
        var routing: ShardRouting
        var answerer: ForwardedRequestAnswerer
    }

    func membership(_ ledger: ShareLedger, logger: Logger) throws -> Membership? {
        guard let shard, let nats else { return nil }
        let options = try NATSOptions.parse(["--nats", nats, "--shard", shard])
        let names: (ShardNames, [String])
        do throws(ReplicationError) {
            names = (try options.names(), try options.servers())
        } catch {
            Output.failure(error, json: self.ledger.json)
            throw ExitCode(1)
        }
        let holder = self.holder ?? "\(ProcessInfo.processInfo.hostName)-\(getpid())"
        var configuration = ShardMember.Configuration(servers: names.1, shard: names.0, holder: holder, logger: logger)
        configuration.leaseDuration = .milliseconds(Int64(leaseSeconds * 1000))
        configuration.replicas = replicas
        let answerer = ForwardedRequestAnswerer(logger: logger)
        let json = self.ledger.json
        let member = ShardMember(
            ledger: ledger, configuration: configuration, commands: { container, body in await answerer.answer(container: container, body: body) },
            onChange: { state in
                guard json else { return }
                var line = MemberLine(shardMember: "starting", shard: names.0.shard, holder: holder)
                switch state {
                case .starting: line.shardMember = "starting"
                case .standby: line.shardMember = "standby"
                case .writer(let term):
                    line.shardMember = "writer"
                    line.term = term
                case .deposed: line.shardMember = "deposed"
                case .stopped: line.shardMember = "stopped"
                }
                Output.writeLine(Output.compactJSON(line) ?? "")
            })
        let routing = ShardRouting(servers: names.1, shard: names.0, logger: logger) { [member] in
            if case .writer = member.state { return true }
            return false
        }
        return Membership(member: member, routing: routing, answerer: answerer)
    }

    func run() async throws {
        let level = Logger.Level(rawValue: logLevel) ?? .info
        var logger = Logger(label: "share-ledger.serve") { label in StreamLogHandler.standardError(label: label) }
        logger.logLevel = level
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        // A credentials file that cannot be read stops the start here, with its name and what to do
        // (exit 1), instead of a server that refuses every request as "unknown container".
        let credentials = ServerCredentials(ledgerPath: ledger.path)
        _ = try reporting(json: ledger.json) { () throws(ServerError) in try credentials.loadForServing() }
        let shareLedger: ShareLedger
        do {
            var configuration = ShareLedger.Configuration(path: ledger.path, createIfMissing: true, logger: logger)
            // A shard member runs the worker only while it writes.
            configuration.residualTaskWorker = shard == nil ? ResidualTaskWorker.Configuration(logger: logger) : nil
            shareLedger = try ShareLedger.open(configuration)
        } catch {
            Output.failure(error, json: ledger.json)
            throw Output.exitCode(unreadable: error)
        }
        let json = ledger.json
        let host = self.host
        let membership: Membership?
        do {
            membership = try self.membership(shareLedger, logger: logger)
        } catch {
            await shareLedger.close()
            throw error
        }
        var server = LedgerServer(
            ledger: shareLedger, credentials: credentials,
            configuration: .init(host: host, port: port, maxBodyBytes: maxBodyBytes, maxItemsPerRequest: maxItems),
            logger: logger, metrics: registry,
            onServerRunning: { [answerer = membership?.answerer] port in
                answerer?.listening(host: host, port: port)
                if json {
                    Output.writeLine(Output.compactJSON(Listening(listening: "http://\(host):\(port)", port: port, pid: getpid())) ?? "")
                }
            })
        server.routing = membership?.routing
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [.init(service: server)]
        if let membership { services.append(.init(service: membership.member)) }
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        func stop() async {
            membership?.routing.close()
            await membership?.answerer.shutdown()
            await shareLedger.close()
        }
        do {
            try await group.run()
        } catch {
            logger.error(
                "share-ledger serve stopped on an error", metadata: ["error": "\(String(describing: error).prefix(200))"])
            await stop()
            throw ExitCode(1)
        }
        await stop()
        logger.info("share-ledger serve: stopped; the ledger is closed")
    }
}
