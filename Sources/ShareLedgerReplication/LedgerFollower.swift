import Foundation
import Logging
import Metrics
import ServiceLifecycle
import ShareLedger
import Synchronization

/// How a ``LedgerFollower`` follows.
public struct FollowerConfiguration: Sendable {
    /// The NATS servers (any of the cluster's).
    public var servers: [String]
    /// The shard whose stream it follows.
    public var shard: ShardNames
    /// Events applied per transaction at most.
    public var batchLimit: Int = 1_024
    /// The wait for one NATS call.
    public var callTimeout: Duration = .seconds(2)
    /// How long one wait for new events lasts before the follower looks again (and can stop).
    public var idleWait: Duration = .milliseconds(200)
    /// Where the follower logs (it never prints).
    public var logger: Logger

    /// Makes a configuration.
    public init(servers: [String], shard: ShardNames, logger: Logger = Logger(label: "shareledger.replication.follower")) {
        self.servers = servers
        self.shard = shard
        self.logger = logger
    }
}

/// What a ``LedgerFollower`` has done.
public struct FollowerStatistics: Sendable, Hashable, Codable {
    /// The shard.
    public var shard: String
    /// The stream.
    public var stream: String
    /// The replica's head: the last position applied.
    public var appliedPosition: UInt64
    /// The stream's last sequence when last looked at.
    public var streamPosition: UInt64
    /// Positions in the stream not applied yet (as of the last look at the stream).
    public var lagPositions: UInt64
    /// Seconds between the newest applied event's commit on the primary and its apply here.
    public var lagSeconds: Double
    /// Events applied since the follower started.
    public var eventsApplied: UInt64
}

/// A read replica: applies a shard's stream into its own ledger, in the same format (the same stored
/// bytes, the same hash chain), verifying the chain and projecting the read models as it goes
/// (`ShareLedger.applyReplicated(_:)`), so metadata queries on the replica answer as
/// the primary did at the replica's head (``appliedPosition``).
///
/// It consumes the stream with an ordered consumer from its head + 1 (the replica's own head is its
/// position: nothing is kept on NATS), checks that each message's stream sequence is the next
/// position, and stops with ``ReplicationError/Code/diverged`` when an event does not verify or the
/// stream lost events. Open the replica with `residualTaskWorker = nil` and send it no commands.
public final class LedgerFollower: Service, Sendable {
    /// The replica.
    public let ledger: ShareLedger
    /// The configuration.
    public let configuration: FollowerConfiguration
    private let state: Mutex<State>
    private let connection: ConnectionSlot
    private let applied = AsyncSignal()
    private let lag: Gauge

    private struct State {
        var statistics: FollowerStatistics
    }

    /// Makes a follower applying into `ledger` (nothing connects before it runs).
    public init(ledger: ShareLedger, configuration: FollowerConfiguration) {
        self.ledger = ledger
        self.configuration = configuration
        let names = configuration.shard
        connection = ConnectionSlot(
            servers: configuration.servers, name: "share-ledger follower \(names.shard)", wait: configuration.callTimeout)
        let head = (try? ledger.log.head().position.rawValue) ?? 0
        state = Mutex(
            State(
                statistics: FollowerStatistics(
                    shard: names.shard, stream: names.stream, appliedPosition: head, streamPosition: 0, lagPositions: 0,
                    lagSeconds: 0, eventsApplied: 0)))
        lag = Gauge(label: "shareledger_replica_lag_positions", dimensions: [("shard", names.shard)])
    }

    /// What it has done so far.
    public var statistics: FollowerStatistics { state.withLock { $0.statistics } }

    /// The position the replica's read models answer at (its head).
    public var appliedPosition: LogPosition { LogPosition(state.withLock { $0.statistics.appliedPosition }) }

    /// Follows until cancelled (or graceful shutdown), resubscribing after NATS errors. Throws
    /// ``ReplicationError/Code/diverged`` (an event that does not verify), which retrying cannot mend.
    public func run() async throws {
        var backoff = Backoff(initial: .milliseconds(50), cap: .seconds(2))
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            do {
                try await follow(until: nil)
            } catch let error where error.code == .diverged || error.code == .ledger {
                configuration.logger.error("following stopped", metadata: ["error": "\(error)"])
                throw error
            } catch {
                configuration.logger.warning("following failed; resubscribing", metadata: ["error": "\(error)"])
                connection.close()  // the next attempt connects anew
                await backoff.wait()
            }
        }
        close()
    }

    /// Applies the stream until the replica's head reaches the stream's last sequence as it is when
    /// this is called (a standby catching up before it takes over), bounded by `timeout`.
    ///
    /// - Returns: the replica's head.
    /// - Throws: ``ReplicationError/Code/timedOut`` when the stream could not be applied in time;
    ///   ``ReplicationError/Code/diverged``; NATS errors (retry).
    @discardableResult
    public func catchUp(timeout: Duration = .seconds(30)) async throws(ReplicationError) -> LogHead {
        let deadline = ContinuousClock.now + timeout
        let names = configuration.shard
        var target: UInt64?
        var backoff = Backoff(initial: .milliseconds(50), cap: .seconds(1))
        // NATS errors (an election, a lost connection) are retried until the deadline.
        try await backoff.retry(until: deadline, if: { $0.isTransient }) { () throws(ReplicationError) in
            let connection = try await connect()
            if target == nil {
                target = try await connection.call("reading stream \(names.stream)") { connection throws(ReplicationError) in
                    try connection.streamState(name: names.stream)
                }?.lastSequence ?? 0
                let position = target ?? 0
                state.withLock { $0.statistics.streamPosition = max($0.statistics.streamPosition, position) }
            }
            try await follow(until: (LogPosition(target ?? 0), deadline))
        } onRetry: { error, _ in
            configuration.logger.warning("catching up failed; retrying", metadata: ["error": "\(error)"])
            connection.close()
        }
        do {
            return try ledger.log.head()
        } catch {
            throw ReplicationError(error, while: "reading the replica's head")
        }
    }

    /// Returns once the replica has applied `position`, or throws ``ReplicationError/Code/timedOut``.
    public func waitUntilApplied(_ position: LogPosition, timeout: Duration = .seconds(10)) async throws(ReplicationError) {
        try await applied.wait(
            until: { appliedPosition >= position }, timeout: timeout,
            timedOut: {
                ReplicationError(
                    .timedOut, "the replica has applied through \(appliedPosition), not \(position), after \(timeout); is the "
                        + "follower running and the stream reachable?")
            })
    }

    /// Closes the NATS connection.
    public func close() { connection.close() }

    // MARK: - Internals

    private func connect() async throws(ReplicationError) -> NATSConnection { try await connection.get() }

    /// Subscribes from the replica's head + 1 and applies batches until `until` (a position and a
    /// deadline) is reached, or forever when nil (until cancelled).
    private func follow(until: (position: LogPosition, deadline: ContinuousClock.Instant)?) async throws(ReplicationError) {
        let connection = try await connect()
        let names = configuration.shard
        var head: LogHead
        do {
            head = try ledger.log.head()
        } catch {
            throw ReplicationError(error, while: "reading the replica's head")
        }
        if let until, head.position >= until.position { return }
        let start = head.position.rawValue + 1
        let subscription = try await connection.call("subscribing to \(names.stream)") { connection throws(ReplicationError) in
            try connection.orderedSubscription(stream: names.stream, subject: names.subject, startSequence: start)
        }
        let limit = configuration.batchLimit
        let wait = CheckedConversion.milliseconds(clamping: configuration.idleWait)
        var lastStreamLook = ContinuousClock.now
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            if let until {
                if head.position >= until.position { return }
                if ContinuousClock.now >= until.deadline {
                    throw ReplicationError(
                        .timedOut, "the replica reached \(head.position) of \(until.position) in stream \(names.stream) before the "
                            + "deadline; retry (the cluster may be electing a leader)")
                }
            }
            let messages = try await connection.call("waiting for events of \(names.stream)") { _ throws(ReplicationError) in
                try subscription.nextBatch(limit: limit, timeoutMilliseconds: max(1, wait))
            }
            let batch = try events(of: messages, after: head)
            if !batch.isEmpty { head = try await apply(batch) }
            if ContinuousClock.now - lastStreamLook > .seconds(1) || batch.isEmpty {
                lastStreamLook = ContinuousClock.now
                await recordLag(connection, head: head)
            }
        }
    }

    /// The events of `messages` that follow `head`, in order: a message redelivered after a
    /// consumer reset is skipped; a gap, or a message that is not a stored event, is a divergence.
    private func events(of messages: [(data: [UInt8], sequence: UInt64)], after head: LogHead) throws(ReplicationError) -> [StoredEvent] {
        let names = configuration.shard
        var batch: [StoredEvent] = []
        batch.reserveCapacity(messages.count)
        for message in messages {
            let expected = head.position.rawValue + UInt64(batch.count) + 1
            if message.sequence < expected { continue }  // redelivered after a consumer reset
            guard message.sequence == expected else {
                throw ReplicationError(
                    .diverged, "stream \(names.stream) jumps from \(expected - 1) to \(message.sequence): it lost events "
                        + "(was it purged or recreated?); this replica cannot continue from it")
            }
            guard let event = StoredEvent(position: LogPosition(message.sequence), bytes: message.data) else {
                throw ReplicationError(
                    .diverged, "message \(message.sequence) of stream \(names.stream) is not a stored ledger event; the "
                        + "stream holds something else")
            }
            batch.append(event)
        }
        return batch
    }

    /// Applies `batch` to the replica and records it in the statistics; returns the new head.
    private func apply(_ batch: [StoredEvent]) async throws(ReplicationError) -> LogHead {
        let head: LogHead
        do {
            head = try await ledger.applyReplicated(batch)
        } catch {
            if error.code == .corruptedData || error.code == .serverRecordChanged {
                throw ReplicationError(
                    .diverged, "the replica refused events of stream \(configuration.shard.stream): \(error.message)")
            }
            throw ReplicationError(error, while: "applying events to the replica")
        }
        let micros = head.recordedAtMicros
        let count = UInt64(batch.count)
        state.withLock { state in
            state.statistics.appliedPosition = head.position.rawValue
            state.statistics.eventsApplied += count
            state.statistics.lagSeconds = max(0, Date().timeIntervalSince1970 - Double(micros) / 1_000_000)
            state.statistics.streamPosition = max(state.statistics.streamPosition, head.position.rawValue)
            state.statistics.lagPositions = state.statistics.streamPosition - head.position.rawValue
            if state.statistics.lagPositions == 0 { state.statistics.lagSeconds = 0 }
        }
        applied.signal()
        return head
    }

    /// Reads the stream's last sequence and records how far the replica at `head` is behind it (a
    /// failed read records nothing).
    private func recordLag(_ connection: NATSConnection, head: LogHead) async {
        let names = configuration.shard
        guard let stream = try? await connection.call("reading stream \(names.stream)", { connection throws(ReplicationError) in
            try connection.streamState(name: names.stream)
        }) else { return }
        let position = head.position.rawValue
        state.withLock { state in
            state.statistics.streamPosition = stream.lastSequence
            state.statistics.lagPositions = stream.lastSequence &- min(stream.lastSequence, position)
            if stream.lastSequence <= position { state.statistics.lagSeconds = 0 }
        }
        lag.record(Int64(clamping: stream.lastSequence &- min(stream.lastSequence, position)))
    }
}
