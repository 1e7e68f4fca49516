import Foundation
import Logging
import ShareLedger

/// A standby's takeover of a shard's writing (docs/architecture.md, "Fencing by term").
public enum Failover {
    /// What a takeover did.
    public struct Takeover: Sendable, Hashable {
        /// The lease held.
        public var grant: WriterLease.Grant
        /// Where the term marker stands in the stream and the ledger (the ledger's head now).
        public var markerPosition: LogPosition
        /// Until when the lease is held, on `ShareLedger.LedgerRole.monotonicNanos()`.
        public var heldUntilNanos: UInt64
    }

    /// Makes the ledger of `follower` the writer of the lease's shard:
    ///
    /// 1. Records the directory's role as a replica of the shard (a standby takes no writes) and
    ///    refuses a deposed writer (re-join it first). A writer restarting becomes a replica when its
    ///    log is a prefix of the stream; when it holds commits the stream lacks and nobody wrote
    ///    since, it stays a writer without a lease (it takes no writes) and ships them if it takes
    ///    the lease first; otherwise it is recorded deposed (``ReplicationError/Code/fenced``).
    /// 2. Follows the stream while it waits for the lease to be free or expired, and takes it by
    ///    compare-and-set (of standbys racing, one wins; a new holder means a new term).
    /// 3. Applies the stream until the ledger holds every event the stream holds; a ledger that
    ///    holds more (a writer restarting with commits it had not shipped) ships them first, once
    ///    its events at the stream's head are checked equal.
    /// 4. Publishes a ``TermMarker`` at the stream's head + 1 with `Nats-Expected-Last-Sequence` =
    ///    head, with more than `margin` of the lease left. When an older writer slipped an event in
    ///    meanwhile, catches up again and retries: the marker goes in only right after everything
    ///    the stream holds. From then on, any older writer's publish expects a sequence the stream
    ///    is past, and fails.
    /// 5. Applies the marker to the ledger (from the bytes the stream acknowledged), writes the
    ///    lease token, and records the role `ShareLedger.LedgerRole.writer(shard:term:)`: appends
    ///    of every process on the directory commit from now on, while the lease is kept
    ///    (``WriterLeaseKeeper`` with the same `margin`).
    ///
    /// Every wait is bounded by `timeout`, the catch-up and the marker once the lease is held also
    /// by `catchUpTimeout`; NATS errors (a node lost, a leader elected) are retried until then.
    ///
    /// - Throws: ``ReplicationError/Code/timedOut`` when the lease stayed held or the catch-up did not
    ///   finish in time (the role stays replica; run it again); ``ReplicationError/Code/fenced`` for a
    ///   deposed ledger; ``ReplicationError/Code/diverged`` when the ledger's history forked from the
    ///   stream's; NATS and ledger errors. A takeover that fails after taking the lease releases it.
    ///   `streamReplicas` is the replication of the stream when the takeover creates it (the first
    ///   writer of a shard).
    public static func takeOver(
        lease: WriterLease, follower: LedgerFollower, timeout: Duration = .seconds(30), margin: Duration? = nil,
        catchUpTimeout: Duration = .seconds(60), streamReplicas: Int = 3, monotonic: @escaping @Sendable () -> UInt64 = LedgerRole.monotonicNanos
    ) async throws(ReplicationError) -> Takeover {
        let deadline = ContinuousClock.now + timeout
        let shard = lease.shard
        let ledger = follower.ledger
        let margin = WriterLeaseKeeper.nanoseconds(margin ?? WriterLeaseKeeper.defaultMargin(lease.duration))
        try await becomeStandby(log: ledger.log, shard: shard, servers: follower.configuration.servers, deadline: deadline)

        // 2. Wait for the lease, following meanwhile.
        var grant: WriterLease.Grant?
        var acquiredAt: UInt64 = 0
        var lastError: ReplicationError?
        while true {
            do {
                acquiredAt = monotonic()
                grant = try await lease.acquire()
                lastError = nil
            } catch where error.isTransient {
                lastError = error
            }
            if let grant, grant.held { break }
            if Task.isCancelled {
                throw ReplicationError(.timedOut, "the takeover of shard \(shard.shard) was cancelled while standing by")
            }
            follower.configuration.logger.debug(
                "standing by", metadata: ["holder": "\(grant?.record.holder ?? "?")", "term": "\(grant?.record.term ?? 0)",
                    "error": "\(lastError.map(\.description) ?? "none")"])
            let now = ContinuousClock.now
            guard now < deadline else {
                throw ReplicationError(
                    .timedOut, "the writer lease of shard \(shard.shard) "
                        + (lastError.map { "could not be read or taken in \(timeout): \($0.message)" }
                            ?? "is still held by \(grant?.record.holder ?? "?") after \(timeout); the writer is alive, or its lease is not yet expired"))
            }
            do {
                // A standby follows while it waits: it serves reads and takes over after a short catch-up.
                try await follower.catchUp(timeout: min(lease.duration / 3, deadline - now, .seconds(2)))
            } catch where error.isTransient {
                // Retried at the next round.
            }
            try? await Task.sleep(for: min(lease.duration / 10, .milliseconds(200)))
        }
        guard let grant else { throw ReplicationError(.timedOut, "the writer lease of shard \(shard.shard) was not taken") }
        let heldUntil = acquiredAt &+ WriterLeaseKeeper.nanoseconds(lease.duration)
        // The catch-up and the marker, once the lease is held, are bounded apart from the wait.
        let termDeadline = min(deadline, ContinuousClock.now + catchUpTimeout)
        do {
            return try await startTerm(
                grant: grant, lease: lease, follower: follower, heldUntil: heldUntil, margin: margin, deadline: termDeadline,
                streamReplicas: streamReplicas, monotonic: monotonic)
        } catch {
            // Let the next standby take it without waiting for it to expire.
            _ = try? await lease.release()
            throw error
        }
    }

    /// Step 1: the directory becomes a standby (a replica of the shard). Its checks against the
    /// stream are retried on NATS errors (a node lost, a leader elected) until `deadline`.
    private static func becomeStandby(
        log: EventLog, shard: ShardNames, servers: [String], deadline: ContinuousClock.Instant
    ) async throws(ReplicationError) {
        let path = log.configuration.path
        let role: LedgerRole
        do {
            role = try LedgerRole.read(at: path)
        } catch {
            throw ReplicationError(error, while: "reading the ledger's role")
        }
        switch role {
        case .deposed:
            throw ReplicationError(
                .fenced, "this ledger is a \(role): its unshipped events are not part of the history; re-join it as a "
                    + "replica (share-ledger rejoin) or rebuild it from the stream before it stands by again")
        case .writer(let other, _) where other != shard.shard, .replica(let other) where other != shard.shard:
            throw ReplicationError(.invalidArguments, "this ledger is the \(role), not a member of shard \(shard.shard)")
        default:
            break
        }
        WriterLeaseToken.remove(at: path)
        if case .writer(_, let term) = role {
            // A writer restarting (after a crash, say): a replica only if its log is a prefix of the
            // stream. Holding commits the stream lacks, it stays a writer without a lease (it takes
            // no writes) and ships them if it takes the lease before anyone else writes; when the
            // stream holds something else where it has events, it is deposed.
            do {
                _ = try await retrying(until: deadline) { () throws(ReplicationError) in
                    try await rejoin(log: log, servers: servers, shard: shard)
                }
                return
            } catch where error.code == .diverged {
                if try await retrying(until: deadline, { () throws(ReplicationError) in
                    try await holdsOnlyUnshippedCommits(log: log, servers: servers, shard: shard)
                }) { return }
                do {
                    try LedgerRole.deposed(shard: shard.shard, term: term, newerTerm: nil).write(at: path)
                } catch {
                    throw ReplicationError(error, while: "recording the ledger's role")
                }
                throw ReplicationError(
                    .fenced, "this ledger (the writer of term \(term)) holds events the stream does not: it is now recorded "
                        + "as deposed; move it away and stand by with a fresh directory (\(error.message))")
            }
        }
        do {
            try LedgerRole.replica(shard: shard.shard).write(at: path)
        } catch {
            throw ReplicationError(error, while: "recording the ledger's role")
        }
    }

    /// Runs `body` again after NATS errors (``ReplicationError/Code/unavailable``,
    /// ``ReplicationError/Code/timedOut``) until `deadline`, backing off between attempts.
    public static func retrying<T>(
        until deadline: ContinuousClock.Instant, _ body: () async throws(ReplicationError) -> T
    ) async throws(ReplicationError) -> T {
        var backoff = Backoff(initial: .milliseconds(100), cap: .seconds(2))
        return try await backoff.retry(until: deadline, if: { $0.isTransient && !Task.isCancelled }, body)
    }

    /// Whether the ledger holds the whole stream and more: the stream's last event is the ledger's
    /// event at that position (the commits after it were never shipped, and nobody wrote since).
    private static func holdsOnlyUnshippedCommits(log: EventLog, servers: [String], shard: ShardNames) async throws(ReplicationError) -> Bool {
        let connection = try await NATSConnection.connect(servers: servers, name: "share-ledger standby \(shard.shard)")
        defer { connection.close() }
        let last = try await connection.call("reading stream \(shard.stream)") { c throws(ReplicationError) in
            try c.streamState(name: shard.stream)
        }?.lastSequence ?? 0
        let local: StoredEvent?
        do {
            local = last == 0 ? nil : try log.storedEvent(at: LogPosition(last))
        } catch {
            throw ReplicationError(error, while: "reading the ledger")
        }
        if last == 0 { return true }
        guard let local else { return false }
        let remote = try await connection.call("reading message \(last) of \(shard.stream)") { c throws(ReplicationError) in
            try c.message(stream: shard.stream, sequence: last)
        }
        return remote == local.bytes
    }

    /// Steps 3 to 5; returns the takeover (the lease as last renewed, the marker's position).
    ///
    /// The lease is renewed (one compare-and-set on the revision this instance wrote) whenever less
    /// than half of it is left: a catch-up or a stream's creation on a loaded machine may take longer
    /// than the lease, and a takeover that let its lease run out would fail, release it, and leave the
    /// shard without a writer while every standby did the same in turn. A renewal that finds the
    /// lease taken by another holder ends the takeover (``ReplicationError/Code/leaseHeld``); one made
    /// after it expired but before anybody took it holds it under the next term, which the marker then names.
    private static func startTerm(
        grant initialGrant: WriterLease.Grant, lease: WriterLease, follower: LedgerFollower, heldUntil initialHeldUntil: UInt64,
        margin: UInt64, deadline: ContinuousClock.Instant, streamReplicas: Int, monotonic: @Sendable () -> UInt64
    ) async throws(ReplicationError) -> Takeover {
        let shard = lease.shard
        let ledger = follower.ledger
        let path = ledger.log.configuration.path
        var grant = initialGrant
        var heldUntil = initialHeldUntil
        let leaseNanos = WriterLeaseKeeper.nanoseconds(lease.duration)
        /// Renews the lease when less than half of it is left.
        func keepLease() async throws(ReplicationError) {
            let now = monotonic()
            guard now >= heldUntil || heldUntil - now < leaseNanos / 2 else { return }
            let renewedAt = monotonic()
            let renewed = try await lease.acquire()
            guard renewed.held else {
                throw ReplicationError(
                    .leaseHeld, "the writer lease of shard \(shard.shard) was taken by \(renewed.record.holder) (term "
                        + "\(renewed.record.term)) before this takeover finished; this ledger stays a replica")
            }
            grant = renewed
            heldUntil = renewedAt &+ leaseNanos
        }
        var configuration = ShipperConfiguration(servers: follower.configuration.servers, shard: shard, logger: follower.configuration.logger)
        configuration.callTimeout = follower.configuration.callTimeout
        configuration.replicas = streamReplicas
        configuration.checksRole = false  // the lease was just taken; this shipper only sends what the stream lacks
        let connection = try await NATSConnection.connect(
            servers: follower.configuration.servers, name: "share-ledger takeover \(shard.shard)", wait: follower.configuration.callTimeout)
        defer { connection.close() }
        var backoff = Backoff(initial: .milliseconds(50), cap: .seconds(1))
        return try await backoff.retry(until: deadline, if: { $0.isTransient }) { () throws(ReplicationError) in
            while true {
                guard ContinuousClock.now < deadline else {
                    throw ReplicationError(.timedOut, "the takeover of shard \(shard.shard) did not finish in time; run it again")
                }
                try await keepLease()
                // 3. Catch up; ship what only this ledger holds (a restarted writer's unshipped commits).
                guard
                    let head = try await catchUpAndShip(
                        follower: follower, connection: connection, configuration: configuration, deadline: deadline)
                else { continue }
                try await keepLease()
                let marker = TermMarker(shard: shard.shard, term: grant.record.term, holder: grant.record.holder)
                // A marker of ours whose acknowledgement was lost arrived with the catch-up: it is
                // in the stream and the ledger already.
                if try holds(marker, at: head, in: ledger) {
                    try recordWriter(path: path, grant: grant, shard: shard, heldUntil: heldUntil, margin: margin)
                    return Takeover(grant: grant, markerPosition: head.position, heldUntilNanos: heldUntil)
                }
                // 4. The marker, with the lease's margin to spare.
                let now = monotonic()
                guard now < heldUntil, heldUntil - now > margin else {
                    throw ReplicationError(
                        .leaseHeld, "the writer lease of shard \(shard.shard) has less than its safety margin left before the "
                            + "term marker could be published; run the takeover again")
                }
                guard
                    let event = try await publish(
                        marker, after: head, connection: connection, shard: shard, logger: follower.configuration.logger)
                else { continue }
                // 5. The marker into the ledger, then the token and the role.
                do throws(LedgerError) {
                    try await ledger.applyReplicated([event])
                } catch {
                    throw ReplicationError(error, while: "applying the term marker")
                }
                try recordWriter(path: path, grant: grant, shard: shard, heldUntil: heldUntil, margin: margin)
                return Takeover(grant: grant, markerPosition: event.position, heldUntilNanos: heldUntil)
            }
        } onRetry: { error, _ in
            follower.configuration.logger.warning("taking over failed; retrying", metadata: ["error": "\(error)"])
        }
    }

    /// Step 3: catches the follower's ledger up with the stream, then ships what only the ledger
    /// holds (a restarted writer's unshipped commits). Returns the ledger's head, which is then the
    /// stream's last event; nil when an older writer published after the catch-up (catch up again).
    private static func catchUpAndShip(
        follower: LedgerFollower, connection: NATSConnection, configuration: ShipperConfiguration,
        deadline: ContinuousClock.Instant
    ) async throws(ReplicationError) -> LogHead? {
        let ledger = follower.ledger
        let shard = configuration.shard
        try await follower.catchUp(timeout: max(deadline - ContinuousClock.now, .seconds(1)))
        var head = try readHead(ledger)
        let stream = try await connection.call("reading stream \(shard.stream)") { connection throws(ReplicationError) in
            try connection.streamState(name: shard.stream)
        }
        let last = stream?.lastSequence ?? 0
        if last > head.position.rawValue { return nil }
        if stream == nil || last < head.position.rawValue {
            // The shipper creates a missing stream, checks the stream's last event against the
            // ledger's (diverged when they differ), then publishes only what the stream lacks.
            let shipper = LedgerShipper(log: ledger.log, configuration: configuration)
            defer { shipper.close() }
            try await shipper.shipAvailable()
            head = try readHead(ledger)
        }
        return head
    }

    /// The ledger's head.
    private static func readHead(_ ledger: ShareLedger) throws(ReplicationError) -> LogHead {
        do {
            return try ledger.log.head()
        } catch {
            throw ReplicationError(error, while: "reading the ledger's head")
        }
    }

    /// Whether the event at `head` is `marker` (one of this takeover's, whose acknowledgement was lost).
    private static func holds(_ marker: TermMarker, at head: LogHead, in ledger: ShareLedger) throws(ReplicationError) -> Bool {
        let headEvent: StoredEvent?
        do {
            headEvent = head.position == .start ? nil : try ledger.log.storedEvent(at: head.position)
        } catch {
            throw ReplicationError(error, while: "reading the ledger's head")
        }
        guard let headEvent else { return false }
        return TermMarker.decode(headEvent) == marker
    }

    /// Step 4: publishes `marker` as the event after `head`, expecting the stream's last sequence to
    /// be the head's. Returns the event published; nil when the stream moved first (an older writer
    /// published after the catch-up: catch up again, then retry).
    private static func publish(
        _ marker: TermMarker, after head: LogHead, connection: NATSConnection, shard: ShardNames, logger: Logger
    ) async throws(ReplicationError) -> StoredEvent? {
        let event = marker.event(after: head, nowMicros: Int64(Date().timeIntervalSince1970 * 1_000_000))
        let expected = head.position.rawValue
        let outcome = try await connection.call("publishing the term marker to \(shard.stream)") { connection throws(ReplicationError) in
            try connection.publish(
                subject: shard.subject, data: event.bytes, messageID: ShardNames.messageID(event.position, event.hash),
                expectedLastSequence: expected)
        }
        switch outcome {
        case .wrongLastSequence:
            logger.notice("the stream moved before the term marker; catching up again", metadata: ["shard": "\(shard.shard)"])
            return nil
        case .stored(let sequence, _):
            guard sequence == event.position.rawValue else {
                throw ReplicationError(
                    .diverged, "the term marker was stored at sequence \(sequence), not \(event.position); the stream "
                        + "\(shard.stream) does not hold this ledger's history")
            }
            return event
        }
    }

    /// Writes the lease token and records the role writer.
    private static func recordWriter(
        path: String, grant: WriterLease.Grant, shard: ShardNames, heldUntil: UInt64, margin: UInt64
    ) throws(ReplicationError) {
        do {
            try WriterLeaseToken(
                shard: shard.shard, term: grant.record.term, holder: grant.record.holder, heldUntilNanos: heldUntil, marginNanos: margin
            ).write(at: path)
            try LedgerRole.writer(shard: shard.shard, term: grant.record.term).write(at: path)
        } catch {
            throw ReplicationError(error, while: "recording the ledger's role")
        }
    }

    /// What ``rejoin(log:servers:shard:)`` found.
    public struct Rejoined: Sendable, Hashable, Codable {
        /// The shard.
        public var shard: String
        /// The ledger's head.
        public var headPosition: UInt64
        /// The stream's last sequence.
        public var streamPosition: UInt64
    }

    /// Makes the ledger of `log` (a deposed writer, or a standby) a replica of `shard` again when
    /// its log is a prefix of the stream: its last event equals the stream's event at that position
    /// (the hash chain makes that the whole prefix). Otherwise it holds events that are not part of
    /// the history and stays as it is.
    ///
    /// - Throws: ``ReplicationError/Code/diverged`` when the log is not a prefix of the stream;
    ///   ``ReplicationError/Code/notWriter`` for a writer (step it down first); NATS errors.
    public static func rejoin(log: EventLog, servers: [String], shard: ShardNames) async throws(ReplicationError) -> Rejoined {
        let path = log.configuration.path
        let role: LedgerRole
        let head: LogHead
        let local: StoredEvent?
        do {
            role = try LedgerRole.read(at: path)
            head = try log.head()
            local = head.position == .start ? nil : try log.storedEvent(at: head.position)
        } catch {
            throw ReplicationError(error, while: "reading the ledger")
        }
        if case .writer = role, let token = WriterLeaseToken.read(at: path), token.boot == WriterLeaseToken.currentBoot,
            token.heldUntilNanos > LedgerRole.monotonicNanos()
        {
            throw ReplicationError(.notWriter, "this ledger is the \(role): stop its failover first (a graceful stop steps down to a replica)")
        }
        if let other = role.shard, other != shard.shard {
            throw ReplicationError(.invalidArguments, "this ledger is a member of shard \(other), not \(shard.shard)")
        }
        let connection = try await NATSConnection.connect(servers: servers, name: "share-ledger rejoin")
        defer { connection.close() }
        let last = try await connection.call("reading stream \(shard.stream)") { c throws(ReplicationError) in
            try c.streamState(name: shard.stream)
        }?.lastSequence ?? 0
        let position = head.position.rawValue
        if position > 0 {
            let remote: [UInt8]? = position <= last
                ? try await connection.call("reading message \(position) of \(shard.stream)") { c throws(ReplicationError) in
                    try c.message(stream: shard.stream, sequence: position)
                } : nil
            guard let remote, remote == local?.bytes else {
                throw ReplicationError(
                    .diverged, "this ledger's event at position \(position) is not the stream's (the stream "
                        + (position > last ? "ends at \(last)" : "holds another event there")
                        + "): it holds events that are not part of the history; move the directory away and follow into a "
                        + "fresh one")
            }
        }
        WriterLeaseToken.remove(at: path)
        do {
            try LedgerRole.replica(shard: shard.shard).write(at: path)
        } catch {
            throw ReplicationError(error, while: "recording the ledger's role")
        }
        return Rejoined(shard: shard.shard, headPosition: position, streamPosition: last)
    }
}
