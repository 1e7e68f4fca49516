import Foundation
import Logging
import Metrics
import ServiceLifecycle
import ShareLedger
import Synchronization

/// Ships every committed event of a ledger, as its stored bytes, to the shard's JetStream stream:
/// position as stream sequence (`Nats-Expected-Last-Sequence = position − 1`), message id
/// `position:hash`, and within a pipelined batch `Nats-Expected-Last-Msg-Id` = the previous event's id,
/// so the stream itself refuses an event that does not continue the chain it holds.
///
/// - On start, and after any failed or unanswered batch, it reads the stream's last sequence and
///   compares the stream's message there with the ledger's stored bytes: equal → it resumes after
///   it; the stream ahead of the ledger, or another event there → ``ReplicationError/Code/diverged``
///   (nothing is published).
/// - A publish refused for its expected sequence, with the stream holding another event there, means
///   another writer owns the stream: ``ReplicationError/Code/fenced``, and the shipper stops.
/// - Lag (positions and seconds) is a metric (`shareledger_replication_lag_positions`,
///   `shareledger_replication_lag_seconds`, dimension `shard`) and in ``statistics``.
///
/// Run it as a `Service` (until cancelled, retrying while NATS is unreachable), or call
/// ``shipAvailable()`` to ship what is committed now.
public final class LedgerShipper: Service, Sendable {
    private let log: EventLog
    /// The role and lease files of the ledger's directory, checked before every publish.
    private let roleFiles: LedgerRole.Files
    /// The configuration.
    public let configuration: ShipperConfiguration
    private let state: Mutex<State>
    private let connection: ConnectionSlot
    private let shippedChanged = AsyncSignal()
    private let lagPositions: Gauge
    private let lagSeconds: Gauge

    private struct State {
        /// Verified against the stream: the stream holds exactly the ledger's events through it.
        var shipped: LogPosition?
        var shippedHash = EventHash.zero
        var statistics: ShipperStatistics
        var failure: ReplicationError?
    }

    /// Makes a shipper for `log` (nothing connects before it runs).
    public init(log: EventLog, configuration: ShipperConfiguration) {
        self.log = log
        roleFiles = LedgerRole.Files(directory: log.configuration.path)
        self.configuration = configuration
        let names = configuration.shard
        connection = ConnectionSlot(
            servers: configuration.servers, name: "share-ledger shipper \(names.shard)", wait: configuration.callTimeout)
        state = Mutex(
            State(
                statistics: ShipperStatistics(
                    shard: names.shard, stream: names.stream, shippedPosition: 0, headPosition: 0, lagPositions: 0,
                    lagSeconds: 0, eventsShipped: 0, resyncs: 0, fenced: false)))
        lagPositions = Gauge(label: "shareledger_replication_lag_positions", dimensions: [("shard", names.shard)])
        lagSeconds = Gauge(label: "shareledger_replication_lag_seconds", dimensions: [("shard", names.shard)])
    }

    /// What it has done so far.
    public var statistics: ShipperStatistics { state.withLock { $0.statistics } }

    /// Ships until cancelled (or graceful shutdown). Retries while NATS is unreachable or electing a
    /// leader; throws ``ReplicationError/Code/fenced`` or ``ReplicationError/Code/diverged``, which
    /// retrying cannot mend.
    public func run() async throws {
        let logger = configuration.logger
        var backoff = Backoff(initial: .milliseconds(50), cap: .seconds(2))
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            do {
                _ = try await shipAvailable()
                backoff.reset()
                let shipped = state.withLock { $0.shipped } ?? .start
                _ = try await cancelWhenGracefulShutdown {
                    try await self.log.waitForCommit(after: shipped, timeout: .milliseconds(500))
                }
            } catch let error as ReplicationError where error.code == .fenced || error.code == .diverged {
                logger.error("replication stopped", metadata: ["error": "\(error)"])
                throw error
            } catch is CancellationError {
                break
            } catch {
                logger.warning("shipping failed; retrying", metadata: ["error": "\(error)", "backoff": "\(backoff.next)"])
                reset()
                await backoff.wait()
            }
        }
        close()
    }

    /// Ships every event committed now and returns the statistics. Connects, creates the stream and
    /// checks it against the ledger first when needed.
    ///
    /// - Throws: ``ReplicationError/Code/fenced`` (and the shipper stays stopped),
    ///   ``ReplicationError/Code/diverged``, ``ReplicationError/Code/unavailable`` or
    ///   ``ReplicationError/Code/timedOut`` (retry), ``ReplicationError/Code/ledger``.
    @discardableResult
    public func shipAvailable() async throws(ReplicationError) -> ShipperStatistics {
        if let failure = state.withLock({ $0.failure }) { throw failure }
        // A replica, a deposed writer or a writer without its lease neither publishes nor
        // acknowledges: checked before anything (and again before each publish).
        if configuration.checksRole { try checkRole() }
        let connection = try await connect()
        var shipped = try await resumePoint(connection)
        while true {
            let events: [StoredEvent]
            let head: LogHead
            do {
                head = try log.head()
                events = try log.storedEvents(after: shipped.position, limit: configuration.batchLimit)
            } catch {
                throw ReplicationError(error, while: "reading the ledger to ship it")
            }
            updateLag(head: head, shipped: shipped.position, oldestUnshipped: events.first)
            guard !events.isEmpty else { break }
            if configuration.checksRole { try checkRole() }
            shipped = try await publish(events, after: shipped, connection: connection)
        }
        return statistics
    }

    /// Ships what is committed now and returns once the stream has acknowledged `position`,
    /// retrying NATS errors (an election, a lost connection) until `timeout`: durability
    /// ``ReplicationDurability/replicated`` for a writer that runs no shipper service, such as a
    /// command-line process that commits and exits. Safe beside another shipper of the same ledger
    /// (the stream's expected sequence orders them; neither sends an event twice into the history).
    ///
    /// - Throws: ``ReplicationError/Code/timedOut`` when the stream did not acknowledge `position`
    ///   in time (the events stay committed locally: ship them later); ``ReplicationError/Code/fenced``
    ///   or ``ReplicationError/Code/diverged`` (another writer owns the stream: this commit is not
    ///   part of the history); ``ReplicationError/Code/invalidArguments`` when `position` is beyond
    ///   the ledger's head.
    public func shipThrough(_ position: LogPosition, timeout: Duration = .seconds(10)) async throws(ReplicationError) {
        var backoff = Backoff(initial: .milliseconds(50), cap: .seconds(1))
        let shipped: ShipperStatistics
        do throws(ReplicationError) {
            shipped = try await backoff.retry(until: ContinuousClock.now + timeout, if: { $0.isTransient }) { () throws(ReplicationError) in
                try await shipAvailable()
            } onRetry: { error, wait in
                configuration.logger.warning("shipping failed; retrying", metadata: ["error": "\(error)", "backoff": "\(wait)"])
                reset()
            }
        } catch where error.isTransient {
            throw ReplicationError(
                .timedOut, "position \(position) was not acknowledged by stream \(configuration.shard.stream) within \(timeout) "
                    + "(\(error.message)); it is committed in this ledger: ship it later (share-ledger replicate), check the NATS cluster")
        }
        guard shipped.shippedPosition >= position.rawValue else {
            throw ReplicationError(
                .invalidArguments, "position \(position) is not committed in this ledger (head \(shipped.headPosition)); nothing to wait for")
        }
    }

    /// Acknowledges a command's commit the way `durability` asks: at once for
    /// ``ReplicationDurability/local`` (the LMDB commit is the acknowledgement; replication follows),
    /// after the stream acknowledged its last position for ``ReplicationDurability/replicated``.
    /// `positions` nil (a command that appended nothing) returns at once.
    public func acknowledge(
        _ positions: ClosedRange<LogPosition>?, durability: ReplicationDurability, timeout: Duration = .seconds(10)
    ) async throws(ReplicationError) {
        guard durability == .replicated, let last = positions?.upperBound else { return }
        try await waitUntilShipped(last, timeout: timeout)
    }

    /// Returns once the stream has acknowledged `position` (durability `replicated`: acknowledge a
    /// command to its caller only then).
    ///
    /// - Throws: ``ReplicationError/Code/timedOut`` after `timeout`; the shipper's failure when it stopped.
    public func waitUntilShipped(_ position: LogPosition, timeout: Duration = .seconds(10)) async throws(ReplicationError) {
        try await shippedChanged.wait(
            until: { () throws(ReplicationError) -> Bool in
                let (shipped, failure) = state.withLock { ($0.statistics.shippedPosition, $0.failure) }
                if shipped >= position.rawValue { return true }
                if let failure { throw failure }
                return false
            }, timeout: timeout,
            timedOut: {
                ReplicationError(
                    .timedOut, "position \(position) was not acknowledged by stream \(configuration.shard.stream) within "
                        + "\(timeout) (shipped through \(statistics.shippedPosition)); check the shipper and the NATS cluster")
            })
    }

    /// Closes the NATS connection.
    public func close() { connection.close() }

    /// Refuses to publish unless the ledger's role allows writing now.
    private func checkRole() throws(ReplicationError) {
        let role: LedgerRole
        do {
            role = try LedgerRole.checkWritable(roleFiles, now: configuration.monotonic())
        } catch {
            throw ReplicationError(.notWriter, "nothing was published: \(error.message)")
        }
        if let shard = role.shard, shard != configuration.shard.shard {
            throw ReplicationError(
                .misconfigured, "this ledger is the \(role), not a member of shard \(configuration.shard.shard); nothing was published")
        }
    }

    /// After being fenced: finds the newer term in the stream (the first term marker after
    /// `position`, looking at up to 1,024 messages) and records this ledger as deposed, so that
    /// every process on it stops appending. Returns the marker found.
    private func depose(after position: LogPosition, connection: NATSConnection) async -> TermMarker? {
        let names = configuration.shard
        var found: TermMarker?
        if let last = try? await connection.call("reading stream \(names.stream)", { c throws(ReplicationError) in
            try c.streamState(name: names.stream)
        })?.lastSequence, last > position.rawValue {
            var sequence = position.rawValue + 1
            while sequence <= min(last, position.rawValue + 1_024), found == nil {
                let at = sequence
                let bytes: [UInt8]?
                do {
                    bytes = try await connection.call("reading message \(at) of \(names.stream)") { c throws(ReplicationError) in
                        try c.message(stream: names.stream, sequence: at)
                    }
                } catch {
                    break
                }
                if let bytes, let event = StoredEvent(position: LogPosition(at), bytes: bytes) { found = TermMarker.decode(event) }
                sequence += 1
            }
        }
        let path = log.configuration.path
        let term: UInt64
        switch try? LedgerRole.read(at: path) {
        case .writer(_, let held)?: term = held
        case .deposed?, .replica?: return found
        default: term = 0
        }
        do {
            try LedgerRole.deposed(shard: names.shard, term: term, newerTerm: found?.term).write(at: path)
            WriterLeaseToken.remove(at: path)
        } catch {
            configuration.logger.error("recording the ledger as deposed failed", metadata: ["error": "\(error)"])
        }
        return found
    }

    /// After a failure: connect anew (creating the stream if it is gone) and re-read it before the next batch.
    private func reset() {
        connection.close()
        state.withLock { $0.shipped = nil }
    }

    // MARK: - Internals

    /// Connects (once) and creates or checks the stream.
    private func connect() async throws(ReplicationError) -> NATSConnection {
        let names = configuration.shard
        let replicas = configuration.replicas
        let window = configuration.duplicatesWindow
        let logger = configuration.logger
        return try await connection.get { connection throws(ReplicationError) in
            // Creating a replicated stream waits for the cluster to place it; right after a cluster
            // forms or loses its leader that can time out, or find no peers to place it on, for a
            // few seconds and then succeed (creating or checking the stream is idempotent), so
            // either is retried, half a second apart, for the connection's `formingClusterWindow`
            // (10 s, longer when one call may wait longer) before it is an error.
            var backoff = Backoff(initial: .milliseconds(500), cap: .milliseconds(500))
            var attempt = 0
            let stream = try await backoff.retry(until: ContinuousClock.now + connection.formingClusterWindow, if: { $0.code == .timedOut }) {
                () throws(ReplicationError) in
                try await connection.call("creating stream \(names.stream)") { connection throws(ReplicationError) in
                    try connection.ensureStream(name: names.stream, subject: names.subject, replicas: replicas, duplicatesWindow: window)
                }
            } onRetry: { _, _ in
                attempt += 1
                // During a leader election the stream exists but cannot answer the creation in
                // time: say which of the two it is.
                let exists = (try? await connection.call("reading stream \(names.stream)") { connection throws(ReplicationError) in
                    try connection.streamState(name: names.stream)
                }) != nil
                logger.warning(
                    exists ? "the stream did not answer in time (electing a leader?); retrying" : "creating the stream timed out; retrying",
                    metadata: ["stream": "\(names.stream)", "attempt": "\(attempt)"])
            }
            guard stream.denyDelete, stream.denyPurge else {
                throw ReplicationError(
                    .misconfigured, "stream \(names.stream) allows deleting or purging messages; a ledger's stream must deny both "
                        + "(recreate it, or let the shipper create it)")
            }
            logger.info(
                "shipping", metadata: ["stream": "\(names.stream)", "leader": "\(stream.leader ?? "?")", "last": "\(stream.lastSequence)"])
        }
    }

    /// Where to resume: the stream's last sequence, after checking that the stream holds this ledger's
    /// event there.
    private func resumePoint(_ connection: NATSConnection) async throws(ReplicationError) -> LogHead {
        if let shipped = state.withLock({ state in state.shipped.map { LogHead(position: $0, hash: state.shippedHash) } }) {
            return shipped
        }
        let names = configuration.shard
        guard let stream = try await connection.call("reading stream \(names.stream)", { connection throws(ReplicationError) in
            try connection.streamState(name: names.stream)
        }) else {
            throw ReplicationError(.unavailable, "stream \(names.stream) does not exist (was it deleted?); retry to create it")
        }
        let last = LogPosition(stream.lastSequence)
        let head: LogHead
        let local: StoredEvent?
        do {
            head = try log.head()
            local = last == .start ? nil : try log.storedEvent(at: last)
        } catch {
            throw ReplicationError(error, while: "reading the ledger to resume shipping")
        }
        guard last <= head.position, last == .start || local != nil else {
            throw ReplicationError(
                .diverged, "stream \(names.stream) holds \(last) events but this ledger's head is \(head.position): the stream "
                    + "is ahead; this ledger may not ship to it (follow the stream into a fresh replica instead)")
        }
        var hash = EventHash.zero
        if let local {
            let remote = try await connection.call("reading message \(last) of \(names.stream)") { connection throws(ReplicationError) in
                try connection.message(stream: names.stream, sequence: last.rawValue)
            }
            guard let remote, remote == local.bytes else {
                let remoteHash = remote.flatMap { StoredEvent(position: last, bytes: $0)?.hash.hex } ?? "none"
                throw ReplicationError(
                    .diverged, "stream \(names.stream) holds an event at position \(last) with hash \(remoteHash), this ledger's "
                        + "event there has hash \(local.hash.hex): the histories forked; nothing was published (another "
                        + "writer owns the stream: rebuild this ledger from it with share-ledger follow)")
            }
            hash = local.hash
        }
        state.withLock { state in
            state.shipped = last
            state.shippedHash = hash
            state.statistics.shippedPosition = last.rawValue
        }
        shippedChanged.signal()
        return LogHead(position: last, hash: hash)
    }

    /// Publishes one pipelined batch; returns the new shipped point.
    private func publish(_ events: [StoredEvent], after shipped: LogHead, connection: NATSConnection) async throws(ReplicationError) -> LogHead {
        let names = configuration.shard
        var previousID: String? = nil  // the first of a batch is fenced by its expected sequence alone
        var messages: [NATSConnection.BatchMessage] = []
        messages.reserveCapacity(events.count)
        for event in events {
            let id = ShardNames.messageID(event.position, event.hash)
            messages.append(.init(sequence: event.position.rawValue, data: event.bytes, messageID: id, expectedLastMessageID: previousID))
            previousID = id
        }
        let batch = messages
        let outcomes = try await connection.call("publishing \(events.count) events to \(names.stream)") { connection throws(ReplicationError) in
            try connection.publishBatch(subject: names.subject, batch)
        }
        var acknowledged = shipped
        var problem: String?
        for event in events {
            guard case .stored(let sequence, _) = outcomes[event.position.rawValue] else {
                if case .refused(let code, let text) = outcomes[event.position.rawValue] { problem = "\(text) (JetStream error \(code))" }
                break
            }
            guard sequence == event.position.rawValue else {
                problem = "position \(event.position) was stored at sequence \(sequence)"
                break
            }
            acknowledged = LogHead(position: event.position, hash: event.hash, recordedAtMicros: 0)
        }
        record(acknowledged, count: acknowledged.position.rawValue - shipped.position.rawValue)
        guard acknowledged.position == events[events.count - 1].position else {
            // Something was refused or unanswered: find out from the stream what it holds.
            configuration.logger.info(
                "batch not fully acknowledged; re-reading the stream",
                metadata: ["through": "\(acknowledged.position)", "problem": "\(problem ?? "no answer in time")"])
            state.withLock { state in
                state.shipped = nil
                state.statistics.resyncs += 1
            }
            do {
                return try await resumePoint(connection)
            } catch let error where error.code == .diverged {
                // The stream holds another writer's events: this writer is fenced off for good, and
                // the ledger records it (every process on it stops appending).
                let marker = await depose(after: acknowledged.position, connection: connection)
                let newer = marker.map { " Term \($0.term) (holder \($0.holder)) took over the shard." } ?? ""
                let fenced = ReplicationError(
                    .fenced, "another writer appended to stream \(names.stream) (\(problem ?? "the stream moved on")); this "
                        + "ledger stopped shipping at \(acknowledged.position): its later events are not part of the history.\(newer) "
                        + "It is now recorded as deposed and refuses writes; re-join it as a replica (share-ledger rejoin) or "
                        + "rebuild it from the stream with share-ledger follow. (\(error.message))")
                state.withLock { state in
                    state.failure = fenced
                    state.statistics.fenced = true
                }
                shippedChanged.signal()
                throw fenced
            }
        }
        return acknowledged
    }

    private func record(_ acknowledged: LogHead, count: UInt64) {
        state.withLock { state in
            state.shipped = acknowledged.position
            state.shippedHash = acknowledged.hash
            state.statistics.shippedPosition = acknowledged.position.rawValue
            state.statistics.eventsShipped += count
        }
        shippedChanged.signal()
    }

    private func updateLag(head: LogHead, shipped: LogPosition, oldestUnshipped: StoredEvent?) {
        let positions = head.position.rawValue &- min(head.position.rawValue, shipped.rawValue)
        var seconds = 0.0
        if positions > 0, let oldest = oldestUnshipped, let micros = try? log.event(at: oldest.position)?.recordedAtMicros {
            seconds = max(0, Date().timeIntervalSince1970 - Double(micros) / 1_000_000)
        }
        state.withLock { state in
            state.statistics.headPosition = head.position.rawValue
            state.statistics.lagPositions = positions
            state.statistics.lagSeconds = seconds
        }
        lagPositions.record(Int64(clamping: positions))
        lagSeconds.record(seconds)
    }
}
