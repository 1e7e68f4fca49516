import ByteKeys
import Crypto
import EventLog
import Foundation
import LMDB
import SharingDomain
import SwiftProtobuf
import Synchronization

/// A sharing ledger: CloudKit's sharing model (shares, participants, share metadata, accepting) as
/// an event-sourced, hash-chained log in LMDB with read models kept in the same commits.
///
/// Open one per directory and process, share it (it is `Sendable`), and act through a
/// ``Container`` handle for a signed-in user:
///
/// ```swift
/// let ledger = try ShareLedger.open(.init(path: "/var/lib/share-ledger"))
/// try await ledger.registerUser("_alice", in: "iCloud.com.example.notes", emailAddress: "alice@example.com")
/// let alice = ledger.container("iCloud.com.example.notes", userRecordName: "_alice")
/// let zone = try await alice.save(RecordZone(zoneID: RecordZoneID(zoneName: "Notes")))
/// ...
/// await ledger.close()
/// ```
public final class ShareLedger: Sendable {
    /// The event log underneath (for reads, subscriptions and chain verification).
    public let log: EventLog
    /// The configuration the ledger was opened with.
    public let configuration: Configuration
    /// The store and writer glue: the read models, commits, maintenance and reads.
    package let store: LedgerStore
    /// The read-model snapshots in the ledger's directory.
    package let snapshots: ReadModelSnapshotStore
    /// The in-process residual-task worker and the task running it, when the configuration asks for one.
    private let workerState = Mutex<(worker: ResidualTaskWorker?, task: Task<Void, Never>?)>((nil, nil))
    var inProcessWorker: ResidualTaskWorker? { workerState.withLock { $0.worker } }

    /// The read models' databases, in the log's environment.
    package var models: ReadModels { store.models }
    /// Share change tags known in memory; told about every commit by the log's writer.
    var shareTags: ShareTagTracker { store.shareTags }
    /// Presented metadata, reused while its share is unchanged (nil when the configuration turns it off).
    var metadataCache: MetadataCache? { store.metadataCache }

    private init(log: EventLog, configuration: Configuration) {
        self.log = log
        self.configuration = configuration
        store = LedgerStore(
            log: log, sealsPersonalData: configuration.sealsPersonalData,
            metadataCacheCapacity: configuration.metadataCacheCapacity, readOnly: configuration.readOnly,
            path: configuration.path, shareURLHost: configuration.shareURLHost)
        snapshots = ReadModelSnapshotStore(log: log, ledgerPath: configuration.path, logger: configuration.logger)
        // A replica or a deposed writer takes no writes: the worker (which appends) stays off there.
        let role = try? LedgerRole.read(at: configuration.path)
        let takesWrites: Bool
        switch role {
        case .replica, .deposed: takesWrites = false
        default: takesWrites = true
        }
        if let workerConfiguration = configuration.residualTaskWorker, !configuration.readOnly, takesWrites {
            let worker = ResidualTaskWorker(ledger: self, configuration: workerConfiguration)
            // The worker lives exactly as long as the open ledger: started here, cancelled and awaited
            // in close(). An unstructured task is that lifetime; to put the worker under your own
            // structure instead, set configuration.residualTaskWorker = nil and run a
            // ResidualTaskWorker as a Service.
            let task = Task<Void, Never> { try? await worker.run() }
            workerState.withLock { $0 = (worker, task) }
        }
    }

    /// Opens (or creates) the ledger at `configuration.path`, and starts the in-process residual-task
    /// worker unless `configuration.residualTaskWorker` is nil.
    ///
    /// - Throws: ``EventLog/LedgerError`` as `EventLog.open(_:)` does, and
    ///   `LedgerError.Code.invalidArguments` (before anything is opened or created) when
    ///   `configuration.shareURLHost` cannot be the host of a URL.
    public static func open(_ configuration: Configuration) throws(LedgerError) -> ShareLedger {
        try checkShareURLHost(configuration.shareURLHost)
        let log = try openLog(configuration.log, random: configuration.randomSource)
        if !configuration.readOnly {
            do {
                do {
                    try destroyKeysOfForgottenUsers(log)
                } catch {
                    // The scan met a row of derived/ damaged at rest: derived again, scanned again.
                    guard try log.rederiveDerivedStateIfDamaged() else { throw LedgerError.wrap(error, while: "opening the ledger") }
                    try destroyKeysOfForgottenUsers(log)
                }
            } catch {
                Task { await log.close() }
                throw LedgerError.wrap(error, while: "opening the ledger")
            }
        }
        return ShareLedger(log: log, configuration: configuration)
    }

    /// Opens only the event log of the ledger at `configuration.path`, without the sharing layer:
    /// for reading, verifying and raw appends. Unlike `EventLog.open(_:)`, it opens (and, for a
    /// new or older ledger opened for writing, creates) the read models' databases too, so that the
    /// directory can later be opened as a ``ShareLedger``, read-only included.
    ///
    /// It also loads the ledger's key store (`personal-data.keys`, made when the ledger is opened for
    /// writing), which seals and opens personal data; a damaged key store, or one missing, emptied or
    /// cut back past the keys the log's committed events need, is `LedgerError.Code.corruptedData`
    /// and is left as it is (restore it from its backup; without one, ``replaceLostKeyStore(at:randomSource:)``).
    public static func openLog(_ configuration: EventLog.Configuration) throws(LedgerError) -> EventLog {
        try openLog(configuration, random: SystemRandomSource())
    }

    static func openLog(_ configuration: EventLog.Configuration, random: any LedgerRandomSource) throws(LedgerError) -> EventLog {
        let log = try EventLog.open(ReadModels.ledgerConfiguration(configuration))
        do {
            let meta = log.store.meta
            let witness = try log.read("reading what the log needs of the key store") { txn in
                try txn.get(meta, key: PersonalDataVault.Witness.metaKey).flatMap(PersonalDataVault.Witness.init)
            }
            let vault = try PersonalDataVault.forLedger(
                at: configuration.path, writable: !configuration.readOnly, random: random, witness: witness)
            if witness == nil, !configuration.readOnly, vault.writable, vault.holdsPersonKeys {
                // A ledger whose commits predate the record (or a copy given a key store): its keys
                // may be in use, so from now on a store cut back past them is refused.
                try log.store.environment.write { txn in
                    guard try txn.get(meta, key: PersonalDataVault.Witness.metaKey) == nil else { return }
                    try txn.put(
                        meta, key: PersonalDataVault.Witness.metaKey,
                        value: PersonalDataVault.Witness(serial: vault.serial, destroyed: 0).bytes)
                }
            }
        } catch {
            Task { await log.close() }
            throw LedgerError.wrap(error, while: "checking the key store against the log")
        }
        return log
    }

    /// Share URLs are made with this host for every share the ledger presents: a host no URL can
    /// hold would fail each of them, and one past 253 bytes (DNS's limit) could make URLs longer
    /// than `ShareURL.maxLength`, which the ledger's own parser refuses.
    static func checkShareURLHost(_ host: String) throws(LedgerError) {
        var generator = RandomSourceGenerator(source: SystemRandomSource())
        guard !host.isEmpty, host.utf8.count <= 253,
            let url = ShareURL.make(host: host, token: ShareToken.generate(using: &generator)), ShareURL.token(in: url) != nil
        else {
            throw LedgerError(
                .invalidArguments, "the share URL host \"\(host.prefix(80))\" cannot be the host of a share URL; use a "
                    + "host name of at most 253 bytes such as share.example.com")
        }
    }

    /// Stops the in-process worker (after its batch in hand), commits what is queued and closes the ledger.
    public func close() async {
        let (_, task) = workerState.withLock { state in
            defer { state = (nil, nil) }
            return state
        }
        if let task {
            task.cancel()
            await task.value
        }
        await log.close()
    }

    /// A handle on `containerIdentifier` acting as the user `userRecordName` (what `CKContainer` is
    /// for the signed-in user). `nil` acts with no account: every call fails with
    /// `LedgerError.Code.notAuthenticated`, as CloudKit's do without an iCloud account.
    public func container(_ containerIdentifier: String, userRecordName: String?) -> Container {
        Container(ledger: self, containerIdentifier: containerIdentifier, userRecordName: userRecordName)
    }

    /// Registers an account in a container: a user record name, and the email address and phone
    /// number others can invite it by. Invitations already sent to that email or phone stay
    /// unmatched until the user verifies them (``Container/requestParticipantVerification(for:lookupInfo:)``).
    ///
    /// - Throws: `LedgerError.Code.invalidArguments` when the name is not 1 to 64 characters of
    ///   `A-Z a-z 0-9 _ . - @ +`, the user exists, or the email or phone belongs to another user.
    @discardableResult
    public func registerUser(
        _ userRecordName: String, in containerIdentifier: String, emailAddress: String? = nil, phoneNumber: String? = nil,
        nameComponents: PersonNameComponents? = nil
    ) async throws(LedgerError) -> UserIdentity {
        try Decider.checkUserName(userRecordName)
        let output = try await container(containerIdentifier, userRecordName: userRecordName).runOne(
            .registerUser(
                name: userRecordName, email: emailAddress, phone: phoneNumber, names: nameComponents))
        guard case .user(let identity) = output else { throw LedgerError.unexpectedOutput("registerUser") }
        return identity
    }

    // MARK: - Statistics

    /// Counters of the ledger and its read models, read in one transaction.
    public func statistics() throws(LedgerError) -> Statistics {
        try log.statistics { txn, log in
            Statistics(
                log: log,
                users: try models.counter(txn, .users),
                zones: try models.counter(txn, .zones),
                records: try models.counter(txn, .records),
                shares: try models.counter(txn, .shares),
                participants: try models.counter(txn, .participants),
                acceptedParticipants: try models.counter(txn, .acceptedParticipants),
                pendingResidualTasks: try txn.statistics(models.outbox).entries,
                parkedResidualTasks: try models.parkedTaskCount(txn),
                oldestPendingTaskAgeSeconds: try models.oldestTaskAge(txn, now: configuration.clock.nowMicros()),
                participantZones: try models.counter(txn, .participantZones))
        }
    }

    // MARK: - Read-model snapshots

    /// Where ``saveReadModelSnapshot()`` keeps snapshots: `snapshots/` in the ledger's directory, one
    /// folder per snapshot named by its zero-padded position.
    public var readModelSnapshotsDirectory: String { snapshots.directory }

    /// Saves a copy of every read model as of the current head, so that a state as of a past point
    /// (`snapshot(at:path:)` of the audit module) can start from the nearest snapshot at or before the
    /// point it is asked for and replay only the events after it.
    ///
    /// The copy is read in one read transaction (a consistent view at one head, like `mdb_copy`; it
    /// lasts about a second per million read-model entries) and written to a new folder that is renamed
    /// into place when complete, so a crash leaves no half snapshot. Call it periodically, e.g. every
    /// 100,000 events (`share-ledger snapshot --path DIR` from cron): `docs/operations.md`.
    @discardableResult
    public func saveReadModelSnapshot() throws(LedgerError) -> ReadModelSnapshotInfo { try snapshots.save() }

    /// The saved read-model snapshots, oldest first (folders without a readable `snapshot.json` are
    /// skipped).
    public func readModelSnapshots() -> [ReadModelSnapshotInfo] { snapshots.list() }

    /// Deletes every saved read-model snapshot but the `count` newest (and folders a crashed save
    /// left behind). Returns how many snapshots were deleted.
    @discardableResult
    public func deleteReadModelSnapshots(keepingNewest count: Int) -> Int { snapshots.delete(keepingNewest: count) }

    // MARK: - Residual tasks

    /// Completes the residual tasks that are due now, here, and returns how many it completed (at
    /// most `limit`): what the background worker does, on demand. Returns 0 when another worker
    /// holds the lease (it is doing the work).
    @discardableResult
    public func completeResidualTasks(limit: Int = .max) async throws(LedgerError) -> Int {
        let worker = ResidualTaskWorker(ledger: self, configuration: configuration.residualTaskWorker ?? .init())
        let done = try await worker.drain(limit: limit)
        await worker.releaseLease()
        return done
    }

    /// Returns once no residual task is due: the in-process worker (or another process's) has done
    /// them all; parked tasks and tasks waiting for a retry do not count. Without an in-process
    /// worker it completes them itself.
    ///
    /// - Throws: `LedgerError.Code.timedOut` when tasks are still due after `timeout`.
    public func waitForResidualTasks(timeout: Duration = .seconds(30)) async throws(LedgerError) {
        let deadline = ContinuousClock.now + timeout
        let probe = ResidualTaskWorker(ledger: self)
        while true {
            let now = configuration.clock.nowMicros()
            if try probe.dueTasks(now: now, limit: 1).due.isEmpty { return }
            if inProcessWorker == nil { try await completeResidualTasks() }
            guard ContinuousClock.now < deadline else {
                throw LedgerError(.timedOut, "residual tasks are still due after \(timeout); is a worker running?")
            }
            let head = log.publishedHead
            let log = self.log
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await log.waitForCommit(after: head) }
                group.addTask { try? await Task.sleep(for: .milliseconds(5)) }
                await group.next()
                group.cancelAll()
            }
        }
    }

    /// Whether a residual task is due now (parked tasks, tasks waiting for a retry and tasks behind
    /// an earlier one of the same participant and zone are not).
    public func hasDueResidualTasks() throws(LedgerError) -> Bool {
        try !ResidualTaskWorker(ledger: self).dueTasks(now: configuration.clock.nowMicros(), limit: 1).due.isEmpty
    }

    /// The residual tasks not done yet, in scheduling order (or only the parked ones). Read in chunks
    /// of 1,024 tasks, a short read transaction each: tasks completed meanwhile may be left out, and
    /// tasks scheduled meanwhile (always after the ones read) may be listed.
    public func residualTasks(parkedOnly: Bool = false) throws(LedgerError) -> [ResidualTask] {
        var out: [ResidualTask] = []
        var after: UInt64? = nil
        while true {
            let chunk = try read("reading the residual tasks") { txn -> [ResidualTask] in
                try txn.withCursor(models.outbox) { cursor in
                    var tasks: [ResidualTask] = []
                    var entry = try after.map { id in try BigEndian.withBytes(of: id + 1) { try cursor.seek(atLeast: $0) } }
                        ?? cursor.first()
                    while let current = entry, tasks.count < 1_024 {
                        defer { entry = try? cursor.next() }
                        guard let id = BigEndian.uint64(current.key) else { continue }
                        let task = try ResidualTaskState(serializedBytes: Array(current.value))
                        let state = try models.message(WorkerTaskState.self, txn, models.workerTasks, BigEndian.bytes(of: id))
                        tasks.append(ResidualTask(id: id, task, state))
                    }
                    return tasks
                }
            }
            out += parkedOnly ? chunk.filter(\.isParked) : chunk
            guard chunk.count == 1_024, let last = chunk.last else { return out }
            after = last.id
        }
    }

    /// Makes parked tasks due again with a fresh attempt count: those with the given ids, or all
    /// when `ids` is nil. Returns how many were parked and are now due.
    @discardableResult
    public func retryParkedTasks(ids: [UInt64]? = nil) async throws(LedgerError) -> Int {
        let parked = try residualTasks(parkedOnly: true).map(\.id).filter { ids?.contains($0) ?? true }
        if let ids, let missing = ids.first(where: { !parked.contains($0) }) {
            throw LedgerError(.unknownItem, "there is no parked residual task \(missing); list them with `share-ledger tasks`")
        }
        guard !parked.isEmpty else { return 0 }
        return try await maintain { [models] txn in
            for id in parked { try txn.delete(models.workerTasks, key: BigEndian.bytes(of: id)) }
            return parked.count
        }
    }

    /// Runs bookkeeping in the writer's next transaction and returns its result
    /// (``LedgerStore/maintain(alone:replicating:_:)``).
    package func maintain<Result: Sendable>(
        alone: Bool = false, replicating: Bool = false, _ work: @escaping MaintenanceWork<Result>
    ) async throws(LedgerError) -> Result {
        try await store.maintain(alone: alone, replicating: replicating, work)
    }

    // MARK: - Internals shared by the containers

    /// A new random participant id (a UUID in its text form).
    /// A random (version 4) UUID from the ledger's random source: two 64-bit draws (with the system
    /// source, two `getrandom` calls; one per byte made this a visible share of every accept).
    package func newParticipantID() -> String {
        let source = configuration.randomSource
        let high = source.next().bigEndian
        let low = source.next().bigEndian
        var uuid = withUnsafeBytes(of: (high, low)) { raw in raw.load(as: uuid_t.self) }
        uuid.6 = (uuid.6 & 0x0F) | 0x40
        uuid.8 = (uuid.8 & 0x3F) | 0x80
        return ShareLedger.uuidText(uuid)
    }

    /// `uuid` as `UUID.uuidString` writes it (upper-case hex, 8-4-4-4-12), written directly:
    /// Foundation formats it with `snprintf`, thousands of instructions per id, and every share
    /// action makes one or two.
    package static func uuidText(_ uuid: uuid_t) -> String {
        let digits: StaticString = "0123456789ABCDEF"
        return withUnsafeBytes(of: uuid) { bytes in
            String(unsafeUninitializedCapacity: 36) { out in
                var written = 0
                for (index, byte) in bytes.enumerated() {
                    if index == 4 || index == 6 || index == 8 || index == 10 {
                        out[written] = UInt8(ascii: "-")
                        written += 1
                    }
                    out[written] = digits.utf8Start[Int(byte >> 4)]
                    out[written + 1] = digits.utf8Start[Int(byte & 0x0F)]
                    written += 2
                }
                return written
            }
        }
    }

    package func newToken() -> ShareToken {
        var generator = RandomSourceGenerator(source: configuration.randomSource)
        return ShareToken.generate(using: &generator)
    }

    /// A one-time verification code: 26 characters of Crockford's base32 (130 random bits).
    func newVerificationCode() -> String {
        let alphabet = Array("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
        var generator = RandomSourceGenerator(source: configuration.randomSource)
        return String((0..<26).map { _ in alphabet[Int.random(in: 0..<32, using: &generator)] })
    }

    static func sha256(_ text: String) -> [UInt8] {
        Array(SHA256.hash(data: Array(text.utf8)))
    }

    func submit(_ command: DomainCommand) async throws(LedgerError) -> DomainOutcome {
        guard !configuration.readOnly else {
            throw LedgerError(.readOnly, "the ledger at \(configuration.path) was opened read-only")
        }
        if Task.isCancelled {
            throw LedgerError(.operationCancelled, "the task was cancelled before the command was submitted")
        }
        return try await commit(command)
    }

    /// Submits `command` to the log's writer and returns its outcome once committed
    /// (``LedgerStore/commit(_:)``).
    func commit(_ command: DomainCommand) async throws(LedgerError) -> DomainOutcome {
        try await store.commit(command)
    }

    /// Runs `body` in a short read transaction (``LedgerStore/read(_:_:)``).
    package func read<R>(_ doing: @autoclosure () -> String, _ body: (borrowing Transaction) throws -> R) throws(LedgerError) -> R {
        try store.read(doing(), body)
    }

    /// Brings what this ledger keeps of personal data up to the key store
    /// (``LedgerStore/noticeKeyStoreChanges()``).
    func noticeKeyStoreChanges() throws(LedgerError) { try store.noticeKeyStoreChanges() }

    var presenter: Presenter { store.presenter }
}

extension LedgerError {
    static func unexpectedOutput(_ call: String) -> LedgerError {
        LedgerError(.storageFailure, "\(call) returned an unexpected result; this is a bug in ShareLedger")
    }
}
