import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Prometheus
import ServiceLifecycle
import ShareLedger
@testable import ShareLedgerServer
import Synchronization
import TestSupport
import Testing

/// A real server on a free loopback port over a fresh ledger (its own temporary directory), with
/// two registered users and their tokens, and an HTTP client to call it.
final class ServerHarness: Sendable {
    static let container = "iCloud.com.example.notes"

    let directory: TemporaryDirectory
    let ledger: ShareLedger
    let credentials: ServerCredentials
    let port: Int
    let apiToken: String
    /// Web auth tokens by user record name (`_alice`, `_bob`).
    let webTokens: [String: String]
    /// The ids of the web auth tokens, by user record name.
    let webTokenIDs: [String: String]
    let client: HTTPClient
    /// Every log line the server wrote (message and metadata).
    let logLines: LogCapture
    private let group: ServiceGroup

    private init(
        directory: TemporaryDirectory, ledger: ShareLedger, credentials: ServerCredentials, port: Int, apiToken: String,
        webTokens: [String: String], webTokenIDs: [String: String], logLines: LogCapture, group: ServiceGroup
    ) {
        self.directory = directory
        self.ledger = ledger
        self.credentials = credentials
        self.port = port
        self.apiToken = apiToken
        self.webTokens = webTokens
        self.webTokenIDs = webTokenIDs
        self.logLines = logLines
        self.group = group
        self.client = HTTPClient(eventLoopGroupProvider: .singleton)
    }

    /// Runs `body` against a started server, then shuts the server down gracefully and closes the ledger.
    /// - Parameters:
    ///   - keepingLogs: false runs the server with `SwiftLogNoOpLogHandler` (which keeps no
    ///     metadata, not even the request id).
    ///   - hooks: Where the test holds the server (see ``LedgerServer/TestHooks``).
    static func run(
        _ label: String = #function, keepingLogs: Bool = true, hooks: LedgerServer.TestHooks = .init(),
        _ body: @Sendable (ServerHarness) async throws -> Void
    ) async throws {
        let directory = TemporaryDirectory(label)
        var configuration = ShareLedger.Configuration(path: directory.path, createIfMissing: true)
        // The worker looks for due tasks often, so that accepted zones appear quickly.
        configuration.residualTaskWorker = ResidualTaskWorker.Configuration(pollInterval: .milliseconds(20))
        // Open: tests that need several requests in one batch close it (`log.setWriterPaused`).
        configuration.writerProbe = WriterGate()
        let ledger = try ShareLedger.open(configuration)
        try await ledger.registerUser("_alice", in: container, emailAddress: "alice@example.com")
        try await ledger.registerUser("_bob", in: container, emailAddress: "bob@example.com")
        let credentials = ServerCredentials(ledgerPath: directory.path)
        let api = try credentials.createAPIToken(container: container)
        var webTokens: [String: String] = [:]
        var webTokenIDs: [String: String] = [:]
        for user in ["_alice", "_bob"] {
            let issued = try credentials.createWebAuthToken(
                container: container, userRecordName: user, expiresAt: Date().addingTimeInterval(3600))
            webTokens[user] = issued.token
            webTokenIDs[user] = issued.entry.id
        }
        let capture = LogCapture()
        let logger = Logger(label: "test.server") { _ -> any LogHandler in
            keepingLogs ? capture.handler() : SwiftLogNoOpLogHandler()
        }
        let (ports, portContinuation) = AsyncStream.makeStream(of: Int.self)
        var server = LedgerServer(
            ledger: ledger, credentials: credentials,
            configuration: .init(host: "127.0.0.1", port: 0, maxBodyBytes: 64 * 1024), logger: logger,
            metrics: PrometheusCollectorRegistry(),
            onServerRunning: { port in portContinuation.yield(port) })
        server.testHooks = hooks
        let group = ServiceGroup(services: [server], logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            var iterator = ports.makeAsyncIterator()
            guard let port = await iterator.next() else { throw HarnessError(message: "the server did not start") }
            let harness = ServerHarness(
                directory: directory, ledger: ledger, credentials: credentials, port: port, apiToken: api.token,
                webTokens: webTokens, webTokenIDs: webTokenIDs, logLines: capture, group: group)
            do {
                try await body(harness)
            } catch {
                await group.triggerGracefulShutdown()
                try? await harness.client.shutdown()
                throw error
            }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            try await harness.client.shutdown()
        }
        await ledger.close()
    }

    /// Begins the server's graceful shutdown (as SIGTERM would) and returns without waiting for it.
    func shutdown() async {
        await group.triggerGracefulShutdown()
    }

    var baseURL: String { "http://127.0.0.1:\(port)" }

    /// A new server-to-server key of `_alice` in ``container``, registered: the key to sign with and
    /// its entry (whose `id` a signed request names).
    func aliceServerKey(allowingPrivateDatabases: Bool = false) throws -> (P256.Signing.PrivateKey, ServerCredentials.Entry) {
        let key = P256.Signing.PrivateKey()
        let entry = try credentials.registerServerKey(
            container: ServerHarness.container, userRecordName: "_alice", publicKeyPEM: key.publicKey.pemRepresentation,
            allowingPrivateDatabases: allowingPrivateDatabases)
        return (key, entry)
    }

    /// `/database/1/{container}/development/{database}/{subpath}` with the user's tokens.
    func url(
        _ subpath: String, database: String = "private", as user: String?, container: String = ServerHarness.container
    )
        -> String
    {
        var url = "\(baseURL)/database/1/\(container)/development/\(database)/\(subpath)?ckAPIToken=\(apiToken)"
        if let user, let token = webTokens[user] { url += "&ckWebAuthToken=\(token)" }
        return url
    }

    struct Reply: Sendable {
        var status: Int
        var body: [UInt8]
        var headers: [(String, String)]

        /// The body as a JSON object (an empty one when it is not).
        var json: [String: Any] {
            (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:]
        }

        var text: String { String(decoding: body, as: UTF8.self) }
    }

    func send(_ method: HTTPMethod, _ url: String, body: [UInt8]? = nil, headers: [(String, String)] = []) async throws -> Reply {
        var request = HTTPClientRequest(url: url)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        let response = try await client.execute(request, timeout: .seconds(30))
        let collected = try await response.body.collect(upTo: 16 * 1024 * 1024)
        return Reply(
            status: Int(response.status.code), body: Array(collected.readableBytesView),
            headers: response.headers.map { ($0.name, $0.value) })
    }

    /// `records/modify` in zone `zone` of the private database with one operation (`create`,
    /// `update`, `forceDelete`, ...) on `record`.
    func modify(_ operationType: String, _ record: [String: Any], in zone: String, as user: String) async throws -> Reply {
        try await post("records/modify", as: user, ["zoneID": ["zoneName": zone], "operations": [["operationType": operationType, "record": record]]])
    }

    func post(_ subpath: String, database: String = "private", as user: String?, _ body: Any) async throws -> Reply {
        let bytes = try JSONSerialization.data(withJSONObject: body)
        return try await send(.POST, url(subpath, database: database, as: user), body: Array(bytes))
    }
}

struct HarnessError: Error {
    var message: String
}

/// A log handler that keeps every line (message and metadata as text) for the tests to read.
final class LogCapture: Sendable {
    private let lines = Mutex<[String]>([])

    var all: [String] { lines.withLock { $0 } }

    func handler() -> some LogHandler { Handler(capture: self) }

    fileprivate func append(_ line: String) { lines.withLock { $0.append(line) } }

    private struct Handler: LogHandler {
        let capture: LogCapture
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let all = metadata.merging(event.metadata ?? [:]) { _, new in new }
            let pairs = all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            capture.append("\(event.level) \(event.message) \(pairs)")
        }
    }
}
