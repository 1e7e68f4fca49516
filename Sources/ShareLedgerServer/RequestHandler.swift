import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import ShareLedger

/// Answers the `/database/1/...` requests: limits, the container, credentials, the endpoint, one log
/// line and the metrics of each.
struct RequestHandler: Sendable {
    let server: LedgerServer

    private static let environments: Set<String> = ["development", "production"]
    private static let keyIDHeader = HTTPField.Name("X-Apple-CloudKit-Request-KeyID")!
    private static let dateHeader = HTTPField.Name("X-Apple-CloudKit-Request-ISO8601Date")!
    private static let signatureHeader = HTTPField.Name("X-Apple-CloudKit-Request-SignatureV1")!

    /// The request's id as a UUID, for the `uuid` of an error dictionary (made only when one is
    /// answered): Hummingbird's (32 hex digits, in the log line's `hb.request.id`) with a UUID's
    /// dashes. It lives in the logger's metadata; a log handler that keeps no metadata
    /// (SwiftLogNoOpLogHandler) loses it, and `context.id` would then trap: make one instead.
    static func requestID(_ context: ServerRequestContext) -> String {
        uuidText(context.logger[metadataKey: "hb.request.id"].map { "\($0)" })
    }

    /// `hex` (32 hex digits) written as a UUID, or a new random UUID when it is not that.
    static func uuidText(_ hex: String?) -> String {
        guard let hex, hex.utf8.count == 32, hex.allSatisfy(\.isHexDigit) else {
            return UUID().uuidString.lowercased()
        }
        let digits = Array(hex.lowercased())
        var out = ""
        for (index, digit) in digits.enumerated() {
            if [8, 12, 16, 20].contains(index) { out.append("-") }
            out.append(digit)
        }
        return out
    }

    func handle(_ request: Request, context: ServerRequestContext, path: DatabasePath) async -> Response {
        let start = ContinuousClock.now
        var endpointName = "unknown"
        var items = 0
        var credentialID: String?
        let container = path.container
        let status: Int
        let body: JSONValue
        do {
            let subpath = path.subpath
            guard let endpoint = Endpoints.all[subpath] else {
                throw WireError(.notFound, "there is no endpoint \(subpath.prefix(64)) under /database/1/", status: 404)
            }
            endpointName = subpath
            guard endpoint.methods.contains(request.method.rawValue) else {
                throw WireError(
                    .badRequest, "\(subpath) takes \(endpoint.methods.sorted().joined(separator: " or "))", status: 405)
            }
            let environment = path.environment
            guard Self.environments.contains(environment) else {
                throw WireError(.notFound, "the environment must be development or production")
            }
            guard let database = DatabaseRequest.Database(rawValue: path.database) else {
                throw WireError(.notFound, "the database must be public, private or shared")
            }
            server.credentials.refresh(logger: server.logger)
            guard server.credentials.knows(container: container) else {
                throw WireError(.notFound, "unknown container: the server has no API token for it")
            }
            let bytes = try await collectBody(request)
            let query = request.uri.queryParameters
            let signature = request.headers[Self.keyIDHeader].map { keyID in
                RequestAuthenticator.Signature(
                    keyID: keyID, date: request.headers[Self.dateHeader] ?? "", signature: request.headers[Self.signatureHeader] ?? "")
            }
            let authenticator = RequestAuthenticator(
                credentials: server.credentials, signatureWindow: server.configuration.signatureWindow,
                signInURL: server.configuration.signInURL, replayGuard: server.replayGuard)
            let caller = try authenticator.authenticate(
                container: container, environment: environment, database: database.rawValue,
                apiToken: query["ckAPIToken"].map(String.init),
                webAuthToken: query["ckWebAuthToken"].map(String.init), signature: signature, subpath: request.uri.path,
                body: bytes, now: Date())
            credentialID = caller.credentialID
            try Self.refuseForgotten(caller, container: container, ledger: server.ledger)
            let json = bytes.isEmpty && request.method == .get ? JSONValue.object([:]) : try JSONValue.parse(bytes)
            _ = try json.object("the request body")
            let databaseRequest = DatabaseRequest(
                container: server.ledger.container(container, userRecordName: caller.userRecordName), environment: environment,
                database: database, caller: caller, body: json, maxItems: server.configuration.maxItemsPerRequest,
                shareURLHost: server.ledger.configuration.shareURLHost)
            if let hook = server.testHooks.beforeEndpoint { await hook(subpath) }
            body = try await endpoint.handler(databaseRequest)
            items = Self.itemCount(json)
            status = 200
        } catch let error as WireError {
            status = error.status
            body = error.dictionary(uuid: Self.requestID(context))
        } catch {
            status = 500
            body = WireError(.internalError, "the request failed").dictionary(uuid: Self.requestID(context))
        }
        let elapsed = ContinuousClock.now - start
        server.metrics.recordRequest(endpoint: endpointName, status: status, items: items, duration: elapsed)
        let level: Logger.Level = status >= 500 ? .error : .info
        // The line's metadata is built only when the line is written.
        guard context.logger.logLevel <= level else { return Self.response(status, body, context: context) }
        var metadata: Logger.Metadata = [
            "http.method": "\(request.method.rawValue)", "endpoint": "\(endpointName)", "http.status": "\(status)",
            "items": "\(items)",
            "duration_ms":
                "\(Double(elapsed.components.attoseconds / 1_000_000_000_000) / 1_000 + Double(elapsed.components.seconds) * 1_000)",
        ]
        if server.credentials.knows(container: container) { metadata["container"] = "\(container)" }
        if let credentialID { metadata["credential"] = "\(credentialID)" }
        context.logger.log(level: level, status >= 500 ? "request failed" : "request", metadata: metadata)
        return Self.response(status, body, context: context)
    }

    /// The answer; after a 413 it ends the connection: `Connection: close`, and the server's side of
    /// the connection is shut once the answer is written, so that a client still sending the body
    /// it was refused sees the answer and the end of the stream instead of a send that blocks. The
    /// server goes on reading (and dropping) what the client sends until it closes its side.
    static func response(_ status: Int, _ body: JSONValue, context: ServerRequestContext) -> Response {
        guard status == 413 else { return LedgerServer.json(status, body) }
        let bytes = body.bytes
        var headers = HTTPFields()
        headers[.contentType] = "application/json; charset=utf-8"
        headers[.connection] = "close"
        let channel = context.channel
        return Response(
            status: HTTPResponse.Status(code: status), headers: headers,
            body: ResponseBody(contentLength: bytes.count) { writer in
                try await writer.write(ByteBuffer(bytes: bytes))
                try await writer.finish(nil)
                // The output closes after the writes before it are flushed.
                channel.close(mode: .output, promise: nil)
            })
    }

    /// A credential that names a forgotten user (`ShareLedger.forget(user:in:requestedBy:)`, in this
    /// process or another) no longer signs in: checked on every request, so that it stops at once.
    static func refuseForgotten(_ caller: Caller, container: String, ledger: ShareLedger) throws(WireError) {
        let forgotten: Bool
        do {
            forgotten = try ledger.isForgotten(user: caller.userRecordName, in: container)
        } catch {
            throw WireError(error)
        }
        guard !forgotten else {
            throw WireError(
                .authenticationFailed, "the user this credential names was forgotten (their personal data is erased); "
                    + "it no longer signs in")
        }
    }

    /// The body, at most the configured limit (else HTTP 413, before reading more than the limit).
    private func collectBody(_ request: Request) async throws(WireError) -> [UInt8] {
        let limit = server.configuration.maxBodyBytes
        let tooLarge = WireError(.badRequest, "the request body is larger than \(limit) bytes; split the request", status: 413)
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > limit { throw tooLarge }
        do {
            var buffer = try await request.body.collect(upTo: limit)
            return buffer.readBytes(length: buffer.readableBytes) ?? []
        } catch {
            throw tooLarge
        }
    }

    /// The items a request carries (for the log line and the batch-size metric).
    static func itemCount(_ body: JSONValue) -> Int {
        for key in ["shortGUIDs", "records", "operations", "users", "lookupInfos", "zones"] {
            if case .array(let items)? = body[key] { return items.count }
        }
        return 0
    }

    func readiness() -> Response {
        guard server.ready.isReady else {
            return LedgerServer.json(503, ["status": "starting or shutting down"])
        }
        do {
            _ = try server.ledger.log.head()
            return LedgerServer.json(200, ["status": "ready"])
        } catch {
            return LedgerServer.json(503, ["status": "the ledger cannot be read"])
        }
    }

    func metricsPage() -> Response {
        guard let page = server.metrics.page(ledger: server.ledger) else {
            return LedgerServer.json(404, WireError(.notFound, "metrics are off").dictionary(uuid: nil))
        }
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: page)))
    }
}
