import CNATS
import Foundation
import Logging
import ServiceLifecycle
import ShareLedger

/// Routes a container's commands to its shard's writer and its reads to any of the shard's replicas,
/// through NATS request/reply, with the shard map (container → shard) in the key-value bucket
/// `shareledger_shards`.
///
/// Commands go to `ledger.<shard>.commands`, which only the shard's lease holder answers (a
/// ``ShardResponder`` in the queue group `writer`); reads go to `ledger.<shard>.reads`, answered by
/// one of the replicas' responders (queue group `replicas`). Request and reply bodies are the
/// application's (for example the JSON of a `serve` API); the router adds the header
/// `Ledger-Container`. There are no cross-container operations, as in CloudKit: a request naming
/// more than one container is refused before anything is sent.
public final class ShardRouter: Sendable {
    /// The shard map's bucket.
    public static let bucket = "shareledger_shards"

    private let connection: NATSConnection
    private let map: NATSKeyValue
    private let timeout: Duration

    private init(connection: NATSConnection, map: NATSKeyValue, timeout: Duration) {
        self.connection = connection
        self.map = map
        self.timeout = timeout
    }

    /// Connects and opens the shard map (created with `replicas` replicas when missing).
    public static func open(servers: [String], replicas: Int = 3, timeout: Duration = .seconds(2)) async throws(ReplicationError) -> ShardRouter {
        let connection = try await NATSConnection.connect(servers: servers, name: "share-ledger router", wait: timeout)
        let map = try await connection.call("opening bucket \(bucket)", timeout: connection.formingClusterCallTimeout) { connection throws(ReplicationError) in
            try connection.keyValue(bucket: bucket, replicas: replicas, history: 5)
        }
        return ShardRouter(connection: connection, map: map, timeout: timeout)
    }

    /// The shard-map key of a container: `c.` and the hex digits of its UTF-8 (keys allow few characters).
    static func key(_ container: String) -> String { "c." + Hex.encode(container.utf8) }

    /// Assigns `container` to `shard` (moving a container between shards is not supported: assign
    /// before its first command).
    public func assign(_ container: String, to shard: ShardNames) async throws(ReplicationError) {
        try Self.check(container)
        let key = Self.key(container)
        let value = Array(shard.shard.utf8)
        try await connection.call("assigning \(container) to shard \(shard.shard)") { [map] _ throws(ReplicationError) in
            try map.putUnconditionally(key, value)
        }
    }

    /// The shard of `container`.
    ///
    /// - Throws: ``ReplicationError/Code/invalidArguments`` when the container has no shard.
    public func shard(of container: String) async throws(ReplicationError) -> ShardNames {
        try Self.check(container)
        let key = Self.key(container)
        guard let entry = try await connection.call("reading the shard of \(container)", { [map] _ throws(ReplicationError) in try map.get(key) })
        else {
            throw ReplicationError(.invalidArguments, "container \(container) is not assigned to a shard; assign it first")
        }
        return try ShardNames(shard: String(decoding: entry.value, as: UTF8.self))
    }

    /// Sends a command about `containers` (exactly one) to its shard's writer and returns the reply.
    ///
    /// - Throws: ``ReplicationError/Code/crossContainer`` for more than one container (nothing is
    ///   sent); ``ReplicationError/Code/noWriter`` when no writer answers the shard (none holds its
    ///   lease: retry after a standby took over); ``ReplicationError/Code/timedOut``.
    public func command(_ body: [UInt8], containers: Set<String>) async throws(ReplicationError) -> [UInt8] {
        let container = try Self.single(containers)
        return try await request(body, container: container, subject: shard(of: container).commandSubject)
    }

    /// Sends a command about `container`, whose shard the caller looked up (``shard(of:)``), to
    /// `shard`'s writer and returns the reply.
    ///
    /// - Throws: ``ReplicationError/Code/noWriter`` when no writer answers the shard;
    ///   ``ReplicationError/Code/timedOut``; ``ReplicationError/Code/unavailable``.
    public func command(_ body: [UInt8], container: String, shard: ShardNames) async throws(ReplicationError) -> [UInt8] {
        try Self.check(container)
        return try await request(body, container: container, subject: shard.commandSubject)
    }

    /// Sends a read about `container` to one of its shard's replicas and returns the reply.
    public func read(_ body: [UInt8], container: String) async throws(ReplicationError) -> [UInt8] {
        try await request(body, container: container, subject: shard(of: container).readSubject)
    }

    /// Closes the connection.
    public func close() { connection.close() }

    static func single(_ containers: Set<String>) throws(ReplicationError) -> String {
        guard containers.count == 1, let container = containers.first else {
            throw ReplicationError(
                .crossContainer, containers.isEmpty
                    ? "a command must name its container"
                    : "a command may act in one container only; this one names \(containers.count) (there are no "
                        + "cross-container operations): send one command per container")
        }
        return container
    }

    static func check(_ container: String) throws(ReplicationError) {
        guard !container.isEmpty, container.utf8.count <= EventLog.Limits.maxNameBytes, !container.utf8.contains(0) else {
            throw ReplicationError(.invalidArguments, "a container is 1 to \(EventLog.Limits.maxNameBytes) bytes without NUL")
        }
    }

    private func request(_ body: [UInt8], container: String, subject: String) async throws(ReplicationError) -> [UInt8] {
        let milliseconds = CheckedConversion.milliseconds(clamping: timeout)
        return try await connection.call("sending a request to \(subject)") { connection throws(ReplicationError) in
            try connection.request(subject: subject, body: body, headers: ["Ledger-Container": container], timeoutMilliseconds: milliseconds)
        }
    }
}

/// Answers a shard's commands (on the writer, while it holds the lease) or reads (on a replica):
/// a queue subscription on `ledger.<shard>.commands` (group `writer`) or `ledger.<shard>.reads`
/// (group `replicas`) whose requests go to `handler` with the request's container. A request for a
/// container of another shard is answered with an error by the handler's contract, not routed on.
public final class ShardResponder: Service, Sendable {
    /// What it answers.
    public enum Role: Sendable {
        /// Commands: only the lease holder may run this.
        case writer
        /// Reads: any replica.
        case replica
    }

    /// Handles one request: the container and the body; returns the reply body.
    public typealias Handler = @Sendable (_ container: String, _ body: [UInt8]) async -> [UInt8]

    private let servers: [String]
    private let shard: ShardNames
    private let role: Role
    private let handler: Handler
    private let logger: Logger

    /// Makes a responder (nothing subscribes before it runs).
    public init(servers: [String], shard: ShardNames, role: Role, logger: Logger, handler: @escaping Handler) {
        self.servers = servers
        self.shard = shard
        self.role = role
        self.handler = handler
        self.logger = logger
    }

    /// Answers requests until cancelled (or graceful shutdown).
    public func run() async throws {
        let connection = try await NATSConnection.connect(servers: servers, name: "share-ledger responder \(shard.shard)")
        defer { connection.close() }
        let subject = role == .writer ? shard.commandSubject : shard.readSubject
        let group = role == .writer ? "writer" : "replicas"
        let subscription = try await connection.call("subscribing to \(subject)") { connection throws(ReplicationError) in
            try connection.queueSubscription(subject: subject, group: group)
        }
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            guard let request = try await connection.call("waiting for requests", { _ throws(ReplicationError) in
                try subscription.nextRequest(timeoutMilliseconds: 200)
            }) else { continue }
            let reply = await handler(request.container, request.body)
            do {
                try await connection.call("replying") { connection throws(ReplicationError) in
                    try connection.publishPlain(subject: request.replySubject, body: reply)
                }
            } catch {
                logger.warning("a reply failed", metadata: ["error": "\(error)"])
            }
        }
    }
}

extension ShardNames {
    /// The subject the shard's replicas answer reads on: `ledger.<shard>.reads`.
    public var readSubject: String { "ledger.\(shard).reads" }
}

extension NATSConnection {
    /// A request with headers; the reply's body. `NATS_NO_RESPONDERS` becomes ``ReplicationError/Code/noWriter``.
    func request(subject: String, body: [UInt8], headers: [String: String], timeoutMilliseconds: Int64) throws(ReplicationError) -> [UInt8] {
        var message: OpaquePointer?
        try NATSConnection.check(
            body.withUnsafeBytes { raw in
                natsMsg_Create(&message, subject, nil, raw.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(raw.count))
            }, "making a request")
        defer { natsMsg_Destroy(message) }
        for (key, value) in headers {
            try NATSConnection.check(natsMsgHeader_Set(message, key, value), "setting header \(key)")
        }
        var reply: OpaquePointer?
        let status = natsConnection_RequestMsg(&reply, connection, message, timeoutMilliseconds)
        if status == NATS_NO_RESPONDERS {
            throw ReplicationError(.noWriter, "nobody answers \(subject): no writer holds the shard's lease (or no replica runs); retry shortly")
        }
        try NATSConnection.check(status, "requesting \(subject)")
        defer { natsMsg_Destroy(reply) }
        return NATSConnection.data(of: reply)
    }

    /// A plain (non-JetStream) publish.
    func publishPlain(subject: String, body: [UInt8]) throws(ReplicationError) {
        try NATSConnection.check(
            body.withUnsafeBytes { raw in natsConnection_Publish(connection, subject, raw.baseAddress, Int32(raw.count)) },
            "publishing to \(subject)")
    }

    /// A queue subscription (one member of `group` gets each message).
    func queueSubscription(subject: String, group: String) throws(ReplicationError) -> NATSSubscription {
        var subscription: OpaquePointer?
        try NATSConnection.check(natsConnection_QueueSubscribeSync(&subscription, connection, subject, group), "subscribing to \(subject)")
        guard let subscription else { throw ReplicationError(.unavailable, "subscribing to \(subject) returned nothing") }
        // The subscription must be known to the server before a request can find it.
        try NATSConnection.check(natsConnection_Flush(connection), "flushing the subscription to \(subject)")
        return NATSSubscription(subscription: subscription, connection: self)
    }
}

extension NATSSubscription {
    /// The next request (container header, body, reply subject), or nil when none came in time.
    func nextRequest(timeoutMilliseconds: Int64) throws(ReplicationError) -> (container: String, body: [UInt8], replySubject: String)? {
        guard let message = try nextMessage(timeoutMilliseconds: timeoutMilliseconds) else { return nil }
        defer { natsMsg_Destroy(message) }
        var header: UnsafePointer<CChar>?
        let container = natsMsgHeader_Get(message, "Ledger-Container", &header) == NATS_OK ? header.map { String(cString: $0) } ?? "" : ""
        guard let reply = natsMsg_GetReply(message) else { return nil }  // not a request: nobody to answer
        return (container, NATSConnection.data(of: message), String(cString: reply))
    }
}

extension NATSKeyValue {
    /// Writes `value` whatever the key's revision.
    func putUnconditionally(_ key: String, _ value: [UInt8]) throws(ReplicationError) {
        var revision: UInt64 = 0
        try NATSConnection.check(
            value.withUnsafeBytes { raw in kvStore_Put(&revision, store, key, raw.baseAddress, Int32(raw.count)) },
            "writing \(key) to bucket \(bucket)")
    }
}
