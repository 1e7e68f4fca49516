import ArgumentParser
import Foundation
import Logging
import Metrics
import Prometheus
import ServiceLifecycle
import ShareLedger
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

    func validate() throws {
        if !(0...65_535).contains(port) { throw ValidationError("--port must be 0 to 65535") }
        if maxBodyBytes < 1_024 { throw ValidationError("--max-body-bytes must be 1024 or more") }
        if !(1...400).contains(maxItems) { throw ValidationError("--max-items must be 1 to 400") }
        if Logger.Level(rawValue: logLevel) == nil {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
    }

    struct Listening: Encodable {
        var listening: String
        var port: Int
        var pid: Int32
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
            configuration.residualTaskWorker = ResidualTaskWorker.Configuration(logger: logger)
            shareLedger = try ShareLedger.open(configuration)
        } catch {
            Output.failure(error, json: ledger.json)
            throw Output.exitCode(unreadable: error)
        }
        let json = ledger.json
        let host = self.host
        let server = LedgerServer(
            ledger: shareLedger, credentials: credentials,
            configuration: .init(host: host, port: port, maxBodyBytes: maxBodyBytes, maxItemsPerRequest: maxItems),
            logger: logger, metrics: registry,
            onServerRunning: { port in
                if json {
                    // Written unbuffered: whoever started the server reads this line through a pipe.
                    let encoder = JSONEncoder()
                    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
                    let line =
                        (try? encoder.encode(Listening(listening: "http://\(host):\(port)", port: port, pid: getpid()))) ?? Data()
                    FileHandle.standardOutput.write(line + Data("\n".utf8))
                }
            })
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: server)], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        do {
            try await group.run()
        } catch {
            logger.error(
                "share-ledger serve stopped on an error", metadata: ["error": "\(String(describing: error).prefix(200))"])
            await shareLedger.close()
            throw ExitCode(1)
        }
        await shareLedger.close()
        logger.info("share-ledger serve: stopped; the ledger is closed")
    }
}
