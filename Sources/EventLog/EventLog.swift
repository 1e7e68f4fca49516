import ByteKeys
import Foundation
import LMDB
import Logging
import Synchronization

/// The append-only, hash-chained event log of a ledger, stored in LMDB.
///
/// - Appends from any number of concurrent callers are group-committed by one writer thread: each
///   caller resumes after the commit that holds its command, with its own positions.
/// - Positions are gapless from 1 and become visible only when committed, so a reader never sees a
///   later event before an earlier one.
/// - Each event's hash covers the previous event's hash and the event's canonical bytes
///   (`docs/log-format.md`), so any change to history shows in ``verifyChain(chunkSize:parallelism:after:)``.
/// - Reads are short read transactions; long scans go in chunks with a fresh transaction each.
///
/// ```swift
/// let log = try EventLog.open(.init(path: "/var/lib/ledger"))
/// let result = try await log.append(
///     [EventDraft(type: "example.Created", payload: bytes)],
///     to: "share/abc", expectedVersion: .noStream,
///     metadata: CommandMetadata(container: "iCloud.com.example", actor: "_owner"))
/// for try await event in log.events(after: .start) { ... }
/// await log.close()
/// ```
public final class EventLog: Sendable {
    package let store: LogStore
    package let writer: LogWriter
    private let logger: Logger
    /// The configuration the log was opened with.
    public let configuration: Configuration

    private init(store: LogStore, writer: LogWriter, configuration: Configuration) {
        self.store = store
        self.writer = writer
        self.configuration = configuration
        self.logger = configuration.logger
    }

    deinit {
        // Dropped without `close()`: let the writer thread finish what is queued and exit; the
        // environment closes when the thread lets go of it.
        writer.requestStop()
    }

    /// Opens the log at `configuration.path` (creating it when allowed) and starts its writer thread.
    ///
    /// - Throws: ``LedgerError`` with ``LedgerError/Code/notALedger`` when the path holds no ledger
    ///   (or something else), ``LedgerError/Code/formatTooNew`` when a newer ShareLedger wrote it,
    ///   ``LedgerError/Code/corruptedData`` when its head record and its log disagree,
    ///   ``LedgerError/Code/readOnly`` when opened read-only but an earlier release wrote it and opening
    ///   it for writing once must add databases first.
    public static func open(_ configuration: Configuration) throws(LedgerError) -> EventLog {
        let store = try LogStore.open(configuration)
        do {
            try store.catchUpDerivedState(replay: configuration.derivedReplay, logger: configuration.logger)
        } catch {
            // A log the derived state cannot be brought up to (a damaged event) still opens, for
            // `verify` and `audit` to report it: readers see the state as of the derived position,
            // and the writer tries again before each batch (which fails while the damage is there).
            configuration.logger.error(
                "the derived state could not be brought up to the log", metadata: ["error": "\(error)"])
        }
        store.catchUpDerivedStateInMemory(replay: configuration.derivedReplay, logger: configuration.logger)
        let head: LogHead
        do {
            head = try store.environment.read { txn in try store.readHead(txn) }
        } catch {
            throw LedgerError.wrap(error, while: "reading the head of \(configuration.path)")
        }
        let writer = LogWriter(store: store, configuration: configuration, head: head)
        if !configuration.readOnly { writer.start() }
        configuration.logger.info(
            "opened ledger",
            metadata: [
                "path": "\(configuration.path)", "head": "\(head.position)",
                "durability": "\(configuration.durability.rawValue)",
                "staleReadersCleared": "\(store.environment.staleReadersCleared)",
            ])
        return EventLog(store: store, writer: writer, configuration: configuration)
    }

    /// When a read of this process met a row of `derived/` damaged at rest, empties `derived/` and
    /// derives it again from the log; returns whether it did. For the opener of a ledger, before its
    /// first write: the writer thread does the same before each batch.
    package func rederiveDerivedStateIfDamaged() throws(LedgerError) -> Bool {
        guard !configuration.readOnly, store.derivedDamageSeen.load(ordering: .acquiring) else { return false }
        try store.rederiveDerivedState(replay: configuration.derivedReplay, logger: logger)
        return true
    }

    /// Commits what is queued, stops the writer thread, wakes subscriptions (they end), and closes
    /// the storage. Later calls fail with ``LedgerError/Code/closed``.
    public func close() async {
        if !configuration.readOnly { await writer.stop() }
        writer.notifier.close()
        do {
            try store.markDerivedFlushed()
        } catch {
            // The next open for writing then takes the derived state as possibly unflushed: after a
            // machine crash it derives it again, which costs time, not data.
            logger.warning("could not mark the derived state flushed", metadata: ["error": "\(error)"])
        }
        store.close()
        logger.info("closed ledger", metadata: ["path": "\(configuration.path)"])
    }

    // MARK: - Appending

    /// Appends `events` to `stream` as one command, atomically, and returns once they are committed.
    ///
    /// - Parameters:
    ///   - events: 1 to ``Limits/maxEventsPerCommand`` events.
    ///   - stream: The stream (aggregate) they belong to, 1 to 200 bytes, no NUL.
    ///   - expectedVersion: The version the stream must be at; ``ExpectedVersion/any`` for no check.
    ///   - metadata: Who sends the command and its id. A command id the ledger has seen before in
    ///     the same container appends nothing and returns the first outcome, with
    ///     ``AppendResult/wasAlreadyApplied`` set.
    /// - Throws: ``LedgerError`` with ``LedgerError/Code/invalidArguments`` for input outside the limits,
    ///   ``LedgerError/Code/wrongExpectedVersion`` when the expectation does not hold,
    ///   ``LedgerError/Code/storageFull`` when the maximum size is reached,
    ///   ``LedgerError/Code/operationCancelled`` when the task was cancelled before the command was
    ///   submitted (once submitted, a command runs to its outcome), ``LedgerError/Code/closed``.
    ///   A failed append writes nothing.
    @discardableResult
    public func append(
        _ events: [EventDraft], to stream: String, expectedVersion: ExpectedVersion = .any,
        metadata: CommandMetadata
    ) async throws(LedgerError) -> AppendResult {
        guard !configuration.readOnly else {
            throw LedgerError(.readOnly, "the ledger at \(configuration.path) was opened read-only")
        }
        let bytes = try EventLog.validate(events, stream: stream, metadata: metadata)
        if Task.isCancelled {
            throw LedgerError(.operationCancelled, "the task was cancelled before the append was submitted")
        }
        let command = AppendCommand(
            metadata: metadata, stream: stream, expectedVersion: expectedVersion, events: events, bytes: bytes)
        return try await writer.submit(command).get()
    }

    /// The event types of the sharing layer: written only through its API, never by a raw append.
    package static let reservedTypePrefix = "shareledger.events."

    /// Checks an append against the limits; returns its payload bytes.
    package static func validate(_ events: [EventDraft], stream: String, metadata: CommandMetadata) throws(LedgerError) -> Int {
        guard !events.isEmpty else {
            throw LedgerError(.invalidArguments, "an append needs at least one event")
        }
        guard events.count <= Limits.maxEventsPerCommand else {
            throw LedgerError(
                .limitExceeded, "an append holds at most \(Limits.maxEventsPerCommand) events, this one has "
                    + "\(events.count); split it into several commands")
        }
        try checkName(stream, "stream name")
        try checkName(metadata.container, "container")
        try checkName(metadata.actor, "actor")
        var bytes = 0
        for (index, event) in events.enumerated() {
            try checkName(event.type, "event type of event \(index)")
            guard !event.type.hasPrefix(reservedTypePrefix) else {
                throw LedgerError(
                    .invalidArguments, "event \(index) has type \(event.type): the shareledger.events namespace is "
                        + "written only by the sharing API, which keeps the read models in step")
            }
            guard event.schemaVersion >= 1 else {
                throw LedgerError(.invalidArguments, "event \(index) has schema version 0; versions start at 1")
            }
            guard event.payload.count <= Limits.maxPayloadBytes else {
                throw LedgerError(
                    .limitExceeded, "event \(index) has a \(event.payload.count)-byte payload; the limit is "
                        + "\(Limits.maxPayloadBytes) bytes")
            }
            bytes += event.payload.count + event.type.utf8.count + 128
        }
        return bytes
    }

    private static func checkName(_ value: String, _ what: String) throws(LedgerError) {
        let count = value.utf8.count
        guard count > 0 else { throw LedgerError(.invalidArguments, "the \(what) is empty") }
        guard count <= Limits.maxNameBytes else {
            throw LedgerError(
                .invalidArguments, "the \(what) is \(count) bytes long; the limit is \(Limits.maxNameBytes) bytes")
        }
        let hasNUL =
            value.utf8.withContiguousStorageIfAvailable { $0.contains(0) } ?? value.utf8.contains(0)
        guard !hasNUL else {
            throw LedgerError(.invalidArguments, "the \(what) contains a NUL character")
        }
    }

    // MARK: - Reading

    /// The last committed event's position and hash.
    public func head() throws(LedgerError) -> LogHead {
        try readLog("reading the head") { txn in try store.readHead(txn) }
    }

    /// The event at `position`, or `nil` when there is none.
    public func event(at position: LogPosition) throws(LedgerError) -> EventEnvelope? {
        try readLog("reading the event at \(position)") { txn in
            try BigEndian.withBytes(of: position.rawValue) { key in
                try txn.withValue(store.log, key: key) { try EnvelopeCodec.decode($0, key: position.rawValue) }
            }
        }
    }

    /// The first position at or after `position` that holds an entry, without decoding it; nil when
    /// none does. For walking past a gap in a damaged log in one step instead of one lookup per
    /// missing position.
    package func nextStoredPosition(atLeast position: LogPosition) throws(LedgerError) -> UInt64? {
        try readLog("finding the entry at or after \(position)") { txn in
            try txn.withCursor(store.log) { cursor in
                try BigEndian.withBytes(of: position.rawValue) { key in
                    try cursor.seek(atLeast: key).flatMap { BigEndian.uint64($0.key) }
                }
            }
        }
    }

    /// Up to `limit` events after `position`, in order, read in one short transaction.
    public func events(after position: LogPosition, limit: Int) throws(LedgerError) -> [EventEnvelope] {
        guard limit > 0 else { return [] }
        return try readLog("reading events after \(position)") { txn in
            try txn.withCursor(store.log) { cursor in
                var out: [EventEnvelope] = []
                out.reserveCapacity(min(limit, 4096))
                var entry = try BigEndian.withBytes(of: position.rawValue + 1) { try cursor.seek(atLeast: $0) }
                while let current = entry, out.count < limit {
                    guard let key = BigEndian.uint64(current.key) else {
                        throw LedgerError(.corruptedData, "a log key is \(current.key.count) bytes, expected 8")
                    }
                    out.append(try EnvelopeCodec.decode(current.value, key: key))
                    entry = try cursor.next()
                }
                return out
            }
        }
    }

    /// The current version of `stream` in `container` (the number of its events; 0 when it does not exist).
    public func streamVersion(_ stream: String, container: String) throws(LedgerError) -> UInt64 {
        try read("reading the version of stream \(stream)") { txn in
            try store.streamRecord(txn, key: LogStore.streamKey(container: container, stream: stream)).version
        }
    }

    /// The positions of the events of `stream` in `container` after `position`, oldest first, at most
    /// `limit` (the oldest ones after `position`).
    ///
    /// Found by walking the stream's backward chain from its last event (one point read per event,
    /// newest first), in chunks of a fresh read transaction each, so the cost grows with the events of
    /// the stream after `position`, not with the log.
    public func streamPositions(
        _ stream: String, container: String, after position: LogPosition = .start, limit: Int = .max
    ) throws(LedgerError) -> [LogPosition] {
        let key = LogStore.streamKey(container: container, stream: stream)
        var newestFirst: [LogPosition] = []
        var next = try read("reading stream \(stream)") { txn in try store.streamRecord(txn, key: key).last }
        while next > position.rawValue {
            next = try read("reading stream \(stream)") { txn in
                var current = next
                var steps = 0
                while current > position.rawValue && steps < 4096 {
                    let fields = try BigEndian.withBytes(of: current) { k in
                        try txn.withValue(store.log, key: k) { EnvelopeCodec.scanChainFields($0)?.streamPreviousPosition }
                    }
                    guard let previous = fields ?? nil, previous < current else {
                        throw LedgerError(
                            .corruptedData, "the stream chain of \(stream) is broken at position \(current)")
                    }
                    newestFirst.append(LogPosition(current))
                    current = previous
                    steps += 1
                }
                return current
            }
        }
        return Array(newestFirst.reversed().prefix(limit))
    }

    /// A live subscription: every event after `position`, in order, each exactly once; it catches up
    /// in chunks, then follows new commits as they happen. It holds no read transaction while it
    /// waits. It ends when the task is cancelled or the log is closed.
    public func events(after position: LogPosition) -> EventSubscription {
        EventSubscription(log: self, after: position)
    }

    /// Runs `body` in a short read transaction, mapping errors to ``LedgerError``.
    package func read<R>(_ doing: @autoclosure () -> String, _ body: (borrowing Transaction) throws -> R) throws(LedgerError) -> R {
        do {
            return try store.read(body)
        } catch {
            throw namingTheFile(LedgerError.wrap(error, while: doing()))
        }
    }

    /// ``read(_:_:)`` for a body that returns nothing: not generic, so a caller that keeps its
    /// own result (specialized in its module) makes no generic metadata at run time.
    package func readWithoutResult(_ doing: @autoclosure () -> String, _ body: (borrowing Transaction) throws -> Void) throws(LedgerError) {
        do {
            try store.read(body)
        } catch {
            throw namingTheFile(LedgerError.wrap(error, while: doing()))
        }
    }

    /// Runs `body` in a short read transaction of the log alone (the log, its checkpoints and
    /// operational state; not the databases derived from it), mapping errors to ``LedgerError``:
    /// what it reads does not depend on how far `derived/` goes.
    package func readLog<R>(_ doing: @autoclosure () -> String, _ body: (borrowing Transaction) throws -> R) throws(LedgerError) -> R {
        do {
            return try store.readAsStored(body)
        } catch {
            throw namingTheFile(LedgerError.wrap(error, while: doing()))
        }
    }

    /// `error`, naming the ledger's data file when it reports damage found in a value (a row, an
    /// entry) without saying where: the operator must know which file to restore.
    package func namingTheFile(_ error: LedgerError) -> LedgerError {
        let file = (configuration.path as NSString).appendingPathComponent("data.mdb")
        guard error.code == .corruptedData, !error.message.contains(file), !error.message.contains("derived/") else {
            return error
        }
        var named = error
        // With the derived state apart, a damaged row or record may be in derived/, a cache.
        named.message +=
            store.defersDerivedState
            ? " (in \(file) when it is an event of the log; in derived/data.mdb, a cache of the log rebuilt from it on "
                + "the next open for writing, when it is a read model or a stream or command record: `share-ledger audit` "
                + "tells which)"
            : " (in \(file))"
        return named
    }

    // MARK: - Statistics

    /// Counters of the log.
    public struct Statistics: Sendable, Hashable, Codable {
        /// Number of events in the log.
        public var events: UInt64
        /// Position of the last event.
        public var headPosition: UInt64
        /// Hash of the last event, hexadecimal.
        public var headHash: String
        /// Number of streams.
        public var streams: Int
        /// Number of command ids recorded (for idempotency).
        public var commands: Int
        /// Current map size in bytes (grows on demand).
        public var mapSizeBytes: Int
        /// Bytes in use in the data file (`data.mdb`: the log, checkpoints, operational state).
        public var usedBytes: Int
        /// Bytes in use in the derived state's data file (`derived/data.mdb`: stream and command
        /// records, read models, indexes); nil when the ledger keeps everything in one file.
        public var derivedUsedBytes: Int?
        /// The derived state's current map size in bytes; nil when the ledger keeps everything in
        /// one file.
        public var derivedMapSizeBytes: Int?
        /// The format version recorded in the ledger (a ledger opened read-only keeps the version it
        /// was written with; opened for writing, it is marked with the current one).
        public var formatVersion: UInt32
        /// The durability mode this process opened it with.
        public var durability: String
    }

    /// The writer's group commits since this process opened the log: how many, how many commands
    /// they held, and how their sizes fall into buckets (for a histogram of batch sizes).
    public struct GroupCommits: Sendable, Hashable {
        /// Write transactions the writer committed.
        public var commits: UInt64
        /// Commands those transactions held (refused ones included: each was decided in the commit).
        public var commands: UInt64
        /// Commits per bucket of ``upperBounds``, not cumulative: `buckets[i]` counts the commits of
        /// more than `upperBounds[i - 1]` and at most `upperBounds[i]` commands. Commits larger than
        /// the last bound are in ``commits`` only.
        public var buckets: [UInt64]

        /// The buckets' upper bounds, in commands per commit: 1, 2, 4, ... 1,024.
        public var upperBounds: [Int] { GroupCommitCounter.upperBounds }
    }

    /// The writer's group commits so far (no transaction: counters in memory, reset when the log is
    /// opened). Commits by other processes are not counted.
    public var groupCommits: GroupCommits { writer.groupCommits.snapshot }

    /// Counters of the log, read in one transaction.
    public func statistics() throws(LedgerError) -> Statistics {
        try statistics { txn, log throws in log }
    }

    /// The log's counters and what `more` reads alongside them, in the same read transaction (a layer
    /// above adds its own counters from the same snapshot).
    package func statistics<R>(
        _ more: (borrowing Transaction, Statistics) throws -> R
    ) throws(LedgerError) -> R {
        let info: EnvironmentInfo
        let derivedInfo: EnvironmentInfo?
        do {
            info = try store.environment.info()
            derivedInfo = store.environment.hasCompanion ? try store.environment.info(companion: true) : nil
        } catch {
            throw LedgerError(error, while: "reading the ledger's size")
        }
        return try read("reading statistics") { txn in
            let head = try store.readHead(txn)
            let log = Statistics(
                events: UInt64(try txn.statistics(store.log).entries),
                headPosition: head.position.rawValue,
                headHash: head.hash.hex,
                streams: try txn.statistics(store.streams).entries,
                commands: try txn.statistics(store.commands).entries,
                mapSizeBytes: info.mapSize,
                usedBytes: info.usedBytes,
                derivedUsedBytes: derivedInfo?.usedBytes,
                derivedMapSizeBytes: derivedInfo?.mapSize,
                formatVersion: try store.storedFormatVersion(txn) ?? LogStore.formatVersion,
                durability: configuration.durability.rawValue)
            return try more(txn, log)
        }
    }

    /// The head position this process's writer last published (after its commit), without a read
    /// transaction. Commits by other processes are not seen here.
    package var publishedHead: UInt64 { writer.notifier.currentHead }

    /// Returns once this process's writer has published a head after `position`, or the log closed,
    /// or the task was cancelled.
    package func waitForCommit(after position: UInt64) async { await writer.notifier.wait(after: position) }

    /// Whether the log was closed.
    package var isClosed: Bool { writer.notifier.isClosed }

    /// Commands submitted and not yet taken by the writer.
    package var queuedCommands: Int { writer.queuedCommands }

    /// The CPU time the writer thread has spent on batches since the log was opened, in nanoseconds:
    /// the exact total, and the tick-sampled user and kernel times whose ratio splits it (for
    /// `share-ledger bench`: writer CPU per action).
    package var writerCPUNanoseconds: (total: UInt64, user: UInt64, system: UInt64) { writer.cpuNanoseconds }

    /// The size in bytes of the stored entry at `position` (envelope and hash), for benchmarks that
    /// replay the same sizes against raw LMDB.
    package func storedSize(at position: LogPosition) throws(LedgerError) -> Int? {
        try readLog("reading the entry at \(position)") { txn in
            try BigEndian.withBytes(of: position.rawValue) { key in try txn.withValue(store.log, key: key) { $0.count } }
        }
    }

    /// Flushes everything to disk now (useful in the relaxed and no-sync modes).
    public func sync() throws(LedgerError) {
        do {
            try store.environment.sync()
        } catch {
            throw LedgerError(error, while: "flushing the ledger")
        }
    }
}
