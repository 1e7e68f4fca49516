import ByteKeys
import DequeModule
import Foundation
import LMDB
import Logging
import Synchronization

/// An append waiting for the writer thread.
package struct AppendCommand: Sendable {
    package var metadata: CommandMetadata
    package var stream: String
    package var expectedVersion: ExpectedVersion
    package var events: [EventDraft]
    /// Payload bytes, for bounding a batch.
    package var bytes: Int
}

/// Work the writer runs inside its write transaction, for a layer built on the log (the sharing
/// domain's commands, the worker's bookkeeping, an import) or for a raw append.
///
/// The step gets the transaction, a cursor on the `log` database and the batch's ``CommitScope``,
/// through which it appends events (positions, hash chain and stream records are the log's). It
/// returns its caller's result, which the writer hands over only after the commit. A step that
/// throws aborts the whole transaction: the writer then runs the batch's steps again one by one, so
/// only the failing one fails. A step must not block or `await` (it cannot: it is synchronous).
package typealias CommitStep<Output: Sendable> =
    @Sendable (borrowing Transaction, borrowing Cursor, inout CommitScope) throws -> Output

/// A queued step with its caller's continuation, type-erased for the writer's queue.
private struct WriterJob: @unchecked Sendable {
    // @unchecked: `run` and `fail` capture only the (Sendable) step and the caller's continuation;
    // the writer calls them on its own thread, and exactly one of the resumers they return or call
    // resumes the continuation, once.
    package var bytes: Int
    /// Whether the step runs in a transaction of its own (``LogWriter/submit(bytes:alone:replicating:_:)``).
    package var alone = false
    /// Whether the step applies events another ledger committed (a replica's apply): exempt from
    /// the directory's role check, which every other step that appends passes before the commit.
    package var replicating = false
    /// Runs the step; returns what resumes the caller once the transaction has committed.
    package var run: (borrowing Transaction, borrowing Cursor, inout CommitScope) throws -> @Sendable () -> Void
    /// Resumes the caller with an error (the step failed alone, or the writer no longer takes work).
    package var fail: (LedgerError) -> Void
}

/// What a committed transaction did, for observers that keep state derived from the ledger in
/// memory (caches that must forget what a commit changed before any caller hears of it).
package struct CommitNotice: Sendable {
    /// LMDB's id of the committed transaction.
    package var transactionID: UInt64
    /// Whether the head moved (events were appended).
    package var appended: Bool
    /// The keys the steps declared changed (``CommitScope/invalidate(_:)``).
    package var invalidatedKeys: [String]
    /// Whether a step declared that it may have changed anything (``CommitScope/invalidateEverything()``).
    package var invalidatedEverything: Bool
    /// The writer's number of the committed transaction (``CommitScope/serial``).
    package var serial: UInt64
    /// When events were appended: the id the transaction took in the log's own file (the log's
    /// databases are there, so it wrote that file), which differs from ``transactionID`` when the
    /// derived state has a companion environment. Nil when nothing was appended (the transaction may
    /// not have written that file, and then took no id there).
    package var ownTransactionID: UInt64?

    package init(
        transactionID: UInt64, appended: Bool, invalidatedKeys: [String], invalidatedEverything: Bool, serial: UInt64,
        ownTransactionID: UInt64? = nil
    ) {
        self.transactionID = transactionID
        self.appended = appended
        self.invalidatedKeys = invalidatedKeys
        self.invalidatedEverything = invalidatedEverything
        self.serial = serial
        self.ownTransactionID = ownTransactionID
    }
}

/// Told about every commit of the writer, on the writer's thread, after the commit and before any
/// caller of that commit is resumed.
package protocol CommitObserver: Sendable {
    /// Called once per committed write transaction.
    func committed(_ notice: CommitNotice)
    /// Called inside the write transaction after its last step, right before it commits (and
    /// again if the environment retries it): for state outside LMDB that must be durable before
    /// the commit is (the sharing layer's key store). Throwing aborts the transaction.
    func willCommit() throws
    /// As ``willCommit()``, with the transaction about to commit: the observer may record there what
    /// the commit needs of that outside state (the sharing layer: how many keys its events need).
    func willCommit(_ txn: borrowing Transaction) throws
}

extension CommitObserver {
    /// Nothing to make durable.
    package func willCommit() throws {}
    /// As ``willCommit()``.
    package func willCommit(_ txn: borrowing Transaction) throws { try willCommit() }
}

/// The writer's state inside one write transaction, lent to each ``CommitStep`` of the batch.
package struct CommitScope {
    /// The log's databases.
    package let store: LogStore
    /// The time every event of this transaction records, in microseconds since 1970.
    package let recordedAt: Int64
    /// The head as the transaction sees it so far: the last event appended (by this batch or before it).
    package private(set) var head: LogHead
    /// This writer's number of the transaction: every write transaction the writer begins has a new
    /// one, committed or not (LMDB gives an aborted transaction's id to the next one, so its id
    /// cannot tell them apart). State a step keeps in memory for the transaction can be keyed by it.
    package let serial: UInt64
    fileprivate var invalidatedKeys: [String] = []
    fileprivate var invalidatedEverything = false

    /// Declares that the step changed state about `key`, for the writer's ``CommitObserver``.
    package mutating func invalidate(_ key: String) { invalidatedKeys.append(key) }

    /// Declares that the step may have changed anything the observer keeps (maintenance, imports).
    package mutating func invalidateEverything() { invalidatedEverything = true }

    /// Reads the head again after a step wrote events itself (an import) without ``append(_:)``.
    package mutating func reloadHead(_ txn: borrowing Transaction) throws {
        head = try store.readHead(txn)
    }

    /// One event to append, with everything its envelope holds but the log's own fields.
    package struct NewEvent {
        package var metadata: CommandMetadata
        package var stream: String
        package var eventType: String
        package var schemaVersion: UInt32
        package var payload: [UInt8]
        /// Whether the event takes the next version of its stream. An unversioned event (a record of
        /// a read, such as a logged metadata fetch) names the stream it concerns but has stream version
        /// 0 and no back-link, and leaves the stream record alone: appending it writes only the log.
        package var versioned: Bool

        package init(
            metadata: CommandMetadata, stream: String, eventType: String, schemaVersion: UInt32, payload: [UInt8],
            versioned: Bool = true
        ) {
            self.metadata = metadata
            self.stream = stream
            self.eventType = eventType
            self.schemaVersion = schemaVersion
            self.payload = payload
            self.versioned = versioned
        }
    }

    /// Appends one event after the head: its position, stream version, stream back-link and hash
    /// chain come from the transaction's state; it updates the stream record (unless the event is
    /// unversioned). Returns its position.
    @discardableResult
    package mutating func append(_ event: NewEvent, txn: borrowing Transaction, log: borrowing Cursor) throws -> UInt64 {
        guard event.versioned else {
            try appendEnvelope(
                event.metadata, stream: event.stream, streamVersion: 0, streamPrevious: 0, eventType: event.eventType,
                schemaVersion: event.schemaVersion, payload: event.payload, log: log)
            return head.position.rawValue
        }
        let streamKey = LogStore.streamKey(container: event.metadata.container, stream: event.stream)
        let (version, streamLast) = try store.streamRecord(txn, key: streamKey)
        let position = head.position.rawValue + 1
        try appendEnvelope(
            event.metadata, stream: event.stream, streamVersion: version + 1, streamPrevious: streamLast,
            eventType: event.eventType, schemaVersion: event.schemaVersion, payload: event.payload, log: log)
        try store.writeStreamRecord(txn, key: streamKey, version: version + 1, last: position)
        return position
    }

    /// Encodes, chains and appends one envelope at `head + 1` and moves the head; the caller keeps
    /// the stream record.
    fileprivate mutating func appendEnvelope(
        _ metadata: CommandMetadata, stream: String, streamVersion: UInt64, streamPrevious: UInt64, eventType: String,
        schemaVersion: UInt32, payload: [UInt8], log: borrowing Cursor
    ) throws {
        let position = head.position.rawValue + 1
        let (stored, hash) = EnvelopeCodec.encode(
            EnvelopeCodec.Fields(
                position: position, recordedAtMicros: recordedAt, container: metadata.container,
                actor: metadata.actor, commandID: metadata.commandID, correlationID: metadata.correlationID,
                causationID: metadata.causationID, schemaVersion: schemaVersion, stream: stream,
                streamVersion: streamVersion, streamPreviousPosition: streamPrevious, eventType: eventType,
                payload: payload, previousHash: head.hash.bytes))
        try BigEndian.withBytes(of: position) { key in
            try stored.withUnsafeBytes { value in try log.put(key: key, value: value, flags: .append) }
        }
        head = LogHead(position: LogPosition(position), hash: EventHash(bytes: hash)!, recordedAtMicros: recordedAt)
    }

    /// Runs `body` all or nothing: in a transaction nested in `txn`, with its own cursor on the
    /// log. When `body` returns `true` what it appended and wrote joins the batch's transaction; when
    /// it returns `false` (or throws) nothing it did remains, the head and the declared
    /// invalidations included. Returns what `body` returned. `txn` and the batch's log cursor must not
    /// be used inside `body` (LMDB's rule for a parent transaction): use the ones it gets.
    package mutating func allOrNothing(
        _ txn: borrowing Transaction, _ body: (borrowing Transaction, borrowing Cursor, inout CommitScope) throws -> Bool
    ) throws -> Bool {
        let before = self
        var inner = self
        let kept = try txn.nested { child in
            try child.withCursor(store.log) { log in try body(child, log, &inner) }
        }
        self = kept ? inner : before
        return kept
    }

    /// The recorded outcome of a command id in a container, if the ledger has seen it.
    package func commandRecord(_ txn: borrowing Transaction, _ metadata: CommandMetadata) throws
        -> (first: UInt64, count: UInt32, streamVersion: UInt64)?
    {
        try store.commandRecord(txn, key: LogStore.commandKey(container: metadata.container, commandID: metadata.commandID))
    }

    /// Records that a command appended `count` events from `first` (idempotency: the id is then refused
    /// or answered from this record).
    package func recordCommand(
        _ txn: borrowing Transaction, _ metadata: CommandMetadata, first: UInt64, count: UInt32, streamVersion: UInt64
    ) throws {
        try store.writeCommandRecord(
            txn, key: LogStore.commandKey(container: metadata.container, commandID: metadata.commandID), first: first,
            count: count, streamVersion: streamVersion)
    }
}

/// The single writer: one dedicated thread that takes the commands callers submit, runs as many as
/// fit in one write transaction (group commit), commits, and then resumes each caller with its own
/// outcome.
///
/// It knows nothing of what the steps it runs mean: a raw append is a step defined here; the sharing
/// domain submits its own steps (``CommitStep``).
///
/// Rules it keeps (`design.md`, `lmdb-notes.md`):
/// - Every write transaction begins and ends on this thread, inside one synchronous call.
/// - Positions are assigned inside the transaction, from the head read in that same
///   transaction, and become visible only with the commit. Subscribers hear of a new head only after
///   the commit succeeded.
/// - A command that fails validation returns its error and writes nothing; the others of its batch
///   commit. If the batch's transaction fails as a whole (a storage error), each command is run again
///   alone, so one bad command cannot fail the others.
///
/// `@unchecked Sendable`: the queue, flags and observer are guarded by `lock`; everything else is
/// immutable or itself thread-safe.
package final class LogWriter: @unchecked Sendable {
    package typealias Outcome = Result<AppendResult, LedgerError>

    private let store: LogStore
    private let clock: any LedgerClock
    /// The role and lease files of the ledger directory, which every appending batch is checked
    /// against (``LedgerRole``).
    private let roleFiles: LedgerRole.Files
    private let monotonicClock: @Sendable () -> UInt64
    private let logger: Logger
    private let maxBatchCommands: Int
    private let maxBatchBytes: Int
    package let notifier: HeadNotifier

    private let lock = ConditionLock()
    // Guarded by `lock`. (`@exclusivity(unchecked)` here and on the writer thread's own state below:
    // the runtime's access checks see one thread only, which the lock or the thread already orders,
    // and nothing reaches these properties again while one is being changed.)
    @exclusivity(unchecked) private var queue = Deque<WriterJob>()
    @exclusivity(unchecked) private var stopping = false
    @exclusivity(unchecked) private var finished = false
    @exclusivity(unchecked) private var finishWaiters: [CheckedContinuation<Void, Never>] = []
    @exclusivity(unchecked) private var observer: (any CommitObserver)?

    /// Told before each batch and after each commit that appended (``EventLog/Configuration/writerProbe``).
    private let probe: (any WriterProbe)?

    /// Every commit's size in commands, counted into a histogram (for monitoring: always on, one
    /// short lock per commit).
    package let groupCommits = GroupCommitCounter()

    /// CPU time the writer thread spent running batches, in nanoseconds, from the thread's CPU clock
    /// (`CLOCK_THREAD_CPUTIME_ID`, exact). `share-ledger bench` divides it by the actions.
    private let batchNanoseconds = Atomic<UInt64>(0)
    /// The same batches' CPU time as `getrusage(RUSAGE_THREAD)` tells it, in user space (deciding,
    /// applying, encoding) and in the kernel on its behalf (mostly writing and flushing the commit's
    /// pages). Linux charges a running thread's time to these at scheduler ticks, so around one batch
    /// of a few hundred microseconds they are mostly 0 or a whole tick: summed over many batches they
    /// tell the split between user space and the kernel, not the time itself.
    private let userNanoseconds = Atomic<UInt64>(0)
    private let systemNanoseconds = Atomic<UInt64>(0)

    /// Commands in `queue`, readable without the lock so the writer can poll briefly before it sleeps.
    private let pending = Atomic<Int>(0)
    /// How long the writer polls for new work before it sleeps on the condition variable, after a
    /// batch of more than one command. Waking a sleeping thread (on a VM: a halted vCPU) costs tens
    /// of microseconds per hand-off; a short poll keeps a caller that answers quickly from paying
    /// it. After a batch of one there is no poll: one caller at a time sends its next command after
    /// it has built its answer, and the poll only spent CPU, at the same rate (docs/benchmarks.md).
    private let spinBeforeSleep: Duration
    /// The number of commands in the last batch; only the writer's thread touches it.
    @exclusivity(unchecked) private var lastBatchCount = 0
    /// What brings the derived databases up to the head (``EventLog/Configuration/derivedReplay``).
    private let derivedReplay: DerivedReplay?

    /// The last ``CommitScope/serial`` given; only the writer's thread touches it.
    @exclusivity(unchecked) private var transactionSerial: UInt64 = 0
    /// Resumes the callers of a committed batch of more than one command, off the writer's thread.
    /// Resuming a caller enqueues its task on the global executor, which wakes a sleeping pool thread
    /// with a futex call: about 30% of the writer thread's time in a 64-caller run, spent while the
    /// next batch waited. Serial, so the batches it gets are answered in commit order; a batch of one
    /// is resumed on the writer's thread, which saves a one-caller workload a thread hop per answer
    /// (and may answer it before an earlier batch still queued here: every one of them has committed).
    private let resumer = DispatchQueue(label: "ShareLedger.writer.resumer", qos: .userInitiated)

    package init(store: LogStore, configuration: EventLog.Configuration, head: LogHead) {
        self.store = store
        self.clock = configuration.clock
        self.roleFiles = LedgerRole.Files(directory: configuration.path)
        self.monotonicClock = configuration.monotonicClock
        self.logger = configuration.logger
        self.maxBatchCommands = max(1, configuration.maxBatchCommands)
        self.maxBatchBytes = max(1, configuration.maxBatchBytes)
        self.spinBeforeSleep = .microseconds(max(0, configuration.writerPollMicroseconds))
        self.notifier = HeadNotifier(head: head.position.rawValue)
        self.probe = configuration.writerProbe
        self.derivedReplay = configuration.derivedReplay
    }

    /// Starts the writer thread.
    package func start() {
        let thread = Thread { [self] in self.run() }
        thread.name = "ShareLedger.writer"
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Sets the observer told about every later commit (before that commit's callers are resumed).
    package func setCommitObserver(_ observer: any CommitObserver) {
        lock.withLock { self.observer = observer }
    }

    /// Queues `command` and returns its outcome once the commit that holds it is durable (per the
    /// ledger's durability mode).
    package func submit(_ command: AppendCommand) async -> Outcome {
        switch await submit(bytes: command.bytes, { [store] txn, log, scope in try LogWriter.apply(command, store: store, txn: txn, log: log, scope: &scope) }) {
        case .success(let outcome): return outcome
        case .failure(let error): return .failure(error)
        }
    }

    /// Queues `step` for the writer's next transaction and returns its output once the commit that
    /// holds it is durable, or the error that made it fail alone (a storage error, or a thrown
    /// ``LedgerError``), or ``LedgerError/Code/closed``.
    ///
    /// With `alone`, the step gets a transaction of its own: no step runs before it in that
    /// transaction (so everything appended before it is committed: a step that reads the log in
    /// another transaction sees all of it) and none after it (so a step may change what later steps
    /// would have written to, as a rebuild's switch of the read models' copies does).
    ///
    /// A step that appends (moves the head) commits only when the directory's role allows it
    /// (``LedgerRole/checkWritable(at:now:)``, checked in the transaction, before the commit); with
    /// `replicating` (a replica applying another ledger's events) the check is skipped.
    package func submit<Output: Sendable>(
        bytes: Int, alone: Bool = false, replicating: Bool = false,
        _ step: @escaping CommitStep<Output>
    ) async -> Result<Output, LedgerError> {
        // Unsafe (unchecked) continuation: each is resumed exactly once, by the writer after the commit
        // that holds its step (or when the step failed alone), or right here when the writer no
        // longer takes work.
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Result<Output, LedgerError>, Never>) in
            let job = WriterJob(
                bytes: bytes,
                alone: alone,
                replicating: replicating,
                run: { txn, log, scope in
                    let output = try step(txn, log, &scope)
                    return { continuation.resume(returning: .success(output)) }
                },
                fail: { error in continuation.resume(returning: .failure(error)) })
            let accepted = lock.withLock { () -> Bool in
                guard !stopping else { return false }
                queue.append(job)
                pending.add(1, ordering: .releasing)
                if queue.count == 1 { lock.signal() }
                return true
            }
            if !accepted {
                job.fail(LedgerError(.closed, "the ledger is closed; open it again to write"))
            }
        }
    }

    /// Stops taking commands, lets the thread commit what is queued, and returns when it has exited.
    package func stop() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = lock.withLock { () -> Bool in
                stopping = true
                lock.signal()
                if finished { return true }
                finishWaiters.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }

    /// Commands waiting for the writer.
    package var queuedCommands: Int { lock.withLock { queue.count } }

    /// The writer thread's CPU time spent on batches so far, in nanoseconds: `total` exactly, and
    /// the tick-sampled times charged to user space and to the kernel, whose ratio over many batches
    /// is the split of `total` (see `userNanoseconds`).
    package var cpuNanoseconds: (total: UInt64, user: UInt64, system: UInt64) {
        (
            batchNanoseconds.load(ordering: .relaxed), userNanoseconds.load(ordering: .relaxed),
            systemNanoseconds.load(ordering: .relaxed)
        )
    }

    /// The calling thread's CPU time in nanoseconds from its CPU clock, which the kernel brings up
    /// to date as it is read (unlike `getrusage`); 0 where there is none.
    private static func threadCPUClockNanoseconds() -> UInt64 {
        var time = timespec()
        guard clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time) == 0 else { return 0 }
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }

    /// The calling thread's CPU time in user space and in the kernel (`getrusage(RUSAGE_THREAD)`),
    /// in nanoseconds; zeros where the system has no per-thread usage.
    private static func threadCPUNanoseconds() -> (user: UInt64, system: UInt64) {
        #if os(Linux)
        var usage = rusage()
        // RUSAGE_THREAD (1, Linux ≥ 2.6.26) is a GNU extension the Glibc module does not export.
        guard getrusage(__rusage_who_t(1), &usage) == 0 else { return (0, 0) }
        func nanoseconds(_ time: timeval) -> UInt64 { UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_usec) &* 1_000 }
        return (nanoseconds(usage.ru_utime), nanoseconds(usage.ru_stime))
        #else
        return (0, 0)
        #endif
    }

    /// Asks the thread to stop without waiting (used when the log is dropped without `close`).
    package func requestStop() {
        lock.withLock {
            stopping = true
            lock.signal()
        }
    }

    // MARK: - The thread

    private func run() {
        while let batch = nextBatch() {
            let started = LogWriter.threadCPUNanoseconds()
            let startedExactly = LogWriter.threadCPUClockNanoseconds()
            process(batch)
            batchNanoseconds.add(LogWriter.threadCPUClockNanoseconds() &- startedExactly, ordering: .relaxed)
            let ended = LogWriter.threadCPUNanoseconds()
            userNanoseconds.add(ended.user &- started.user, ordering: .relaxed)
            systemNanoseconds.add(ended.system &- started.system, ordering: .relaxed)
        }
        // Every caller of a committed batch has its answer before `stop()` returns.
        resumer.sync {}
        let waiters = lock.withLock { () -> [CheckedContinuation<Void, Never>] in
            finished = true
            defer { finishWaiters.removeAll() }
            return finishWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Waits for work and takes one batch, bounded by count and bytes; `nil` when stopping with an
    /// empty queue.
    private func nextBatch() -> [WriterJob]? {
        if lastBatchCount > 1, pending.load(ordering: .acquiring) == 0 {
            let deadline = ContinuousClock.now + spinBeforeSleep
            var spins = 0
            while pending.load(ordering: .acquiring) == 0 {
                spins &+= 1
                if spins & 63 == 0 && ContinuousClock.now >= deadline { break }
            }
        }
        if let probe {
            // Work is queued before the probe may hold the writer: what is submitted meanwhile joins
            // the batch taken after it.
            let hasWork = lock.withLock { () -> Bool in
                while queue.isEmpty && !stopping { lock.wait() }
                return !queue.isEmpty
            }
            if hasWork { probe.beforeBatch() }
        }
        return lock.withLock { () -> [WriterJob]? in
            while queue.isEmpty && !stopping { lock.wait() }
            guard !queue.isEmpty else { return nil }
            var batch: [WriterJob] = []
            batch.reserveCapacity(min(queue.count, maxBatchCommands))
            var bytes = 0
            while let next = queue.first, batch.count < maxBatchCommands {
                if !batch.isEmpty && (bytes + next.bytes > maxBatchBytes || next.alone || batch[0].alone) { break }
                bytes += next.bytes
                batch.append(queue.removeFirst())
            }
            pending.subtract(batch.count, ordering: .relaxed)
            lastBatchCount = batch.count
            return batch
        }
    }

    /// Runs `batch` in one write transaction of both environments: the derived state in the commit.
    private func process(_ batch: [WriterJob], retried: Bool = false) {
        if store.derivedDamageSeen.load(ordering: .acquiring) {
            // derived/ is derived again from the log before the batch reads it.
            do {
                try store.rederiveDerivedState(replay: derivedReplay, logger: logger)
            } catch {
                for job in batch { job.fail(error) }
                return
            }
        }
        do {
            var derivedAtHead = false
            let (resumers, startHead, scope, txnID, ownTxnID) = try store.environment.write {
                txn -> ([@Sendable () -> Void], LogHead, CommitScope, UInt64, UInt64) in
                // The head is read inside the transaction, not cached: another process may have
                // appended since this thread's last commit (LMDB serializes writers across processes).
                let startHead = try store.readHead(txn)
                let derivedCaughtUp =
                    store.defersDerivedState && !store.followsConsistentCommit(txn)
                    ? try store.catchUpDerivedState(txn, head: startHead, replay: derivedReplay, logger: logger) : false
                let (resumers, scope) = try runSteps(batch, txn, from: startHead, invalidatingEverything: derivedCaughtUp)
                if store.defersDerivedState && (scope.head != startHead || derivedCaughtUp) {
                    try store.writeDerivedPosition(txn, scope.head)
                    // Both files are written (the log appended, or caught up derived/ from it), and
                    // nothing but the steps' own appends and projections: readers of exactly this
                    // commit's snapshots need not look for a gap.
                    derivedAtHead = scope.head != startHead && !scope.invalidatedEverything
                } else {
                    derivedAtHead = false
                }
                try lock.withLock({ self.observer })?.willCommit(txn)
                return (resumers, startHead, scope, txn.id, txn.ownID)
            }
            let newHead = scope.head
            store.consistentCommit.store(
                derivedAtHead
                    ? WordPair(first: UInt(truncatingIfNeeded: txnID), second: UInt(truncatingIfNeeded: ownTxnID))
                    : WordPair(first: 0, second: 0),
                ordering: .releasing)
            groupCommits.record(commands: batch.count)
            // Before any caller hears of the commit (see CommitObserver).
            if let observer = lock.withLock({ self.observer }) {
                observer.committed(
                    CommitNotice(
                        transactionID: txnID, appended: newHead != startHead, invalidatedKeys: scope.invalidatedKeys,
                        invalidatedEverything: scope.invalidatedEverything, serial: scope.serial,
                        ownTransactionID: newHead != startHead ? ownTxnID : nil))
            }
            if newHead != startHead {
                probe?.committed(events: Int(newHead.position.rawValue - startHead.position.rawValue))
                notifier.publish(newHead.position.rawValue)
            }
            if resumers.count == 1 {
                resumers[0]()
            } else {
                resumer.async { for resume in resumers { resume() } }
            }
        } catch {
            failed(batch, error, retried: retried)
        }
    }

    /// Runs the steps of `batch` in `txn`, the head at `startHead`, each appending through one scope
    /// (which, with `invalidatingEverything`, declares that anything may have changed); returns what
    /// resumes each caller, and the scope.
    private func runSteps(
        _ batch: [WriterJob], _ txn: borrowing Transaction, from startHead: LogHead, invalidatingEverything: Bool = false
    ) throws -> ([@Sendable () -> Void], CommitScope) {
        transactionSerial &+= 1
        var scope = CommitScope(
            store: store, recordedAt: max(startHead.recordedAtMicros, clock.nowMicros()), head: startHead,
            serial: transactionSerial)
        if invalidatingEverything { scope.invalidateEverything() }
        var resumers: [@Sendable () -> Void] = []
        resumers.reserveCapacity(batch.count)
        var roleChecked = false
        try txn.withCursor(store.log) { logCursor in
            for job in batch {
                let before = scope.head
                resumers.append(try job.run(txn, logCursor, &scope))
                // Once per transaction, when a step other than a replica's apply appended: the
                // directory's role must allow writing now (a writer's lease, with its margin). A
                // refusal aborts the transaction; run alone, only the appending steps fail.
                if !roleChecked && !job.replicating && scope.head != before {
                    roleChecked = true
                    _ = try LedgerRole.checkWritable(roleFiles, now: monotonicClock())
                }
            }
        }
        return (resumers, scope)
    }

    /// A batch whose transaction failed: each of its commands again alone, or, alone, its error.
    private func failed(_ batch: [WriterJob], _ error: any Error, retried: Bool = false) {
        // A row of derived/ damaged at rest: derived/ is a cache of the log, derived again before
        // the command runs once more (process), instead of failing it.
        let damaged = store.recordDerivedDamage(error)
        if damaged && !retried && batch.count == 1 {
            process(batch, retried: true)
            return
        }
        if batch.count > 1 {
            logger.warning(
                "group commit failed; running its commands one by one",
                metadata: ["commands": "\(batch.count)", "error": "\(error)"])
            for job in batch { process([job]) }
        } else {
            let ledgerError = LedgerError.wrap(error, while: "appending to the log")
            logger.error("append failed", metadata: ["error": "\(ledgerError)"])
            batch[0].fail(ledgerError)
        }
    }

    /// Validates one raw append against the state the transaction sees and appends its events.
    /// Returns a failure (and writes nothing) when the command is refused; throws only for storage
    /// errors, which abort the whole transaction.
    private static func apply(
        _ command: AppendCommand, store: LogStore, txn: borrowing Transaction, log: borrowing Cursor,
        scope: inout CommitScope
    ) throws -> Outcome {
        let metadata = command.metadata
        if let record = try scope.commandRecord(txn, metadata) {
            let first = LogPosition(record.first)
            let last = LogPosition(record.first + UInt64(record.count) - 1)
            return .success(AppendResult(positions: first...last, streamVersion: record.streamVersion, wasAlreadyApplied: true))
        }
        let streamKey = LogStore.streamKey(container: metadata.container, stream: command.stream)
        let (current, streamLast) = try store.streamRecord(txn, key: streamKey)
        guard command.expectedVersion.isSatisfied(by: current) else {
            return .failure(
                LedgerError(
                    .wrongExpectedVersion,
                    "stream \"\(command.stream)\" is at version \(current), the append expected \(command.expectedVersion); "
                        + "read the stream again and decide anew"))
        }
        let first = scope.head.position.rawValue + 1
        var version = current
        var streamPrevious = streamLast
        for draft in command.events {
            version += 1
            try scope.appendEnvelope(
                metadata, stream: command.stream, streamVersion: version, streamPrevious: streamPrevious,
                eventType: draft.type, schemaVersion: draft.schemaVersion, payload: draft.payload, log: log)
            streamPrevious = scope.head.position.rawValue
        }
        let last = scope.head.position.rawValue
        try store.writeStreamRecord(txn, key: streamKey, version: version, last: last)
        try scope.recordCommand(txn, metadata, first: first, count: UInt32(command.events.count), streamVersion: version)
        return .success(
            AppendResult(positions: LogPosition(first)...LogPosition(last), streamVersion: version, wasAlreadyApplied: false))
    }
}

/// The writer's commits so far and their sizes in commands, as a cumulative histogram.
package final class GroupCommitCounter: Sendable {
    /// The buckets' upper bounds (commands per commit): powers of two up to the largest batch a
    /// writer may take by default, then everything above.
    package static let upperBounds: [Int] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1_024]

    private let state = Mutex(EventLog.GroupCommits(commits: 0, commands: 0, buckets: Array(repeating: 0, count: upperBounds.count)))

    func record(commands: Int) {
        let bucket = Self.upperBounds.firstIndex { commands <= $0 }
        state.withLock { counts in
            counts.commits += 1
            counts.commands += UInt64(commands)
            if let bucket { counts.buckets[bucket] += 1 }
        }
    }

    /// The counts so far.
    package var snapshot: EventLog.GroupCommits { state.withLock { $0 } }
}
