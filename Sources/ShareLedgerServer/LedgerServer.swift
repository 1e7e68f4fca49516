import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import Metrics
import NIOCore
import Prometheus
import ServiceLifecycle
import ShareLedger
import Synchronization

/// The ledger as an HTTP service in CloudKit Web Services' shape (`share-ledger serve`).
///
/// Endpoints under `/database/1/{container}/{environment}/{database}/`: `records/resolve`,
/// `records/accept`, `records/lookup`, `records/query`, `records/modify`, `zones/list`, `zones/lookup`, `zones/modify`,
/// `users/caller`, `users/current`, `users/lookup/email`; plus `/healthz`, `/readyz`, `/metrics` (Prometheus),
/// `/openapi.yaml` (the OpenAPI 3.1 document of all of them) and the operators' report pages under `/reports`
/// (an operator token only). Credentials are checked against
/// ``ServerCredentials``. Each request acts through the ledger's public API as the caller's user, so
/// the log records and audits it exactly as an in-process call.
///
/// A `Service`: run it in a `ServiceGroup`; graceful shutdown stops accepting connections, lets the
/// requests in flight finish, and returns. The caller closes the ledger afterwards.
///
/// ```swift
/// let server = LedgerServer(ledger: ledger, credentials: ServerCredentials(ledgerPath: path),
///                           configuration: .init(host: "127.0.0.1", port: 8080), logger: logger)
/// try await ServiceGroup(services: [server], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger).run()
/// await ledger.close()
/// ```
public struct LedgerServer: Service {
    /// Where the server listens and the limits it keeps.
    public struct Configuration: Sendable {
        /// The address to bind (`127.0.0.1` by default; put a reverse proxy in front for TLS).
        public var host: String
        /// The port; 0 picks a free one (``LedgerServer/init(ledger:credentials:configuration:logger:metrics:onServerRunning:)``
        /// reports it).
        public var port: Int
        /// The largest request body accepted; larger ones get HTTP 413 (default 2 MiB, CloudKit's request limit).
        public var maxBodyBytes: Int
        /// The most items (shortGUIDs, records, operations, users) in one request (default 400, CloudKit's).
        public var maxItemsPerRequest: Int
        /// How far a server-to-server request's date may be from the server's clock (default 300 s).
        public var signatureWindow: TimeInterval
        /// A connection that sends nothing for this long is closed (default 60 s), a half-sent request's included.
        public var idleTimeout: Duration
        /// The most open connections; more wait to be accepted (default 4,096).
        public var maxConnections: Int
        /// Where `AUTHENTICATION_REQUIRED` answers send the user to sign in (`redirectURL`).
        public var signInURL: String

        /// A configuration with the defaults above.
        public init(
            host: String = "127.0.0.1", port: Int = 8080, maxBodyBytes: Int = 2 * 1024 * 1024, maxItemsPerRequest: Int = 400,
            signatureWindow: TimeInterval = 300, idleTimeout: Duration = .seconds(60), maxConnections: Int = 4_096,
            signInURL: String = "https://share.localhost/sign-in"
        ) {
            self.host = host
            self.port = port
            self.maxBodyBytes = maxBodyBytes
            self.maxItemsPerRequest = maxItemsPerRequest
            self.signatureWindow = signatureWindow
            self.idleTimeout = idleTimeout
            self.maxConnections = maxConnections
            self.signInURL = signInURL
        }
    }

    let ledger: ShareLedger
    let credentials: ServerCredentials
    let configuration: Configuration
    let logger: Logger
    let metrics: ServerMetrics
    let onServerRunning: @Sendable (Int) async -> Void
    let ready = ReadyFlag()
    /// The server-to-server signatures seen within the signature window.
    let replayGuard = SignatureReplayGuard()
    /// Where tests hold the server to make an interleaving happen (none by default).
    var testHooks = TestHooks()
    /// Where the `/database/1/...` requests this server should not answer itself go (a member of a
    /// shard sends writes to the shard's writer); nil (the default) answers every request here.
    public var routing: (any RequestRouting)?

    /// Points where a test can hold the server, so that it waits on state instead of time.
    struct TestHooks: Sendable {
        /// Awaited in each `/database/1/...` request after its credentials are checked and before its
        /// endpoint runs, with the endpoint's subpath.
        var beforeEndpoint: (@Sendable (String) async -> Void)?
        /// Called once graceful shutdown has begun (the server no longer reports ready).
        var shutdownBegan: (@Sendable () -> Void)?
    }

    /// A server for `ledger`.
    ///
    /// - Parameters:
    ///   - ledger: The open ledger it serves; the caller closes it after the server returns.
    ///   - credentials: The tokens and keys requests are checked against.
    ///   - configuration: Where it listens and the limits it keeps.
    ///   - logger: Where it logs: one line per request, never a request's content or a credential.
    ///   - metrics: The Prometheus registry `/metrics` shows; bootstrap swift-metrics with a
    ///     `PrometheusMetricsFactory` over the same registry for the per-endpoint counters and
    ///     latencies (the CLI does). `nil` serves no `/metrics`.
    ///   - onServerRunning: Called with the bound port once the server accepts connections.
    public init(
        ledger: ShareLedger, credentials: ServerCredentials, configuration: Configuration = Configuration(), logger: Logger,
        metrics: PrometheusCollectorRegistry? = nil, onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) {
        self.ledger = ledger
        self.credentials = credentials
        self.configuration = configuration
        self.logger = logger
        self.metrics = ServerMetrics(registry: metrics)
        self.onServerRunning = onServerRunning
    }

    /// Serves until graceful shutdown (or cancellation), then returns once the requests in flight are answered.
    ///
    /// - Throws: ``ServerError/Code/unreadableFile`` before it listens when the credentials file
    ///   exists but cannot be read (a missing file is logged at notice level: no credentials yet).
    public func run() async throws {
        switch try credentials.loadForServing() {
        case .missing:
            let message = "share-ledger serve: there is no credentials file, so no API tokens or server-to-server keys "
                + "are configured and every request is refused; make them with `share-ledger token create`"
            logger.notice("\(message)", metadata: ["file": "\(credentials.path)"])
        case .loaded(let count):
            logger.info("share-ledger serve: credentials read", metadata: ["file": "\(credentials.path)", "credentials": "\(count)"])
        }
        let router = Router(context: ServerRequestContext.self)
        let handler = RequestHandler(server: self)
        router.get("/healthz") { _, _ in Self.json(200, ["status": "ok"]) }
        router.get("/readyz") { _, _ in handler.readiness() }
        router.get("/metrics") { _, _ in handler.metricsPage() }
        let pages = OperatorPages(server: self)
        for (path, page) in OperatorPages.paths {
            router.get(RouterPath(path)) { request, context in await pages.respond(request, page: page, context: context) }
        }
        router.get("/openapi.yaml") { _, _ in
            var headers = HTTPFields()
            headers[.contentType] = "application/yaml"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: OpenAPIDocument.yaml)))
        }
        let timeout = configuration.idleTimeout.components
        let app = Application(
            responder: ServerResponder(handler: handler, others: router.buildResponder()),
            server: .http1OnEventLoop(configuration: .init(idleTimeout: .seconds(max(1, timeout.seconds)))),
            configuration: ApplicationConfiguration(
                address: .hostname(configuration.host, port: configuration.port), serverName: "share-ledger",
                availableConnectionsDelegate: MaximumAvailableConnections(configuration.maxConnections)),
            onServerRunning: { [ready, onServerRunning, logger] channel in
                ready.set(true)
                let port = channel.localAddress?.port ?? 0
                logger.info("share-ledger serve: listening", metadata: ["port": "\(port)"])
                await onServerRunning(port)
            },
            logger: logger)
        try await withGracefulShutdownHandler {
            try await app.run()
        } onGracefulShutdown: { [ready, logger, testHooks] in
            ready.set(false)
            logger.info("share-ledger serve: shutting down; answering the requests in flight")
            testHooks.shutdownBegan?()
        }
    }

    static func json(_ status: Int, _ body: JSONValue, headers extra: HTTPFields = [:]) -> Response {
        var headers = extra
        headers[.contentType] = "application/json; charset=utf-8"
        return Response(
            status: HTTPResponse.Status(code: status), headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body.bytes)))
    }
}

/// Answers `/database/1/...` requests without the router, and the others (`/healthz`, `/metrics`,
/// ...) through it. The router matched `/database/1/:container/:environment/:database/**` by
/// walking its trie and filling a parameter dictionary for every request: about 3% of the server's
/// CPU per `records/resolve` under `bench --only http` (docs/benchmarks.md). ``DatabasePath``
/// matches exactly the paths and methods that route did; everything else goes to the router as before.
struct ServerResponder: HTTPResponder {
    typealias Context = ServerRequestContext
    let handler: RequestHandler
    let others: RouterResponder<ServerRequestContext>

    func respond(to request: Request, context: ServerRequestContext) async throws -> Response {
        switch request.method {
        case .get, .post, .put, .delete, .patch:
            if let path = DatabasePath(request.uri.path) {
                if let routing = handler.server.routing, let answer = await routed(request, path: path, routing: routing) {
                    return answer
                }
                return await handler.handle(request, context: context, path: path)
            }
        default: break
        }
        return try await others.respond(to: request, context: context)
    }
}

/// Hummingbird's basic request context plus the request's channel, so that an answer can end the
/// connection (after a 413, whose body the client may still be sending).
struct ServerRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    /// The connection the request came on.
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
    }
}

/// A `/database/1/{container}/{environment}/{database}/{subpath}` path, split as Hummingbird's
/// router split it for the route `/database/1/:container/:environment/:database/**`: components
/// between `/`s with empty ones left out, compared as they are (percent escapes included, case
/// sensitive), at least one component after the database, and the subpath those components joined
/// by single `/`s.
struct DatabasePath: Equatable {
    var container: String
    var environment: String
    var database: String
    var subpath: String
}

extension DatabasePath {
    /// The parts of `path`, or nil when the route did not match it.
    init?(_ path: String) {
        // An ASCII path without empty components past a leading `/` (no `//`, no trailing `/`)
        // splits into the five leading components and the subpath as it stands, on bytes instead of
        // Characters (for ASCII the same split); any other path is split as the route did.
        let utf8 = path.utf8
        guard Self.isPlain(utf8) else {
            self.init(splitting: path)
            return
        }
        let slash = UInt8(ascii: "/")
        let parts = utf8.split(separator: slash, maxSplits: 5, omittingEmptySubsequences: true)
        guard parts.count == 6, parts[0].elementsEqual("database".utf8), parts[1].elementsEqual("1".utf8) else {
            return nil
        }
        func text(_ part: Substring.UTF8View) -> String { String(path[part.startIndex..<part.endIndex]) }
        self.init(container: text(parts[2]), environment: text(parts[3]), database: text(parts[4]), subpath: text(parts[5]))
    }

    /// Whether `utf8` is all ASCII, has no `//` and does not end with `/`.
    private static func isPlain(_ utf8: String.UTF8View) -> Bool {
        var previousSlash = false
        for byte in utf8 {
            let slash = byte == UInt8(ascii: "/")
            if (slash && previousSlash) || byte >= 0x80 { return false }
            previousSlash = slash
        }
        return !previousSlash
    }

    /// The route's own split: components between `/`s, empty ones left out.
    init?(splitting path: String) {
        let components = path.split(separator: "/", omittingEmptySubsequences: true)
        guard components.count >= 6, components[0] == "database", components[1] == "1" else { return nil }
        container = String(components[2])
        environment = String(components[3])
        database = String(components[4])
        subpath = components.count == 6 ? String(components[5]) : components[5...].joined(separator: "/")
    }
}

/// Whether the server takes requests (for `/readyz`): set once it listens, cleared at graceful shutdown.
final class ReadyFlag: Sendable {
    private let value = Mutex(false)
    var isReady: Bool { value.withLock { $0 } }
    func set(_ ready: Bool) { value.withLock { $0 = ready } }
}
