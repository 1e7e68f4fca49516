import ByteKeys
import Dispatch
import EventLog
import Foundation
import LMDB
import Logging
import Metrics
import ServiceLifecycle
import SharingDomain
import SwiftProtobuf
import Synchronization

/// Completes residual tasks in the background: the zone an acceptance adds to a participant's
/// shared database, the zone a removal takes away (a `Service` for swift-service-lifecycle).
///
/// - ``run()`` wakes when a commit adds tasks (no polling delay on the happy path), on a timer for
///   retries, and every ``Configuration/pollInterval`` for tasks written by other processes.
/// - Tasks run in scheduling order, in bounded batches. A task waits while an earlier task of the
///   same participant and zone is pending, so accept → remove → accept ends as it should.
/// - Each attempt is recorded durably before it runs, so a crash during an attempt counts as a
///   failed attempt. A failed attempt is retried with exponential backoff and jitter; after
///   ``Configuration/maxAttempts`` the task is parked until an operator retries it.
/// - Each completion appends its event (`ParticipantZoneCreated` / `ParticipantZoneRemoved`),
///   updates the read models and deletes the task in one commit; completing twice has no effect.
/// - At most one worker takes tasks for a ledger at a time, across processes: a lease in LMDB,
///   renewed while the worker runs. A second worker waits and takes over when the lease expires.
/// - Cancellation or a graceful shutdown stops it between batches: the batch in hand finishes.
public final class ResidualTaskWorker: Service, Sendable {
    /// How the worker behaves.
    public struct Configuration: Sendable {
        /// Tasks taken per batch.
        public var batchSize: Int
        /// Attempts before a task is parked.
        public var maxAttempts: Int
        /// The delay before the first retry; it doubles with each further failure.
        public var initialBackoff: Duration
        /// The longest delay between retries.
        public var maxBackoff: Duration
        /// How long a lease lasts without renewal; another worker takes over after that.
        public var leaseDuration: Duration
        /// How often the worker looks for work it was not woken for (tasks written by other
        /// processes) and renews its lease.
        public var pollInterval: Duration
        /// Where the worker logs.
        public var logger: Logger
        /// Save a read-model snapshot (``ShareLedger/saveReadModelSnapshot()``) whenever the head is
        /// this many events past the newest one, so that views as of any point
        /// (`snapshot(at:path:)` of `ShareLedgerAudit`) replay at most this many events. `nil` (the default)
        /// saves none. Only the worker holding the lease saves them, between batches.
        public var snapshotInterval: UInt64?
        /// How many snapshots to keep when the worker saves one: the newest are kept, older ones are
        /// deleted (views of points before the oldest kept one replay from the start). 0 keeps every
        /// one. Each snapshot takes about the read models' size on disk at its point, so keeping all
        /// of them grows faster than the log.
        public var snapshotsKept: Int

        /// The defaults: batches of 256, 8 attempts, backoff from 100 ms to 60 s, 10 s leases, a 1 s
        /// poll, no snapshots (and 10 kept when an interval is set).
        public init(
            batchSize: Int = 256, maxAttempts: Int = 8, initialBackoff: Duration = .milliseconds(100),
            maxBackoff: Duration = .seconds(60), leaseDuration: Duration = .seconds(10), pollInterval: Duration = .seconds(1),
            logger: Logger = Logger(label: "ShareLedger.worker", factory: { _ in SwiftLogNoOpLogHandler() }),
            snapshotInterval: UInt64? = nil, snapshotsKept: Int = 10
        ) {
            self.batchSize = batchSize
            self.maxAttempts = maxAttempts
            self.initialBackoff = initialBackoff
            self.maxBackoff = maxBackoff
            self.leaseDuration = leaseDuration
            self.pollInterval = pollInterval
            self.logger = logger
            self.snapshotInterval = snapshotInterval
            self.snapshotsKept = snapshotsKept
        }
    }

    /// What one pass over the due tasks did.
    public struct PassReport: Sendable, Hashable {
        /// Tasks completed.
        public var completed: Int
        /// Attempts that failed (the tasks are due again later, or parked).
        public var failed: Int
        /// Tasks parked in this pass.
        public var parked: Int
        /// Whether this worker holds the lease (false: another worker does; nothing was done).
        public var holdsLease: Bool
        /// When the next pending task is due, if any.
        public var nextDueAt: Date?
    }

    /// The ledger's store and writer glue: its log, read models, commits, maintenance and reads.
    let store: LedgerStore
    /// The ledger's read-model snapshots, which the worker saves and prunes.
    let snapshots: ReadModelSnapshotStore
    /// The ledger's clock (due times, leases, latencies).
    let clock: any LedgerClock
    /// The ledger's random source (backoff jitter).
    let randomSource: any LedgerRandomSource
    /// The worker's settings.
    public let configuration: Configuration
    let executor: any ResidualTaskExecutor
    /// Identifies this worker in the lease.
    let holder: [UInt8]
    let holderDescription: String

    /// Until when this worker's lease is known to hold (micros); a pass renews it only when a third
    /// of its duration has gone, so the happy path spends no commit on it.
    private let leaseHeldUntil = Mutex<Int64>(0)
    /// Tasks with this id or above were scheduled after this worker took its lease: their first
    /// attempt may run without a commit of its own (see ``runPass(limit:)``).
    private let freshFrom = Mutex<UInt64>(.max)
    /// While ``run()`` waits between passes: the head it saw before its last pass (any commit after
    /// it wakes the worker). Nil while a pass runs. Lets tests know the worker is idle without timing it.
    let idleAfterHead = Mutex<UInt64?>(nil)
    /// The position of the newest read-model snapshot (or of a failed attempt), read from disk once.
    private let snapshotDueAfter = Mutex<UInt64?>(nil)
    /// Tasks completed by ``run()`` so far.
    private let completedByRun = Mutex<Int>(0)
    private let latencyTimer: Metrics.Timer
    private let attemptsCounter: Counter
    private let failuresCounter: Counter
    private let parkedGauge: Gauge

    /// A worker given what it works with: the ledger's store, its snapshots, its clock and random
    /// source (``init(ledger:configuration:executor:)`` takes them from a ``ShareLedger``). Several
    /// worker objects may exist; the lease lets one work at a time.
    package init(
        store: LedgerStore, snapshots: ReadModelSnapshotStore, clock: any LedgerClock,
        randomSource: any LedgerRandomSource, configuration: Configuration, executor: any ResidualTaskExecutor
    ) {
        self.store = store
        self.snapshots = snapshots
        self.clock = clock
        self.randomSource = randomSource
        self.configuration = configuration
        self.executor = executor
        let id = UUID()
        self.holder = withUnsafeBytes(of: id.uuid) { Array($0) }
        self.holderDescription = "pid \(ProcessInfo.processInfo.processIdentifier) worker \(id.uuidString.prefix(8))"
        self.latencyTimer = Metrics.Timer(label: "shareledger_residual_task_latency")
        self.attemptsCounter = Counter(label: "shareledger_residual_task_attempts")
        self.failuresCounter = Counter(label: "shareledger_residual_task_failures")
        self.parkedGauge = Gauge(label: "shareledger_residual_tasks_parked")
    }

    // MARK: - Running

    /// Works until cancelled or shut down gracefully; the batch in hand is finished first. Waits for
    /// the lease when another worker holds it.
    public func run() async throws {
        let log = store.log
        configuration.logger.info("residual-task worker started", metadata: ["holder": "\(holderDescription)"])
        while !Task.isCancelled && !Task.isShuttingDownGracefully && !log.isClosed {
            let seenHead = log.publishedHead
            let report: PassReport
            do {
                report = try await runPass(limit: configuration.batchSize)
            } catch {
                if error.code == .closed { break }
                configuration.logger.error("residual-task pass failed", metadata: ["error": "\(error)"])
                await sleepOrWake(after: seenHead, for: configuration.pollInterval)
                continue
            }
            completedByRun.withLock { $0 += report.completed }
            if report.holdsLease { await saveSnapshotIfDue() }
            if report.completed + report.failed + report.parked > 0 { continue }
            // Renew the lease well before it expires, and look for a free one as often.
            var wait = min(configuration.pollInterval, configuration.leaseDuration / 3)
            if let next = report.nextDueAt {
                // A due time read from the ledger may be anything: clamped, never trapping.
                let untilDue = Duration.microseconds(max(0, CheckedConversion.int64(clamping: next.timeIntervalSinceNow * 1_000_000)))
                wait = min(wait, untilDue + .milliseconds(1))
            }
            await sleepOrWake(after: seenHead, for: wait)
        }
        await releaseLease()
        configuration.logger.info("residual-task worker stopped", metadata: ["holder": "\(holderDescription)"])
    }

    /// Tasks ``run()`` has completed so far (``drain(limit:)`` returns its own count).
    public var tasksCompletedByRun: Int { completedByRun.withLock { $0 } }

    /// Saves a read-model snapshot when ``Configuration/snapshotInterval`` events have been appended
    /// since the newest one, off the cooperative thread pool (it reads every read model), then deletes
    /// the oldest beyond ``Configuration/snapshotsKept``. A failure is logged and tried again only
    /// after another interval (a full disk must not make every pass copy the read models).
    ///
    /// ``run()`` calls it between batches while it holds the lease; call it after ``drain(limit:)``
    /// to do the same in a worker that runs from time to time.
    public func saveSnapshotIfDue() async {
        guard let interval = configuration.snapshotInterval, interval > 0 else { return }
        // Only the lease holder: two workers must not both copy the read models.
        guard leaseHeldUntil.withLock({ $0 }) > clock.nowMicros() else { return }
        let snapshots = self.snapshots
        let head: UInt64
        do { head = try store.log.head().position.rawValue } catch { return }
        let newest = snapshotDueAfter.withLock { known -> UInt64 in
            if let known { return known }
            let saved = snapshots.list().last?.position ?? 0
            known = saved
            return saved
        }
        guard head >= newest &+ interval else { return }
        let kept = configuration.snapshotsKept
        let result: Result<ReadModelSnapshotInfo, LedgerError> = await withCheckedContinuation { continuation in
            DispatchQueue.global(qos: .utility).async {
                continuation.resume(returning: Result { () throws(LedgerError) in
                    let info = try snapshots.save()
                    if kept > 0 { _ = snapshots.delete(keepingNewest: kept) }
                    return info
                })
            }
        }
        switch result {
        case .success(let info):
            snapshotDueAfter.withLock { $0 = info.position }
            configuration.logger.info(
                "saved a read-model snapshot", metadata: ["position": "\(info.position)", "entries": "\(info.entries)"])
        case .failure(let error):
            snapshotDueAfter.withLock { $0 = head }
            configuration.logger.error(
                "saving a read-model snapshot failed; trying again after \(interval) more events",
                metadata: ["error": "\(error)"])
        }
    }

    /// Runs passes until no task is due now (parked tasks and tasks waiting for a retry stay).
    /// Returns the tasks completed.
    ///
    /// - Throws: ``EventLog/LedgerError`` when the ledger cannot be read or written; when another worker holds
    ///   the lease, it returns 0 at once.
    @discardableResult
    public func drain(limit: Int = .max) async throws(LedgerError) -> Int {
        var completed = 0
        while completed < limit {
            let report = try await runPass(limit: min(configuration.batchSize, limit - completed))
            completed += report.completed
            if !report.holdsLease || report.completed + report.failed + report.parked == 0 { break }
        }
        return completed
    }

    /// Waits until a commit moves the head past `head`, `duration` passes, or the task is cancelled
    /// or shut down gracefully.
    private func sleepOrWake(after head: UInt64, for duration: Duration) async {
        let log = store.log
        configuration.logger.trace("residual-task worker idle", metadata: ["afterHead": "\(head)", "for": "\(duration)"])
        idleAfterHead.withLock { $0 = head }
        defer { idleAfterHead.withLock { $0 = nil } }
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await log.waitForCommit(after: head) }
                group.addTask { try? await Task.sleep(for: duration) }
                await group.next()
                group.cancelAll()
            }
        }
    }

    // MARK: - One pass

    /// One bounded batch: renews the lease, takes the due tasks, records their attempts, runs them,
    /// and commits their completions (or their failures).
    public func runPass(limit: Int) async throws(LedgerError) -> PassReport {
        let now = clock.nowMicros()
        guard try await acquireLease(now: now) else {
            return PassReport(completed: 0, failed: 0, parked: 0, holdsLease: false, nextDueAt: nil)
        }
        let (due, nextDue) = try dueTasks(now: now, limit: max(1, limit))
        guard !due.isEmpty else {
            return PassReport(completed: 0, failed: 0, parked: 0, holdsLease: true, nextDueAt: nextDue.map(Presenter.date))
        }
        // Record the attempts first, durably: a crash from here on counts as a failed attempt. The
        // exception, which saves a commit per batch on the happy path: the first attempt of a task
        // scheduled after this worker took its lease runs at once. If the process dies in it, the
        // next worker (which took its lease later) records every attempt before it runs, so a task
        // that kills the process runs at most maxAttempts + 1 times before it is parked.
        let watermark = freshFrom.withLock { $0 }
        let fresh = Set(due.filter { $0.attempts == 0 && $0.id >= watermark }.map(\.id))
        try await recordAttempts(of: due.filter { !fresh.contains($0.id) }, now: now)
        attemptsCounter.increment(by: due.count)

        var (succeeded, failures, parkedNow) = await execute(due)
        try await commitCompletions(of: succeeded)
        if !failures.isEmpty {
            parkedNow += try await recordFailures(failures, fresh: fresh, now: now)
        }
        if parkedNow > 0 { parkedGauge.record(try store.read("counting the parked tasks") { txn in try store.models.parkedTaskCount(txn) }) }
        return PassReport(
            completed: succeeded.count, failed: failures.count, parked: parkedNow, holdsLease: true,
            nextDueAt: nextDue.map(Presenter.date))
    }

    /// Counts an attempt of each of `tasks` in one commit (parking those whose every allowed attempt
    /// was started and none reported back).
    private func recordAttempts(of tasks: [ResidualTask], now: Int64) async throws(LedgerError) {
        guard !tasks.isEmpty else { return }
        let maxAttempts = configuration.maxAttempts
        let started = try await store.maintain { [models = store.models] txn in
            for task in tasks {
                var state = try models.message(WorkerTaskState.self, txn, models.workerTasks, BigEndian.bytes(of: task.id))
                    ?? WorkerTaskState()
                if Int(state.attempts) >= maxAttempts {
                    // Every attempt allowed was started and none reported back: the process died in them.
                    state.parked = true
                    state.lastError = "parked after \(maxAttempts) attempts that did not finish (the process crashed in them?)"
                } else {
                    state.attempts += 1
                    state.lastAttemptAtMicros = now
                }
                try models.put(txn, models.workerTasks, BigEndian.bytes(of: task.id), state)
            }
            return tasks.count
        }
        precondition(started == tasks.count)
    }

    /// Runs each of `due` that has attempts left; returns those that succeeded, those that failed
    /// (with their error) and how many were skipped as parked.
    private func execute(
        _ due: [ResidualTask]
    ) async -> (succeeded: [ResidualTask], failures: [(task: ResidualTask, error: String)], parked: Int) {
        var succeeded: [ResidualTask] = []
        var failures: [(task: ResidualTask, error: String)] = []
        var parked = 0
        for var task in due {
            if task.attempts >= configuration.maxAttempts {
                parked += 1
                continue
            }
            task.attempts += 1
            do {
                try await executor.execute(task)
                succeeded.append(task)
            } catch {
                failures.append((task, "\(error)"))
            }
        }
        return (succeeded, failures, parked)
    }

    /// Commits the completions of `succeeded`: one command per container, each completion its own
    /// step; records each task's latency from its schedule to now.
    private func commitCompletions(of succeeded: [ResidualTask]) async throws(LedgerError) {
        var byContainer: [String: [ResidualTask]] = [:]
        for task in succeeded { byContainer[task.containerIdentifier, default: []].append(task) }
        for (container, tasks) in byContainer.sorted(by: { $0.key < $1.key }) {
            let command = DomainCommand(
                metadata: CommandMetadata(container: container, actor: "system"), signedIn: false,
                steps: tasks.map { .completeTask(taskID: $0.id) }, bytes: tasks.count * 64)
            for result in try await store.commit(command).results { _ = try result.get() }
        }
        let completedAt = clock.nowMicros()
        for task in succeeded {
            let scheduled = CheckedConversion.int64(clamping: task.scheduledAt.timeIntervalSince1970 * 1_000_000)
            let (elapsed, overflow) = completedAt.subtractingReportingOverflow(scheduled)
            let micros = overflow ? Int64.max : max(0, elapsed)
            latencyTimer.recordMicroseconds(micros)
        }
    }

    /// Records `failures` in one commit: each task's next attempt's time (with backoff), or parks it
    /// when its attempts are used up. Returns the tasks parked.
    private func recordFailures(
        _ failures: [(task: ResidualTask, error: String)], fresh: Set<UInt64>, now: Int64
    ) async throws(LedgerError) -> Int {
        failuresCounter.increment(by: failures.count)
        let maxAttempts = configuration.maxAttempts
        let delays = failures.map { backoff(afterAttempts: $0.task.attempts) }
        let parked = try await store.maintain { [models = store.models] txn in
            var parked = 0
            for (failure, delay) in zip(failures, delays) {
                let key = BigEndian.bytes(of: failure.task.id)
                var state = try models.message(WorkerTaskState.self, txn, models.workerTasks, key) ?? WorkerTaskState()
                if fresh.contains(failure.task.id) {
                    state.attempts = 1
                    state.lastAttemptAtMicros = now
                }
                state.lastError = String(failure.error.prefix(1_000))
                if Int(state.attempts) >= maxAttempts {
                    state.parked = true
                    parked += 1
                } else {
                    state.dueAtMicros = now + delay
                }
                try models.put(txn, models.workerTasks, key, state)
            }
            return parked
        }
        for failure in failures {
            configuration.logger.warning(
                "residual task failed",
                metadata: ["task": "\(failure.task.id)", "attempt": "\(failure.task.attempts)", "error": "\(failure.error)"])
        }
        return parked
    }

    /// The delay before the next attempt, in microseconds: `initialBackoff × 2^(attempts-1)`,
    /// capped at `maxBackoff`, times a random factor in [0.5, 1) from the ledger's random source
    /// (``Backoff``).
    func backoff(afterAttempts attempts: Int) -> Int64 {
        let source = randomSource
        let delay = Backoff.delay(
            afterAttempts: attempts, initial: configuration.initialBackoff, cap: configuration.maxBackoff,
            jitter: { source.next() })
        return delay.microseconds
    }

    /// The tasks due now in scheduling order (at most `limit`), skipping parked tasks, tasks waiting
    /// for a retry, and tasks behind an earlier pending task of the same participant and zone; and
    /// the earliest time a skipped task is due. The outbox is read in chunks of 1,024 entries, a short
    /// read transaction each: only this worker (holding the lease) removes tasks, and new ones are
    /// always scheduled after the ones read, so the chunks together see the outbox in order.
    func dueTasks(now: Int64, limit: Int) throws(LedgerError) -> (due: [ResidualTask], nextDueMicros: Int64?) {
        let models = store.models
        var due: [ResidualTask] = []
        var blocked = Set<[UInt8]>()
        var nextDue: Int64?
        var after: UInt64? = nil
        while due.count < limit {
            let last: UInt64? = try store.read("reading the residual tasks") { txn in
                try txn.withCursor(models.outbox) { cursor -> UInt64? in
                    var entry = try after.map { id in try BigEndian.withBytes(of: id + 1) { try cursor.seek(atLeast: $0) } }
                        ?? cursor.first()
                    var read = 0
                    var lastID: UInt64?
                    while let current = entry, due.count < limit, read < 1_024 {
                        defer { entry = try? cursor.next() }
                        read += 1
                        guard let id = BigEndian.uint64(current.key) else { continue }
                        lastID = id
                        let task = try ResidualTaskState(serializedBytes: Array(current.value))
                        let state = try models.message(WorkerTaskState.self, txn, models.workerTasks, BigEndian.bytes(of: id))
                        let key = ReadModels.sharedZoneKey(task.container, user: task.userRecordName, zoneID: task.zoneID)
                        let dueAt = max(task.dueAtMicros, state?.dueAtMicros ?? 0)
                        if blocked.contains(key) { continue }
                        if state?.parked == true || dueAt > now {
                            blocked.insert(key)
                            if state?.parked != true { nextDue = min(nextDue ?? dueAt, dueAt) }
                            continue
                        }
                        blocked.insert(key)
                        due.append(ResidualTask(id: id, task, state))
                    }
                    // A full chunk may have more after it; a short one was the end of the outbox.
                    return read == 1_024 ? lastID : nil
                }
            }
            guard let last else { break }
            after = last
        }
        return (due, nextDue)
    }

    // MARK: - Lease

    static let leaseKey = Array("worker_lease".utf8)

    /// Takes or renews the lease; false when another worker holds an unexpired one.
    func acquireLease(now: Int64) async throws(LedgerError) -> Bool {
        let heldUntil = leaseHeldUntil.withLock { $0 }
        let renewAfter = heldUntil - configuration.leaseDuration.microseconds * 2 / 3
        if now < renewAfter { return true }
        let headBefore = store.log.publishedHead
        let holder = self.holder
        let description = holderDescription
        let expires = now + configuration.leaseDuration.microseconds
        let leases = store.models.workerState
        let acquired = try await store.maintain { txn in
            if let bytes = try txn.get(leases, key: ResidualTaskWorker.leaseKey),
                let lease = try? WorkerLease(serializedBytes: bytes),
                Array(lease.holder) != holder, lease.expiresAtMicros > now
            {
                return 0
            }
            var lease = WorkerLease()
            lease.holder = Data(holder)
            lease.expiresAtMicros = expires
            lease.description_p = description
            try txn.put(leases, key: ResidualTaskWorker.leaseKey, value: try lease.serializedBytes() as [UInt8])
            return 1
        } == 1
        leaseHeldUntil.withLock { $0 = acquired ? expires : 0 }
        if acquired && heldUntil <= now {
            // A new lease (not a renewal): only tasks scheduled from now on are fresh.
            freshFrom.withLock { $0 = (headBefore + 1) << 12 }
        } else if !acquired {
            freshFrom.withLock { $0 = .max }
        }
        return acquired
    }

    /// Gives the lease up, if this worker holds it, so another can take over at once. ``run()`` does
    /// it when it stops; call it when done with ``drain(limit:)``, or the next worker waits for the
    /// lease to expire.
    public func releaseLease() async {
        leaseHeldUntil.withLock { $0 = 0 }
        freshFrom.withLock { $0 = .max }
        let holder = self.holder
        let leases = store.models.workerState
        _ = try? await store.maintain { txn in
            guard let bytes = try txn.get(leases, key: ResidualTaskWorker.leaseKey),
                let lease = try? WorkerLease(serializedBytes: bytes), Array(lease.holder) == holder
            else { return 0 }
            try txn.delete(leases, key: ResidualTaskWorker.leaseKey)
            return 1
        }
    }
}

extension Duration {
    var microseconds: Int64 { CheckedConversion.microseconds(clamping: self) }
}
