import CNATS
import Foundation
import ShareLedger
import Synchronization

/// A connection to a NATS cluster with its JetStream context, through the C client (`libnats`).
///
/// Every method here blocks its thread: call them through ``call(_:_:)``, which runs them off the
/// cooperative pool with a bounded wait. No NATS type leaves this target.
///
/// `@unchecked Sendable`: nats.c connections, JetStream contexts and key-value handles are safe to
/// use from several threads at once (the client's documented contract); the pointers never change and
/// are destroyed only in `deinit`, when no call can still be running (every call holds the object).
final class NATSConnection: @unchecked Sendable {
    let connection: OpaquePointer
    let jetStream: OpaquePointer
    /// The servers, as given.
    let servers: [String]
    /// The wait for one JetStream API call (milliseconds), also each publish's.
    let waitMilliseconds: Int64
    /// Where the JetStream context's ack handler records the outcomes of asynchronous publishes.
    let acks: AsyncAcks

    private init(connection: OpaquePointer, jetStream: OpaquePointer, servers: [String], waitMilliseconds: Int64, acks: AsyncAcks) {
        self.connection = connection
        self.jetStream = jetStream
        self.servers = servers
        self.waitMilliseconds = waitMilliseconds
        self.acks = acks
    }

    deinit {
        jsCtx_Destroy(jetStream)
        natsConnection_Destroy(connection)
        // Balances the retain in connect(): the context that could call the handler is gone.
        Unmanaged.passUnretained(acks).release()
    }

    /// Parses `nats://host:port[,nats://host:port…]` (the scheme may be left out).
    static func parseServers(_ text: String) throws(ReplicationError) -> [String] {
        let servers = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            .map { $0.contains("://") ? $0 : "nats://\($0)" }
        guard !servers.isEmpty, servers.count <= 64, servers.allSatisfy({ $0.utf8.count <= 512 && !$0.contains("\0") }) else {
            throw ReplicationError(
                .invalidArguments, "the NATS server list \"\(text.prefix(80))\" is not 1 to 64 URLs separated by commas, "
                    + "e.g. nats://127.0.0.1:4222,nats://127.0.0.1:4223")
        }
        return servers
    }

    /// Connects to any of `servers` (reconnecting to the others when one goes away).
    static func connect(
        servers: [String], name: String, wait: Duration = .seconds(2)
    ) async throws(ReplicationError) -> NATSConnection {
        let waitMilliseconds = max(100, CheckedConversion.milliseconds(clamping: wait))
        return try await Blocking.run("connecting to \(servers.joined(separator: ","))", timeout: wait * 3) { () throws(ReplicationError) in
            var options: OpaquePointer?
            try check(natsOptions_Create(&options), "creating NATS options")
            defer { natsOptions_Destroy(options) }
            let strings = servers.map { strdup($0) }
            defer { strings.forEach { free($0) } }
            var pointers: [UnsafePointer<CChar>?] = strings.map { UnsafePointer($0) }
            try check(natsOptions_SetServers(options, &pointers, Int32(pointers.count)), "setting the NATS servers")
            try check(natsOptions_SetName(options, name), "naming the NATS connection")
            try check(natsOptions_SetTimeout(options, waitMilliseconds), "setting the connect timeout")
            try check(natsOptions_SetMaxReconnect(options, -1), "setting reconnects")
            try check(natsOptions_SetReconnectWait(options, 100), "setting the reconnect wait")
            var connection: OpaquePointer?
            try check(natsConnection_Connect(&connection, options), "connecting to NATS at \(servers.joined(separator: ","))")
            var jsOptions = jsOptions()
            jsOptions_Init(&jsOptions)
            jsOptions.Wait = waitMilliseconds
            let acks = AsyncAcks()
            jsOptions.PublishAsync.AckHandler = asyncAckHandler
            // Retained until deinit: the C context holds this pointer.
            jsOptions.PublishAsync.AckHandlerClosure = Unmanaged.passRetained(acks).toOpaque()
            jsOptions.PublishAsync.MaxPending = 4096
            var jetStream: OpaquePointer?
            let status = natsConnection_JetStream(&jetStream, connection, &jsOptions)
            guard status == NATS_OK, let connection, let jetStream else {
                natsConnection_Destroy(connection)
                Unmanaged.passUnretained(acks).release()
                throw error(status, "opening the JetStream context")
            }
            return NATSConnection(
                connection: connection, jetStream: jetStream, servers: servers, waitMilliseconds: waitMilliseconds, acks: acks)
        }
    }

    /// Closes the connection (pending calls fail); the object goes away when nothing uses it.
    func close() {
        natsConnection_Close(connection)
    }

    /// Runs blocking `body` off the cooperative pool, bounded by `timeout`, else by three times the call wait.
    func call<T: Sendable>(
        _ what: String, timeout: Duration? = nil, _ body: @escaping @Sendable (NATSConnection) throws(ReplicationError) -> T
    ) async throws(ReplicationError) -> T {
        try await Blocking.run(what, timeout: timeout ?? .milliseconds(waitMilliseconds * 3)) { () throws(ReplicationError) in try body(self) }
    }

    /// How long creating a stream or a bucket is retried while a cluster forms or elects its JetStream
    /// metadata leader: 10 s, or two call waits and a second when that is longer, so that a slow
    /// cluster (each failed attempt can take a whole wait) gets at least a second attempt.
    var formingClusterWindow: Duration { max(.seconds(10), .milliseconds(waitMilliseconds * 2 + 1_000)) }

    /// The bound for a call that retries for ``formingClusterWindow``: the window, the last attempt's
    /// wait and a second.
    var formingClusterCallTimeout: Duration { formingClusterWindow + .milliseconds(waitMilliseconds + 1_000) }

    // MARK: - Errors

    static func check(_ status: natsStatus, _ doing: @autoclosure () -> String, jsError: jsErrCode = jsErrCode(0)) throws(ReplicationError) {
        guard status != NATS_OK else { return }
        throw error(status, doing(), jsError: jsError)
    }

    static func error(_ status: natsStatus, _ doing: String, jsError: jsErrCode = jsErrCode(0)) -> ReplicationError {
        var last = status
        let detail = nats_GetLastError(&last).map { String(cString: $0) } ?? ""
        let text = natsStatus_GetText(status).map { String(cString: $0) } ?? "status \(status.rawValue)"
        // JetStream error 10005, "no suitable peers for placement": a replicated stream asked of a
        // cluster whose metadata leader does not know enough current peers yet (it is forming, or
        // one node is restarting). Like a timeout, it passes; retrying is the answer.
        // Calls that take no JetStream error code (creating a key-value bucket) carry it in the text.
        let transient =
            status == NATS_TIMEOUT || jsError.rawValue == NATSConnection.noSuitablePeers
            || detail.lowercased().contains("no suitable peers")
        let code: ReplicationError.Code = transient ? .timedOut : .unavailable
        let js = jsError.rawValue != 0 ? " (JetStream error \(jsError.rawValue))" : ""
        let advice = code == .timedOut ? "; retry (the cluster may be electing a leader)" : "; check that the NATS cluster runs and has a JetStream leader"
        return ReplicationError(code, "\(doing) failed: \(text)\(js)\(detail.isEmpty || detail == text ? "" : ": \(detail)")\(advice)")
    }

    /// JetStream's error code for "no suitable peers for placement" (`JSClusterNoPeersErr`).
    static let noSuitablePeers: UInt32 = 10005

    // MARK: - Streams

    /// What replication needs to know of a stream.
    struct StreamState: Sendable {
        var lastSequence: UInt64
        var messages: UInt64
        var leader: String?
        var denyDelete: Bool
        var denyPurge: Bool
        var replicas: Int
    }

    /// Creates the stream for `subject` (file storage, `replicas` replicas, deletes and purges denied,
    /// a duplicates window) or finds it when it exists.
    func ensureStream(name: String, subject: String, replicas: Int, duplicatesWindow: Duration) throws(ReplicationError) -> StreamState {
        var config = jsStreamConfig()
        jsStreamConfig_Init(&config)
        let nameC = strdup(name)
        let subjectC = strdup(subject)
        defer {
            free(nameC)
            free(subjectC)
        }
        var subjects: [UnsafePointer<CChar>?] = [UnsafePointer(subjectC)]
        var jsError = jsErrCode(0)
        var info: UnsafeMutablePointer<jsStreamInfo>?
        let status = subjects.withUnsafeMutableBufferPointer { buffer in
            config.Name = UnsafePointer(nameC)
            config.Subjects = buffer.baseAddress
            config.SubjectsLen = 1
            config.Storage = js_FileStorage
            config.Replicas = Int64(replicas)
            config.DenyDelete = true
            config.DenyPurge = true
            config.Duplicates = CheckedConversion.nanoseconds(clamping: duplicatesWindow)
            return js_AddStream(&info, jetStream, &config, nil, &jsError)
        }
        if status == NATS_OK, let info {
            defer { jsStreamInfo_Destroy(info) }
            return NATSConnection.state(info)
        }
        if jsError == JSStreamNameExistErr, let existing = try streamState(name: name) {
            return existing
        }
        throw NATSConnection.error(status, "creating stream \(name)", jsError: jsError)
    }

    /// The stream's state, or nil when there is no such stream.
    func streamState(name: String) throws(ReplicationError) -> StreamState? {
        var info: UnsafeMutablePointer<jsStreamInfo>?
        var jsError = jsErrCode(0)
        let status = js_GetStreamInfo(&info, jetStream, name, nil, &jsError)
        if status == NATS_NOT_FOUND || jsError == JSStreamNotFoundErr { return nil }
        try NATSConnection.check(status, "reading the state of stream \(name)", jsError: jsError)
        guard let info else { return nil }
        defer { jsStreamInfo_Destroy(info) }
        return NATSConnection.state(info)
    }

    private static func state(_ info: UnsafeMutablePointer<jsStreamInfo>) -> StreamState {
        let leader = info.pointee.Cluster?.pointee.Leader.map { String(cString: $0) }
        let config = info.pointee.Config?.pointee
        return StreamState(
            lastSequence: info.pointee.State.LastSeq, messages: info.pointee.State.Msgs, leader: leader,
            denyDelete: config?.DenyDelete ?? false, denyPurge: config?.DenyPurge ?? false,
            replicas: Int(config?.Replicas ?? 0))
    }

    /// The outcome of a fenced publish.
    enum PublishOutcome: Sendable {
        /// Stored at `sequence` (`duplicate`: the same message id was stored before, inside the window).
        case stored(sequence: UInt64, duplicate: Bool)
        /// `Nats-Expected-Last-Sequence` did not hold: someone else appended.
        case wrongLastSequence(String)
    }

    /// Publishes `data` to `subject` with `Nats-Msg-Id: messageID` and
    /// `Nats-Expected-Last-Sequence: expectedLastSequence` (sent for 0 too), waiting for the ack.
    func publish(subject: String, data: [UInt8], messageID: String?, expectedLastSequence: UInt64) throws(ReplicationError) -> PublishOutcome {
        var message: OpaquePointer?
        try NATSConnection.check(
            data.withUnsafeBytes { raw in
                natsMsg_Create(&message, subject, nil, raw.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(raw.count))
            }, "making a message")
        defer { natsMsg_Destroy(message) }
        // Set as headers, not jsPubOptions: the client leaves ExpectLastSeq out when it is 0, and the
        // first event of a stream must be fenced too.
        if let messageID {
            try NATSConnection.check(natsMsgHeader_Set(message, "Nats-Msg-Id", messageID), "setting the message id")
        }
        try NATSConnection.check(
            natsMsgHeader_Set(message, "Nats-Expected-Last-Sequence", String(expectedLastSequence)), "setting the expected sequence")
        var options = jsPubOptions()
        jsPubOptions_Init(&options)
        options.MaxWait = waitMilliseconds
        var ack: UnsafeMutablePointer<jsPubAck>?
        var jsError = jsErrCode(0)
        let status = js_PublishMsg(&ack, jetStream, message, &options, &jsError)
        defer { if let ack { jsPubAck_Destroy(ack) } }
        if jsError == JSStreamWrongLastSequenceErr {
            var last = status
            return .wrongLastSequence(nats_GetLastError(&last).map { String(cString: $0) } ?? "wrong last sequence")
        }
        try NATSConnection.check(status, "publishing to \(subject)", jsError: jsError)
        guard let ack else { throw ReplicationError(.unavailable, "publishing to \(subject) got no ack; retry") }
        return .stored(sequence: ack.pointee.Sequence, duplicate: ack.pointee.Duplicate)
    }

    /// One message of a pipelined batch: published with `Nats-Msg-Id: messageID`,
    /// `Nats-Expected-Last-Sequence: sequence − 1` and, when given, `Nats-Expected-Last-Msg-Id`.
    struct BatchMessage: Sendable {
        var sequence: UInt64
        var data: [UInt8]
        var messageID: String
        var expectedLastMessageID: String?
    }

    /// What the server answered to one message of a batch.
    enum BatchOutcome: Sendable, Equatable {
        case stored(sequence: UInt64, duplicate: Bool)
        case refused(code: Int, text: String)
    }

    /// Publishes `messages` pipelined (without waiting for each ack), then waits for all acks (at
    /// most the call wait). Returns each message's outcome by its `sequence`; a message without one
    /// got no answer in time (it may still be stored).
    func publishBatch(subject: String, _ messages: [BatchMessage]) throws(ReplicationError) -> [UInt64: BatchOutcome] {
        acks.reset()
        var options = jsPubOptions()
        jsPubOptions_Init(&options)
        options.MaxWait = waitMilliseconds
        for item in messages {
            var message: OpaquePointer?
            try NATSConnection.check(
                item.data.withUnsafeBytes { raw in
                    natsMsg_Create(&message, subject, nil, raw.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(raw.count))
                }, "making a message")
            defer { natsMsg_Destroy(message) }
            try NATSConnection.check(natsMsgHeader_Set(message, "Nats-Msg-Id", item.messageID), "setting the message id")
            try NATSConnection.check(
                natsMsgHeader_Set(message, "Nats-Expected-Last-Sequence", String(item.sequence - 1)), "setting the expected sequence")
            try NATSConnection.check(natsMsgHeader_Set(message, "Ledger-Position", String(item.sequence)), "setting the position")
            if let last = item.expectedLastMessageID {
                try NATSConnection.check(natsMsgHeader_Set(message, "Nats-Expected-Last-Msg-Id", last), "setting the expected id")
            }
            let status = js_PublishMsgAsync(jetStream, &message, &options)
            if status != NATS_OK { break }  // the acks so far tell the caller where to resume
        }
        _ = js_PublishAsyncComplete(jetStream, &options)
        return acks.outcomes()
    }

    /// The data of the stream's message at `sequence`, or nil when there is none.
    func message(stream: String, sequence: UInt64) throws(ReplicationError) -> [UInt8]? {
        var message: OpaquePointer?
        var jsError = jsErrCode(0)
        let status = js_GetMsg(&message, jetStream, stream, sequence, nil, &jsError)
        if status == NATS_NOT_FOUND || jsError == JSNoMessageFoundErr { return nil }
        try NATSConnection.check(status, "reading message \(sequence) of stream \(stream)", jsError: jsError)
        defer { natsMsg_Destroy(message) }
        return NATSConnection.data(of: message)
    }

    static func data(of message: OpaquePointer?) -> [UInt8] {
        let count = Int(natsMsg_GetDataLength(message))
        guard count > 0, let base = natsMsg_GetData(message) else { return [] }
        return base.withMemoryRebound(to: UInt8.self, capacity: count) { Array(UnsafeBufferPointer(start: $0, count: count)) }
    }

    /// An ordered consumer of `stream` from `startSequence`: the client recreates it after a gap or a
    /// missed heartbeat, so messages arrive in stream order, each once.
    func orderedSubscription(stream: String, subject: String, startSequence: UInt64) throws(ReplicationError) -> NATSSubscription {
        var options = jsSubOptions()
        jsSubOptions_Init(&options)
        let streamC = strdup(stream)
        defer { free(streamC) }
        options.Stream = UnsafePointer(streamC)
        options.Ordered = true
        options.Config.DeliverPolicy = startSequence <= 1 ? js_DeliverAll : js_DeliverByStartSequence
        options.Config.OptStartSeq = startSequence <= 1 ? 0 : startSequence
        var subscription: OpaquePointer?
        var jsError = jsErrCode(0)
        try NATSConnection.check(
            js_SubscribeSync(&subscription, jetStream, subject, nil, &options, &jsError),
            "subscribing to stream \(stream) from \(startSequence)", jsError: jsError)
        guard let subscription else { throw ReplicationError(.unavailable, "subscribing to stream \(stream) returned nothing") }
        natsSubscription_SetPendingLimits(subscription, 1 << 20, 1 << 30)
        return NATSSubscription(subscription: subscription, connection: self)
    }

    // MARK: - Key-value

    /// The key-value bucket `name`, created (file storage, `replicas` replicas, one revision of history)
    /// when missing.
    func keyValue(bucket name: String, replicas: Int, history: UInt8 = 1) throws(ReplicationError) -> NATSKeyValue {
        var store: OpaquePointer?
        if js_KeyValue(&store, jetStream, name) == NATS_OK, let store {
            return NATSKeyValue(store: store, bucket: name, connection: self)
        }
        var config = kvConfig()
        kvConfig_Init(&config)
        let nameC = strdup(name)
        defer { free(nameC) }
        config.Bucket = UnsafePointer(nameC)
        config.History = history
        config.Replicas = Int32(replicas)
        config.StorageType = js_FileStorage
        // A connected cluster that is still forming answers "no suitable peers", or a bare error
        // while it elects its JetStream metadata leader, for a while: retry any failure for
        // `formingClusterWindow`, on this blocking thread (call it with `formingClusterCallTimeout`).
        // A cluster that cannot be reached fails earlier, in connect.
        var backoff = Backoff(initial: .milliseconds(250), cap: .milliseconds(250))
        store = try backoff.retryBlocking(until: ContinuousClock.now + formingClusterWindow, if: { _ in true }) {
            () throws(ReplicationError) -> OpaquePointer? in
            var created: OpaquePointer?
            let status = js_CreateKeyValue(&created, jetStream, &config)
            if status == NATS_OK { return created }
            // Created by someone else meanwhile?
            if js_KeyValue(&created, jetStream, name) == NATS_OK, created != nil { return created }
            throw NATSConnection.error(status, "creating key-value bucket \(name)")
        }
        guard let store else { throw ReplicationError(.unavailable, "creating key-value bucket \(name) returned nothing") }
        return NATSKeyValue(store: store, bucket: name, connection: self)
    }
}

/// The outcomes of asynchronous publishes, recorded by ``asyncAckHandler`` on the client's thread.
final class AsyncAcks: Sendable {
    private let state = Mutex<[UInt64: NATSConnection.BatchOutcome]>([:])

    func reset() { state.withLock { $0.removeAll(keepingCapacity: true) } }
    func record(_ sequence: UInt64, _ outcome: NATSConnection.BatchOutcome) { state.withLock { $0[sequence] = outcome } }
    func outcomes() -> [UInt64: NATSConnection.BatchOutcome] { state.withLock { $0 } }
}

/// The JetStream context's ack handler: records each asynchronous publish's outcome under the
/// message's `Ledger-Position` header, and destroys the message (the handler owns it).
private func asyncAckHandler(
    _ js: OpaquePointer?, _ message: OpaquePointer?, _ ack: UnsafeMutablePointer<jsPubAck>?,
    _ failure: UnsafeMutablePointer<jsPubAckErr>?, _ closure: UnsafeMutableRawPointer?
) {
    defer { natsMsg_Destroy(message) }
    guard let closure else { return }
    let acks = Unmanaged<AsyncAcks>.fromOpaque(closure).takeUnretainedValue()
    var header: UnsafePointer<CChar>?
    guard natsMsgHeader_Get(message, "Ledger-Position", &header) == NATS_OK, let header,
        let position = UInt64(String(cString: header))
    else { return }
    if let ack {
        acks.record(position, .stored(sequence: ack.pointee.Sequence, duplicate: ack.pointee.Duplicate))
    } else if let failure {
        let text = failure.pointee.ErrText.map { String(cString: $0) } ?? "error \(failure.pointee.Err.rawValue)"
        acks.record(position, .refused(code: Int(failure.pointee.ErrCode.rawValue), text: text))
    }
}

/// A synchronous JetStream subscription. `@unchecked Sendable`: used by one task at a time (its
/// owner), and nats.c subscriptions are thread-safe; destroyed in `deinit`.
final class NATSSubscription: @unchecked Sendable {
    private let subscription: OpaquePointer
    let connection: NATSConnection

    init(subscription: OpaquePointer, connection: NATSConnection) {
        self.subscription = subscription
        self.connection = connection
    }

    deinit {
        natsSubscription_Unsubscribe(subscription)
        natsSubscription_Destroy(subscription)
    }

    /// Up to `limit` messages: waits at most `timeoutMilliseconds` for the first, then takes those
    /// already delivered. Empty when none came in time.
    func nextBatch(limit: Int, timeoutMilliseconds: Int64) throws(ReplicationError) -> [(data: [UInt8], sequence: UInt64)] {
        guard let first = try next(timeoutMilliseconds: timeoutMilliseconds) else { return [] }
        var out = [first]
        var messages: Int32 = 0
        var bytes: Int32 = 0
        _ = natsSubscription_GetPending(subscription, &messages, &bytes)
        var remaining = min(Int(messages), limit - 1)
        while remaining > 0, let message = try next(timeoutMilliseconds: 1) {
            out.append(message)
            remaining -= 1
        }
        return out
    }

    /// The next message (the caller destroys it), or nil when none came within `timeoutMilliseconds`.
    func nextMessage(timeoutMilliseconds: Int64) throws(ReplicationError) -> OpaquePointer? {
        var message: OpaquePointer?
        let status = natsSubscription_NextMsg(&message, subscription, timeoutMilliseconds)
        if status == NATS_TIMEOUT { return nil }
        try NATSConnection.check(status, "waiting for the next message")
        return message
    }

    /// The next message's data and stream sequence, or nil when none came within `timeoutMilliseconds`.
    func next(timeoutMilliseconds: Int64) throws(ReplicationError) -> (data: [UInt8], sequence: UInt64)? {
        guard let message = try nextMessage(timeoutMilliseconds: timeoutMilliseconds) else { return nil }
        defer { natsMsg_Destroy(message) }
        var meta: UnsafeMutablePointer<jsMsgMetaData>?
        try NATSConnection.check(natsMsg_GetMetaData(&meta, message), "reading a message's stream sequence")
        defer { jsMsgMetaData_Destroy(meta) }
        return (NATSConnection.data(of: message), meta?.pointee.Sequence.Stream ?? 0)
    }
}

/// A key-value bucket. `@unchecked Sendable` for the reasons ``NATSConnection`` gives.
final class NATSKeyValue: @unchecked Sendable {
    let store: OpaquePointer
    let bucket: String
    let connection: NATSConnection

    init(store: OpaquePointer, bucket: String, connection: NATSConnection) {
        self.store = store
        self.bucket = bucket
        self.connection = connection
    }

    deinit { kvStore_Destroy(store) }

    /// The key's value and revision, or nil when the key has none.
    ///
    /// Read through the stream's leader (`js_GetLastMsg`, the stream message API), not
    /// `kvStore_Get`: the client reads a bucket created with direct gets from any replica, and a
    /// follower's answer can be stale; under load a writer then took a lease whose stale record named
    /// it. The revision is the message's stream sequence.
    func get(_ key: String) throws(ReplicationError) -> (value: [UInt8], revision: UInt64)? {
        var message: OpaquePointer?
        var jsError = jsErrCode(0)
        let status = js_GetLastMsg(&message, connection.jetStream, "KV_\(bucket)", "$KV.\(bucket).\(key)", nil, &jsError)
        if status == NATS_NOT_FOUND || jsError == JSNoMessageFoundErr { return nil }
        try NATSConnection.check(status, "reading \(key) from bucket \(bucket)", jsError: jsError)
        defer { natsMsg_Destroy(message) }
        return (NATSConnection.data(of: message), natsMsg_GetSequence(message))
    }

    /// Compare-and-set: writes `value` when the bucket's last revision is `revision` (0: nothing was
    /// ever written). Returns the new revision, or nil when the revision did not hold.
    ///
    /// Published to the key's subject with the stream-level `Nats-Expected-Last-Sequence`, not with
    /// `kvStore_Update`'s per-subject check: on this cluster (nats-server 2.9.10) two racing
    /// `kvStore_Update`s with the same revision both succeeded (the per-subject check is unreliable in
    /// clusters in some releases), while the stream-level check held every round. So a bucket holds
    /// one key, and its stream's last sequence is that key's revision.
    func put(_ key: String, _ value: [UInt8], ifRevision revision: UInt64) throws(ReplicationError) -> UInt64? {
        switch try connection.publish(subject: "$KV.\(bucket).\(key)", data: value, messageID: nil, expectedLastSequence: revision) {
        case .stored(let sequence, _): return sequence
        case .wrongLastSequence: return nil
        }
    }
}
