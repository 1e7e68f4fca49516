import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import ShareLedger
import ShareLedgerReplication
import ShareLedgerServer
import Synchronization

/// `serve --shard`: which requests a node answers itself, which go to the shard's writer, and which
/// it refuses. Every request's container must be assigned to this node's shard (`share-ledger shard
/// assign`); reads are answered here (a replica answers at the position it has applied); every other
/// request (a write, a logged fetch, an endpoint not known to be a read) goes to the shard's writer
/// over NATS request/reply unless this node is the writer. Only the writer answers such a request
/// itself, so a node that is still starting (its role not yet recorded) never writes one.
final class ShardRouting: RequestRouting {
    /// The endpoints that only read: answered by any node.
    static let reads: Set<String> = [
        "records/lookup", "records/query", "records/changes", "zones/list", "zones/lookup", "zones/changes", "users/caller",
        "users/current", "users/lookup/email", "users/discover",
    ]

    private let servers: [String]
    private let shard: ShardNames
    private let logger: Logger
    private let isWriter: @Sendable () -> Bool
    private let router = Mutex<ShardRouter?>(nil)
    /// Containers known to be in this shard (an assignment never changes).
    private let members = Mutex<Set<String>>([])

    init(servers: [String], shard: ShardNames, logger: Logger, isWriter: @escaping @Sendable () -> Bool) {
        self.servers = servers
        self.shard = shard
        self.logger = logger
        self.isWriter = isWriter
    }

    /// The router, connected on first use (and again after it failed).
    private func connected() async throws(ReplicationError) -> ShardRouter {
        if let router = router.withLock({ $0 }) { return router }
        let opened = try await ShardRouter.open(servers: servers, timeout: .seconds(10))
        let kept = router.withLock { slot in
            if let existing = slot { return existing }
            slot = opened
            return opened
        }
        if kept !== opened { opened.close() }
        return kept
    }

    private func dropRouter() {
        router.withLock { slot in
            slot?.close()
            slot = nil
        }
    }

    func route(container: String, subpath: String, method: String, forwarded: Bool) async -> RouteDecision {
        if !members.withLock({ $0.contains(container) }) {
            do {
                let owner = try await connected().shard(of: container)
                guard owner == shard else {
                    return .answer(
                        .error(
                            retry: false, "container \(container) belongs to shard \(owner.shard), not to this node's shard "
                                + "\(shard.shard): send its requests to a node of shard \(owner.shard) (there are no cross-shard requests)"))
                }
                _ = members.withLock { $0.insert(container) }
            } catch where error.code == .invalidArguments {
                return .answer(
                    .error(
                        retry: false, "container \(container.prefix(200)) is not assigned to shard \(shard.shard): assign it "
                            + "first (share-ledger shard assign --container ... --shard \(shard.shard) --nats ...)"))
            } catch {
                dropRouter()
                return .answer(.error(retry: true, "the shard map could not be read (\(error.code.name)); retry shortly"))
            }
        }
        if Self.reads.contains(subpath) || isWriter() { return .local }
        // A request another node forwarded here because this node held the lease: it has moved
        // since (or a client set the header itself). Never forwarded again, never written here.
        if forwarded {
            return .answer(
                .error(
                    retry: true, "this node is not the writer of shard \(shard.shard) now (the lease moved); nothing was "
                        + "written: retry"))
        }
        return .forward
    }

    func forward(_ request: ForwardedRequest, container: String) async -> ForwardedResponse {
        let reply: [UInt8]
        do {
            reply = try await connected().command(request.encoded, container: container, shard: shard)
        } catch where error.code == .noWriter {
            return .error(
                retry: true, "no node holds the writer lease of shard \(shard.shard) right now (a takeover is under way); "
                    + "nothing was written: retry shortly")
        } catch {
            dropRouter()
            logger.warning("forwarding a request to the writer failed", metadata: ["error": "\(error)"])
            return .error(
                retry: true, "the writer of shard \(shard.shard) did not answer (\(error.code.name)); the request may or "
                    + "may not have been applied: read before retrying it")
        }
        return ForwardedResponse(encoded: reply)
            ?? .error(retry: true, "the writer of shard \(shard.shard) sent an answer this node cannot read; retry")
    }

    func close() { dropRouter() }
}

/// On the shard's writer: answers a request a replica forwarded by sending it to this node's own
/// HTTP listener (marked forwarded: answered here, whatever this node's role has become), so it is
/// authenticated, logged and answered exactly as a request made to this node.
final class ForwardedRequestAnswerer: Sendable {
    private let client: HTTPClient
    private let base: Mutex<String?>
    private let logger: Logger

    init(logger: Logger) {
        client = HTTPClient(eventLoopGroupProvider: .singleton)
        base = Mutex(nil)
        self.logger = logger
    }

    /// Where the listener is, once it listens.
    func listening(host: String, port: Int) {
        let loopback = host == "0.0.0.0" || host == "::" || host.isEmpty ? "127.0.0.1" : host
        let shown = loopback.contains(":") ? "[\(loopback)]" : loopback
        base.withLock { $0 = "http://\(shown):\(port)" }
    }

    func answer(container: String, body: [UInt8]) async -> [UInt8] {
        guard let request = ForwardedRequest(encoded: body) else {
            return ForwardedResponse.error(retry: false, "a forwarded request could not be read").encoded
        }
        guard let base = base.withLock({ $0 }), request.uri.hasPrefix("/") else {
            return ForwardedResponse.error(retry: true, "the writer is not listening yet; retry").encoded
        }
        var outgoing = HTTPClientRequest(url: base + request.uri)
        outgoing.method = HTTPMethod(rawValue: request.method)
        for (name, value) in request.headers where ForwardedRequest.keptHeaders.contains(name) {
            outgoing.headers.add(name: name, value: value)
        }
        outgoing.headers.add(name: ForwardedRequest.forwardedHeader, value: "1")
        outgoing.body = .bytes(ByteBuffer(bytes: request.body))
        do {
            let response = try await client.execute(outgoing, timeout: .seconds(30))
            var collected = try await response.body.collect(upTo: 64 << 20)
            let bytes = collected.readBytes(length: collected.readableBytes) ?? []
            let type = response.headers.first(name: "Content-Type") ?? "application/json; charset=utf-8"
            return ForwardedResponse(status: Int(response.status.code), contentType: type, body: bytes).encoded
        } catch {
            logger.warning("answering a forwarded request failed", metadata: ["error": "\(error)"])
            return ForwardedResponse.error(retry: true, "the writer could not answer the request; retry").encoded
        }
    }

    func shutdown() async { try? await client.shutdown() }
}
