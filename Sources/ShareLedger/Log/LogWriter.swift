import DequeModule
import Foundation
import LMDB
import Logging
import Synchronization

/// An append waiting for the writer thread.
struct AppendCommand: Sendable {
    var metadata: CommandMetadata
    var stream: String
    var expectedVersion: ExpectedVersion
    var events: [EventDraft]
    /// Payload bytes, for bounding a batch.
    var bytes: Int
}

/// What the writer runs: a raw append, or a command of the sharing domain.
enum WriterJob: Sendable {
    case append(AppendCommand)
    case domain(DomainCommand)
    /// Bookkeeping that appends no event (the worker's attempts and lease, rebuilds). An error it
    /// throws aborts the transaction, and the writer runs the batch's other jobs again alone, so
    /// nothing it wrote is committed and only it fails.
    case maintenance(MaintenanceWork)

    var bytes: Int {
        switch self {
        case .append(let command): return command.bytes
        case .domain(let command): return command.bytes
        case .maintenance: return 256
        }
    }
}

/// Work for a ``WriterJob/maintenance(_:)`` job; returns a count or flag for its caller.
typealias MaintenanceWork = @Sendable (borrowing Transaction) throws -> Int

/// The outcome of a ``WriterJob``.
enum JobOutcome: Sendable {
    case append(Result<AppendResult, LedgerError>)
    case domain(Result<DomainOutcome, LedgerError>)
    case maintenance(Result<Int, LedgerError>)

    static func failure(_ error: LedgerError, for job: WriterJob) -> JobOutcome {
        switch job {
        case .append: return .append(.failure(error))
        case .domain: return .domain(.failure(error))
        case .maintenance: return .maintenance(.failure(error))
        }
    }
}

/// The single writer: one dedicated thread that takes the commands callers submit, runs as many as
/// fit in one write transaction (group commit), commits, and then resumes each caller with its own
/// outcome.
///
/// Rules it keeps (`design.md`, `lmdb-notes.md`):
/// - Every write transaction begins and ends on this thread, inside one synchronous call.
/// - Positions are assigned inside the transaction, from the head record read in that same
///   transaction, and become visible only with the commit. Subscribers hear of a new head only after
///   the commit succeeded.
/// - A command that fails validation returns its error and writes nothing; the others of its batch
///   commit. If the batch's transaction fails as a whole (a storage error), each command is run again
///   alone, so one bad command cannot fail the others.
///
/// `@unchecked Sendable`: the queue and flags are guarded by `lock`; everything else is immutable or
/// itself thread-safe.
final class LogWriter: @unchecked Sendable {
    typealias Outcome = Result<AppendResult, LedgerError>

    private struct Submission {
        var job: WriterJob
        var continuation: UnsafeContinuation<JobOutcome, Never>
    }

    private let store: LogStore
    private let presenter: Presenter
    private let clock: any LedgerClock
    private let logger: Logger
    private let maxBatchCommands: Int
    private let maxBatchBytes: Int
    let notifier: HeadNotifier

    private let lock = ConditionLock()
    // Guarded by `lock`.
    private var queue = Deque<Submission>()
    private var stopping = false
    private var finished = false
    private var finishWaiters: [CheckedContinuation<Void, Never>] = []

    /// When set, the size (in events) of every committed group, for replaying the same commit pattern
    /// in a baseline benchmark.
    let commitSizes: CommitSizeRecorder?

    /// Commands in `queue`, readable without the lock so the writer can poll briefly before it sleeps.
    private let pending = Atomic<Int>(0)
    /// How long the writer polls for new work before it sleeps on the condition variable. Waking a
    /// sleeping thread (on a VM: a halted vCPU) costs tens of microseconds per hand-off; a short poll
    /// keeps a caller that answers quickly from paying it.
    private let spinBeforeSleep: Duration
    /// Share change tags known in memory; told about every commit (see ``ShareTagTracker``).
    let shareTags: ShareTagTracker

    // Guarded by `lock`: a pause for tests that need to control which commands share a batch.
    private var paused = false

    init(store: LogStore, configuration: EventLog.Configuration, head: LogHead) {
        self.store = store
        self.presenter = Presenter(models: store.models, urlHost: configuration.shareURLHost)
        self.clock = configuration.clock
        self.logger = configuration.logger
        self.maxBatchCommands = max(1, configuration.maxBatchCommands)
        self.maxBatchBytes = max(1, configuration.maxBatchBytes)
        self.spinBeforeSleep = .microseconds(max(0, configuration.writerPollMicroseconds))
        self.notifier = HeadNotifier(head: head.position.rawValue)
        self.commitSizes = configuration.recordsCommitSizes ? CommitSizeRecorder() : nil
        self.shareTags = ShareTagTracker(environment: store.environment, capacity: max(1, configuration.metadataCacheCapacity))
    }

    /// Starts the writer thread.
    func start() {
        let thread = Thread { [self] in self.run() }
        thread.name = "ShareLedger.writer"
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Queues `command` and returns its outcome once the commit that holds it is durable (per the
    /// ledger's durability mode).
    func submit(_ command: AppendCommand) async -> Outcome {
        guard case .append(let outcome) = await submit(job: .append(command)) else {
            preconditionFailure("an append job resumed with another job's outcome")
        }
        return outcome
    }

    /// Queues a domain command and returns its outcome once the commit that holds it is durable.
    func submit(_ command: DomainCommand) async -> Result<DomainOutcome, LedgerError> {
        guard case .domain(let outcome) = await submit(job: .domain(command)) else {
            preconditionFailure("a domain job resumed with another job's outcome")
        }
        return outcome
    }

    /// Runs bookkeeping in the writer's next transaction and returns its result after the commit.
    func submit(maintenance work: @escaping MaintenanceWork) async -> Result<Int, LedgerError> {
        guard case .maintenance(let outcome) = await submit(job: .maintenance(work)) else {
            preconditionFailure("a maintenance job resumed with another job's outcome")
        }
        return outcome
    }

    private func submit(job: WriterJob) async -> JobOutcome {
        // Unsafe (unchecked) continuation: each is resumed exactly once, by the writer after the commit
        // that holds its command, or right here when the writer no longer takes commands.
        await withUnsafeContinuation { continuation in
            let accepted = lock.withLock { () -> Bool in
                guard !stopping else { return false }
                queue.append(Submission(job: job, continuation: continuation))
                pending.add(1, ordering: .releasing)
                if queue.count == 1 { lock.signal() }
                return true
            }
            if !accepted {
                continuation.resume(
                    returning: .failure(LedgerError(.closed, "the ledger is closed; open it again to write"), for: job))
            }
        }
    }

    /// Stops taking commands, lets the thread commit what is queued, and returns when it has exited.
    func stop() async {
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

    /// Holds (`true`) or releases (`false`) the writer before its next batch, so that a test can queue
    /// several commands and have them committed together.
    func setPaused(_ value: Bool) {
        lock.withLock {
            paused = value
            lock.signal()
        }
    }

    /// Commands waiting for the writer.
    var queuedCommands: Int { lock.withLock { queue.count } }

    /// Asks the thread to stop without waiting (used when the log is dropped without `close`).
    func requestStop() {
        lock.withLock {
            stopping = true
            lock.signal()
        }
    }

    // MARK: - The thread

    private func run() {
        while let batch = nextBatch() {
            process(batch)
        }
        let waiters = lock.withLock { () -> [CheckedContinuation<Void, Never>] in
            finished = true
            defer { finishWaiters.removeAll() }
            return finishWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Waits for work and takes one batch, bounded by count and bytes; `nil` when stopping with an
    /// empty queue.
    private func nextBatch() -> [Submission]? {
        if pending.load(ordering: .acquiring) == 0 {
            let deadline = ContinuousClock.now + spinBeforeSleep
            var spins = 0
            while pending.load(ordering: .acquiring) == 0 {
                spins &+= 1
                if spins & 63 == 0 && ContinuousClock.now >= deadline { break }
            }
        }
        return lock.withLock { () -> [Submission]? in
            while (queue.isEmpty || paused) && !stopping { lock.wait() }
            guard !queue.isEmpty else { return nil }
            var batch: [Submission] = []
            batch.reserveCapacity(min(queue.count, maxBatchCommands))
            var bytes = 0
            while let next = queue.first, batch.count < maxBatchCommands {
                if !batch.isEmpty && bytes + next.job.bytes > maxBatchBytes { break }
                bytes += next.job.bytes
                batch.append(queue.removeFirst())
            }
            pending.subtract(batch.count, ordering: .relaxed)
            return batch
        }
    }

    private func process(_ batch: [Submission]) {
        do {
            var changedShares: [String] = []
            var touchedEverything = false
            let (outcomes, startHead, newHead, txnID) = try store.environment.write {
                txn -> ([JobOutcome], LogHead, LogHead, UInt64) in
                changedShares.removeAll()
                // The head is read inside the transaction, not cached: another process may have
                // appended since this thread's last commit (LMDB serializes writers across processes).
                let startHead = try store.readHead(txn)
                let recordedAt = max(startHead.recordedAtMicros, clock.nowMicros())
                var cursorHead = startHead
                var outcomes: [JobOutcome] = []
                outcomes.reserveCapacity(batch.count)
                try txn.withCursor(store.log) { logCursor in
                    for submission in batch {
                        switch submission.job {
                        case .append(let command):
                            outcomes.append(
                                .append(
                                    try apply(command, txn: txn, log: logCursor, head: &cursorHead, recordedAt: recordedAt)))
                        case .domain(let command):
                            outcomes.append(
                                .domain(
                                    try apply(
                                        command, txn: txn, log: logCursor, head: &cursorHead, recordedAt: recordedAt,
                                        changedShares: &changedShares)))
                        case .maintenance(let work):
                            touchedEverything = true
                            // A maintenance job that throws aborts the transaction (it may have
                            // written); the batch is then run again job by job, so only it fails.
                            // Maintenance may read or move the head (an import writes events): it
                            // sees the batch's appends so far, and later jobs append after what it
                            // wrote (subscribers hear of it with the commit).
                            outcomes.append(.maintenance(.success(try work(txn))))
                            cursorHead = try store.readHead(txn)
                        }
                    }
                }
                return (outcomes, startHead, cursorHead, txn.id)
            }
            // Before any caller hears of the commit (see ShareTagTracker).
            shareTags.committed(
                txnID, appended: newHead != startHead, tokens: changedShares, everything: touchedEverything)
            if newHead != startHead {
                commitSizes?.record(Int(newHead.position.rawValue - startHead.position.rawValue))
                notifier.publish(newHead.position.rawValue)
            }
            for (submission, outcome) in zip(batch, outcomes) {
                submission.continuation.resume(returning: outcome)
            }
        } catch {
            if batch.count > 1 {
                logger.warning(
                    "group commit failed; running its commands one by one",
                    metadata: ["commands": "\(batch.count)", "error": "\(error)"])
                for submission in batch { process([submission]) }
            } else {
                let ledgerError = LedgerError.wrap(error, while: "appending to the log")
                logger.error("append failed", metadata: ["error": "\(ledgerError)"])
                batch[0].continuation.resume(returning: .failure(ledgerError, for: batch[0].job))
            }
        }
    }

    /// Validates one command against the state the transaction sees and appends its events. Returns
    /// a failure (and writes nothing) when the command is refused; throws only for storage errors,
    /// which abort the whole transaction.
    private func apply(
        _ command: AppendCommand, txn: borrowing Transaction, log: borrowing Cursor, head: inout LogHead,
        recordedAt: Int64
    ) throws -> Outcome {
        let metadata = command.metadata
        let commandKey = LogStore.commandKey(container: metadata.container, commandID: metadata.commandID)
        if let record = try store.commandRecord(txn, key: commandKey) {
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
        var position = head.position.rawValue
        var previous = head.hash.bytes
        var version = current
        var streamPrevious = streamLast
        for draft in command.events {
            position += 1
            version += 1
            let (stored, hash) = EnvelopeCodec.encode(
                EnvelopeCodec.Fields(
                    position: position, recordedAtMicros: recordedAt, container: metadata.container,
                    actor: metadata.actor, commandID: metadata.commandID, correlationID: metadata.correlationID,
                    causationID: metadata.causationID, schemaVersion: draft.schemaVersion, stream: command.stream,
                    streamVersion: version, streamPreviousPosition: streamPrevious, eventType: draft.type,
                    payload: draft.payload, previousHash: previous))
            try BigEndian.withBytes(of: position) { key in
                try stored.withUnsafeBytes { value in try log.put(key: key, value: value, flags: .append) }
            }
            previous = hash
            streamPrevious = position
        }
        try store.writeStreamRecord(txn, key: streamKey, version: version, last: position)
        let first = head.position.rawValue + 1
        try store.writeCommandRecord(
            txn, key: commandKey, first: first, count: UInt32(command.events.count), streamVersion: version)
        head = LogHead(position: LogPosition(position), hash: EventHash(bytes: previous)!, recordedAtMicros: recordedAt)
        return .success(
            AppendResult(
                positions: LogPosition(first)...LogPosition(position), streamVersion: version, wasAlreadyApplied: false))
    }
}

extension LogWriter {
    /// Decides and applies each step of a domain command in turn (a step sees the steps before it),
    /// appending each step's events and applying them to the read models in this transaction.
    /// Refused steps write nothing; throws only for storage errors, which abort the whole transaction.
    fileprivate func apply(
        _ command: DomainCommand, txn: borrowing Transaction, log: borrowing Cursor, head: inout LogHead,
        recordedAt: Int64, changedShares: inout [String]
    ) throws -> Result<DomainOutcome, LedgerError> {
        let metadata = command.metadata
        let commandKey = LogStore.commandKey(container: metadata.container, commandID: metadata.commandID)
        if let record = try store.commandRecord(txn, key: commandKey) {
            return .failure(
                LedgerError(
                    .serverRejectedRequest, "command \(metadata.commandID) was applied already (at position "
                        + "\(record.first)); send a new command id"))
        }
        let decider = Decider(
            models: store.models, presenter: presenter, container: metadata.container, actor: metadata.actor,
            signedIn: command.signedIn, now: recordedAt)
        let projector = Projector(models: store.models)
        let first = head.position.rawValue + 1
        var results: [Result<Presentation, LedgerError>] = []
        results.reserveCapacity(command.steps.count)
        for step in command.steps {
            let decision = try decider.decide(step, txn)
            for pending in decision.events {
                let position = try appendDomainEvent(
                    pending, metadata: metadata, txn: txn, log: log, head: &head, recordedAt: recordedAt)
                changedShares.append(
                    contentsOf: try projector.apply(
                        pending.event,
                        Projector.Context(
                            position: position, recordedAtMicros: recordedAt, container: metadata.container,
                            actor: metadata.actor),
                        txn))
            }
            switch decision.outcome {
            case .failed(let error): results.append(.failure(error))
            case .present(let present): results.append(.success(present))
            }
        }
        let last = head.position.rawValue
        guard last >= first else { return .success(DomainOutcome(results: results, positions: nil)) }
        try store.writeCommandRecord(txn, key: commandKey, first: first, count: UInt32(last - first + 1), streamVersion: 0)
        return .success(DomainOutcome(results: results, positions: LogPosition(first)...LogPosition(last)))
    }

    private func appendDomainEvent(
        _ pending: PendingEvent, metadata: CommandMetadata, txn: borrowing Transaction, log: borrowing Cursor,
        head: inout LogHead, recordedAt: Int64
    ) throws -> UInt64 {
        let streamKey = LogStore.streamKey(container: metadata.container, stream: pending.stream)
        let (version, streamLast) = try store.streamRecord(txn, key: streamKey)
        let position = head.position.rawValue + 1
        let payload = try pending.event.payload()
        let eventType = pending.event.typeName
        let (stored, hash) = EnvelopeCodec.encode(
            EnvelopeCodec.Fields(
                position: position, recordedAtMicros: recordedAt, container: metadata.container,
                actor: metadata.actor, commandID: metadata.commandID, correlationID: metadata.correlationID,
                causationID: metadata.causationID, schemaVersion: DomainEvent.currentSchemaVersion(of: eventType),
                stream: pending.stream, streamVersion: version + 1, streamPreviousPosition: streamLast, eventType: eventType,
                payload: payload, previousHash: head.hash.bytes))
        try BigEndian.withBytes(of: position) { key in
            try stored.withUnsafeBytes { value in try log.put(key: key, value: value, flags: .append) }
        }
        try store.writeStreamRecord(txn, key: streamKey, version: version + 1, last: position)
        head = LogHead(position: LogPosition(position), hash: EventHash(bytes: hash)!, recordedAtMicros: recordedAt)
        return position
    }
}

/// The sizes of group commits, recorded for benchmarks.
final class CommitSizeRecorder: Sendable {
    private let sizes = Mutex<[Int]>([])

    func record(_ size: Int) { sizes.withLock { $0.append(size) } }
    var all: [Int] { sizes.withLock { $0 } }
}
