import Foundation
import Logging
import ServiceLifecycle
import ShareLedger
import Synchronization

/// Who may write a shard: a lease in the JetStream key-value bucket `shareledger_lease_<shard>`, key
/// `writer.<shard>`, taken and renewed only by compare-and-set on its revision, so of writers racing
/// for it exactly one wins each round. (One bucket per shard: the compare-and-set is the stream-level
/// `Nats-Expected-Last-Sequence`, which holds in a cluster where the per-key check did not; see
/// `NATSKeyValue.put`.)
///
/// The value is JSON: holder, term (one more at every change of holder) and expiry time. A lease
/// whose expiry has passed may be taken by anyone; the holder renews it well before (every third of
/// its duration, say). Expiry compares wall clocks of different machines: keep them within a small
/// fraction of the duration (NTP), and remember that a lease alone does not stop a paused writer —
/// `Nats-Expected-Last-Sequence` on every publish does (``LedgerShipper``).
public final class WriterLease: Sendable {
    /// The lease's content.
    public struct Record: Sendable, Hashable, Codable {
        /// The holder's name (a node id).
        public var holder: String
        /// Incremented at every change of holder.
        public var term: UInt64
        /// When it expires unless renewed, microseconds since 1970.
        public var expiresAtMicros: Int64
    }

    /// The outcome of an attempt.
    public struct Grant: Sendable, Hashable {
        /// The lease as it now is.
        public var record: Record
        /// Its revision in the bucket (what the next compare-and-set must name).
        public var revision: UInt64
        /// Whether this holder holds it.
        public var held: Bool
    }

    /// The bucket of `shard`'s lease.
    public static func bucket(_ shard: ShardNames) -> String { "shareledger_lease_\(shard.shard)" }

    private let keyValue: NATSKeyValue
    /// The shard.
    public let shard: ShardNames
    /// This writer's name.
    public let holder: String
    /// How long a lease lasts unless renewed.
    public let duration: Duration
    private let clock: @Sendable () -> Int64
    /// The revision this instance last wrote (nil before its first taking): only a compare-and-set
    /// on it is a renewal. Another instance with the same holder name (a restarted process, or a
    /// second one started by mistake beside a paused one) is another holder.
    private let ownRevision = Mutex<UInt64?>(nil)

    private init(keyValue: NATSKeyValue, shard: ShardNames, holder: String, duration: Duration, clock: @escaping @Sendable () -> Int64) {
        self.keyValue = keyValue
        self.shard = shard
        self.holder = holder
        self.duration = duration
        self.clock = clock
    }

    /// Opens the lease of `shard` for `holder` (creating the bucket, with `replicas` replicas, when missing).
    public static func open(
        servers: [String], shard: ShardNames, holder: String, duration: Duration = .seconds(5), replicas: Int = 3,
        clock: @escaping @Sendable () -> Int64 = { CheckedConversion.int64(clamping: Date().timeIntervalSince1970 * 1_000_000) }
    ) async throws(ReplicationError) -> WriterLease {
        guard !holder.isEmpty, holder.utf8.count <= 200 else {
            throw ReplicationError(.invalidArguments, "a lease holder's name must be 1 to 200 bytes")
        }
        let connection = try await NATSConnection.connect(servers: servers, name: "share-ledger lease \(holder)")
        let bucket = WriterLease.bucket(shard)
        let keyValue = try await connection.call("opening bucket \(bucket)", timeout: connection.formingClusterCallTimeout) { connection throws(ReplicationError) in
            try connection.keyValue(bucket: bucket, replicas: replicas)
        }
        return WriterLease(keyValue: keyValue, shard: shard, holder: holder, duration: duration, clock: clock)
    }

    /// The lease as it is (nil when nobody ever took it).
    public func current() async throws(ReplicationError) -> Grant? {
        let key = shard.leaseKey
        let holder = self.holder
        let mine = ownRevision.withLock { $0 }
        return try await keyValue.connection.call("reading lease \(key)") { [keyValue] _ throws(ReplicationError) in
            guard let (value, revision) = try keyValue.get(key) else { return nil }
            guard let record = try? JSONDecoder().decode(Record.self, from: Data(value)) else {
                throw ReplicationError(.misconfigured, "lease \(key) in bucket \(keyValue.bucket) does not hold a lease record")
            }
            return Grant(record: record, revision: revision, held: record.holder == holder && mine == revision)
        }
    }

    /// Takes the lease when nobody holds it or it expired, renews it when this instance holds it;
    /// each by one compare-and-set on the revision read. A renewal keeps the term; any other taking
    /// starts a new one. Returns the lease as it is after the attempt (`held` tells whether this
    /// instance has it).
    public func acquire() async throws(ReplicationError) -> Grant {
        let now = clock()
        let (sum, overflow) = now.addingReportingOverflow(CheckedConversion.microseconds(clamping: duration))
        let expires = overflow ? Int64.max : sum
        let existing = try await current()
        var next = Record(holder: holder, term: 1, expiresAtMicros: expires)
        if let existing {
            let live = existing.record.expiresAtMicros > now
            // A renewal keeps the term; any other taking starts a new one, the holder's own expired
            // lease included (a writer that restarts or comes back after its lease ran out is a new
            // tenure: its term marker must fence whatever it or anyone wrote before).
            if live && !existing.held { return existing }
            next.term = existing.record.term + (live ? 0 : 1)
        }
        let key = shard.leaseKey
        let bytes: [UInt8]
        do {
            bytes = Array(try JSONEncoder().encode(next))
        } catch {
            throw ReplicationError(.invalidArguments, "encoding the lease failed: \(error)")
        }
        let revision = existing?.revision ?? 0
        let written = try await keyValue.connection.call("writing lease \(key)") { [keyValue] _ throws(ReplicationError) in
            try keyValue.put(key, bytes, ifRevision: revision)
        }
        if let written {
            ownRevision.withLock { $0 = written }
            return Grant(record: next, revision: written, held: true)
        }
        // Someone else wrote first: report the lease as it is now, not held (whatever holder the
        // record names: only a compare-and-set that succeeded makes this holder the holder).
        var latest = try await current() ?? Grant(record: next, revision: 0, held: false)
        latest.held = false
        return latest
    }

    /// Gives the lease up (it expires now), if this holder holds it. Returns whether it did.
    @discardableResult
    public func release() async throws(ReplicationError) -> Bool {
        guard let existing = try await current(), existing.held else { return false }
        var record = existing.record
        record.expiresAtMicros = 0
        let key = shard.leaseKey
        let bytes = (try? JSONEncoder().encode(record)).map(Array.init) ?? []
        return try await keyValue.connection.call("releasing lease \(key)") { [keyValue] _ throws(ReplicationError) in
            try keyValue.put(key, bytes, ifRevision: existing.revision)
        } != nil
    }

    /// Closes the connection.
    public func close() { keyValue.connection.close() }
}

/// Keeps a writer's lease: renews it every third of its duration while it runs, writes the lease
/// token next to the writer's ledger after every renewal (`ShareLedger.WriterLeaseToken`: the
/// appends of every process on that directory check it before they commit), and reports the moment
/// the lease is not held any more (another writer took it after a renewal came too late, NATS was
/// unreachable until it expired, or it was taken again under a new term). Then the token is
/// removed, so every append on the directory stops at once, and `onLost` is called.
public final class WriterLeaseKeeper: Service, Sendable {
    private let lease: WriterLease
    private let onLost: @Sendable (WriterLease.Record?) -> Void
    /// Until when this writer holds the lease, on `ShareLedger.LedgerRole.monotonicNanos()`
    /// (measured from before the renewal was sent, so never later than the lease's real expiry); nil
    /// when not held.
    private let heldUntil = Mutex<UInt64?>(nil)
    /// The term held (a renewal must keep it).
    private let term: Mutex<UInt64?>
    private let ledgerPath: String?
    private let margin: Duration
    private let monotonic: @Sendable () -> UInt64
    private let logger: Logger

    /// Makes a keeper; `onLost` is called once, with the lease as another holder now has it (nil
    /// when it could not be read). With `ledgerPath`, the lease token is kept in that ledger
    /// directory, appends stopping `margin` before the lease's expiry; `term` is the term already
    /// held (a takeover's), when there is one.
    public init(
        lease: WriterLease, logger: Logger, ledgerPath: String? = nil, term: UInt64? = nil, margin: Duration? = nil,
        monotonic: @escaping @Sendable () -> UInt64 = LedgerRole.monotonicNanos,
        onLost: @escaping @Sendable (WriterLease.Record?) -> Void
    ) {
        self.lease = lease
        self.logger = logger
        self.ledgerPath = ledgerPath
        self.margin = margin ?? WriterLeaseKeeper.defaultMargin(lease.duration)
        self.monotonic = monotonic
        self.term = Mutex(term)
        self.onLost = onLost
    }

    /// The safety margin by default: a quarter of the lease's duration.
    public static func defaultMargin(_ duration: Duration) -> Duration { duration / 4 }

    /// Whether this writer held the lease at the last renewal and it has not expired since.
    public var isHeld: Bool {
        let now = monotonic()
        return heldUntil.withLock { $0.map { now < $0 } ?? false }
    }

    /// Takes the lease (trying every third of its duration while another holds it) and renews it
    /// until cancelled (or graceful shutdown), or until it is lost after being held: then calls
    /// `onLost` and returns. A renewal that fails on NATS errors is retried until the lease's own
    /// expiry has passed, which counts as lost.
    public func run() async throws {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            let attempt = monotonic()
            do {
                let grant = try await lease.acquire()
                let heldTerm = term.withLock { $0 }
                if !grant.held || (heldTerm != nil && grant.record.term != heldTerm) {
                    let wasHeld = heldUntil.withLock { state in
                        defer { state = nil }
                        return state != nil
                    } || heldTerm != nil
                    logger.warning("writer lease not held", metadata: ["holder": "\(grant.record.holder)", "term": "\(grant.record.term)"])
                    if wasHeld {
                        lose(grant.record)
                        return
                    }
                } else {
                    let until = attempt &+ WriterLeaseKeeper.nanoseconds(lease.duration)
                    term.withLock { $0 = grant.record.term }
                    if let ledgerPath {
                        let token = WriterLeaseToken(
                            shard: lease.shard.shard, term: grant.record.term, holder: lease.holder, heldUntilNanos: until,
                            marginNanos: WriterLeaseKeeper.nanoseconds(margin))
                        do {
                            try token.write(at: ledgerPath)
                        } catch {
                            logger.error("writing the lease token failed", metadata: ["error": "\(error)"])
                        }
                    }
                    heldUntil.withLock { $0 = until }
                }
            } catch {
                logger.warning("renewing the writer lease failed", metadata: ["error": "\(error)"])
                let now = monotonic()
                let expired = heldUntil.withLock { state in
                    guard let until = state, now >= until else { return false }
                    state = nil
                    return true
                }
                if expired {
                    lose(nil)
                    return
                }
            }
            try? await Task.sleep(for: lease.duration / 3)
        }
    }

    private func lose(_ record: WriterLease.Record?) {
        if let ledgerPath { WriterLeaseToken.remove(at: ledgerPath) }
        onLost(record)
    }

    static func nanoseconds(_ duration: Duration) -> UInt64 {
        let parts = duration.components
        return UInt64(max(0, parts.seconds)) &* 1_000_000_000 &+ UInt64(max(0, parts.attoseconds / 1_000_000_000))
    }
}
