import Foundation
import LMDB
import Logging
import Synchronization

/// Derived state kept off the commit path: the layout of format 4 (`docs/architecture.md`, "The
/// log-only commit").
///
/// What is derived from the log (``DatabaseSpec/derived``: the stream and command records, a
/// layer's read models and indexes) lives in a companion LMDB environment, `derived/` in the
/// ledger directory, opened with `MDB_NOSYNC`. Every transaction spans both environments
/// (``Environment`` begins the companion's first and commits it last), so readers and the writer
/// see one state, as before. What changes is what a commit flushes: only the log's environment
/// (the log, checkpoints, operational state); the companion's pages go to the page cache and reach
/// the disk when the kernel writes them back.
///
/// What keeps that safe:
/// - `derived_meta`/`position` in the companion records the log position (and its hash) the
///   derived databases reflect, written in every write transaction that moves the head. Before
///   every batch the writer compares it with the head and, when it is behind, derives the missing
///   events first (``EventLog/Configuration/derivedReplay``). A process crash between the two commits
///   leaves it one batch behind: the page cache kept everything else.
/// - `meta`/`derived_state` in the log's environment says whether the companion may hold writes
///   that were never flushed, and since which boot (byte 0: 0 flushed, 1 not; bytes 1–16: the
///   boot id). The first write after a flush marks it in the log's own commit, which is flushed
///   before any companion page of that transaction is written. A clean close flushes the companion
///   and then marks it flushed. Opened for writing after a machine crash (not flushed, another
///   boot), the companion is discarded and derived again from the log, because `MDB_NOSYNC` gives
///   no guarantee that its file is consistent after one.
/// - A position whose hash is not the log's at that position (a companion from another ledger, a
///   log cut back) makes the writer clear the derived databases and derive them from the start.
package enum DerivedState {
    /// The companion's own database: `position` → position (8, big-endian) ‖ hash (32).
    static let metaName = "derived_meta"
    /// The directory of the companion environment, inside the ledger directory.
    package static let directoryName = "derived"
    static let markerKey = Array("derived_state".utf8)
    static let positionKey = Array("position".utf8)
    /// `derived_meta`/`twins`: the one byte 1 when the twinned databases' twins are in use
    /// (``LogStore/switchTwins(_:)``); absent or 0 when the databases themselves are.
    static let switchKey = Array("twins".utf8)
    /// `derived_meta`/`rows`: the one byte 1 when every row of the derived databases carries a
    /// checksum (``RowChecksum`` in the LMDB module; set when `derived/` is created); absent in a
    /// `derived/` written before, which a writer derives again.
    static let rowsKey = Array("rows".utf8)

    /// Whether the rows of the companion's derived databases carry checksums (`derived_meta`/`rows`).
    static func rowsChecksummed(_ environment: Environment, _ meta: Database) throws -> Bool {
        try environment.read { txn in try txn.get(meta, key: rowsKey) } == [1]
    }

    /// `databases` (opened in the companion) with their twins opened too, where `specs` asks for
    /// them (``DatabaseSpec/twinned``), and the environment's switch set to `derived_meta`. Read-only,
    /// a ledger written before twins existed opens without them.
    static func openTwins(
        _ environment: Environment, _ databases: [Database], specs: [DatabaseSpec], switchIn meta: Database
    ) throws(LMDBError) -> [Database] {
        let twinned = Set(specs.filter(\.twinned).map(\.name))
        guard !twinned.isEmpty else { return databases }
        let twins = try environment.openTwins(of: databases.filter { twinned.contains($0.name) })
        let byName = Dictionary(uniqueKeysWithValues: twins.map { ($0.name, $0) })
        environment.setSwitch(meta, key: switchKey, twinsOpened: twins.contains(where: \.hasTwin))
        return databases.map { byName[$0.name] ?? $0 }
    }

    /// Where a ledger's derived databases are, decided when it is opened.
    struct Placement {
        /// In the companion environment.
        var separate: Bool
        /// The companion's files must be discarded first (written without flushing before a
        /// machine crash), or are missing: everything is derived again.
        var discard: Bool
        /// The directory lock is held exclusively (to move the derived databases): go back to
        /// shared once they are.
        var exclusive = false
    }

    /// The id of this boot of the machine: Linux's `boot_id`. Where there is none, a random id per
    /// process, so that every open after an unclean close counts as after a machine crash (slower,
    /// never wrong).
    static let currentBoot: [UInt8] = {
        if let text = try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8),
            let id = UUID(uuidString: text.trimmingCharacters(in: .whitespacesAndNewlines))
        {
            return EnvelopeCodec.bytes(id)
        }
        return EnvelopeCodec.bytes(UUID())
    }()

    /// The marker of a companion that may hold unflushed writes of this boot.
    static let dirtyMarker: [UInt8] = [1] + currentBoot
    /// The marker of a companion in which a writer read a damaged row: the next open for writing
    /// derives it again, whatever boot wrote it. It stays until then.
    static let damagedMarker: [UInt8] = [2] + currentBoot

    /// Decides where the derived databases are: where the ledger already keeps them, or (a ledger
    /// opened for writing by a layer that defers them) in the companion.
    static func placement(
        _ environment: Environment, existing: [String], configuration: EventLog.Configuration, lock: DirectoryLock
    ) throws(LedgerError) -> Placement {
        let path = configuration.path
        var marker: [UInt8]? = nil
        if existing.contains("meta") {
            do {
                let meta = try environment.openDatabases([("meta", [])], create: false)[0]
                marker = try environment.read { txn in try txn.get(meta, key: markerKey) }
            } catch {
                throw LedgerError.wrap(error, while: "reading where the derived state of \(path) is")
            }
        }
        let derivedFile = ((path as NSString).appendingPathComponent(directoryName) as NSString)
            .appendingPathComponent("data.mdb")
        let companionExists = FileManager.default.fileExists(atPath: derivedFile)
        guard let marker else {
            var separate =
                !configuration.readOnly && configuration.defersDerivedState && !configuration.scratch
                && configuration.databases.contains(where: \.derived)
            // Moving the databases needs every other process out (their handles would point at
            // moved databases); with one there, the ledger is opened as it is laid out, and moved
            // by a later open.
            if separate && !lock.tryExclusive() {
                configuration.logger.notice(
                    "another process has the ledger open; its derived state stays with the log until it is opened alone",
                    metadata: ["path": "\(path)"])
                separate = false
            }
            return Placement(separate: separate, discard: separate, exclusive: separate)
        }
        guard marker.count == 17, marker[0] <= 2 else {
            throw LedgerError(.corruptedData, "the derived-state record of \(path) is malformed (\(marker.count) bytes)")
        }
        let unflushedFromAnotherBoot = marker[0] == 1 && Array(marker[1...]) != currentBoot
        let foundDamaged = marker[0] == 2
        if configuration.readOnly {
            guard companionExists && !unflushedFromAnotherBoot && !foundDamaged else {
                throw LedgerError(
                    .readOnly, "the derived state of the ledger at \(path) "
                        + (!companionExists
                            ? "is missing"
                            : foundDamaged
                                ? "was found damaged (a row failed its checksum)"
                                : "was not flushed before the machine stopped")
                        + " and must be derived again from the log, which opening it read-only cannot do; open it once "
                        + "for writing (e.g. `share-ledger worker --drain`), or work on a writable copy")
            }
            return Placement(separate: true, discard: false)
        }
        return Placement(separate: true, discard: unflushedFromAnotherBoot || foundDamaged || !companionExists)
    }

    /// Opens the companion environment (creating its directory; emptied first when `placement`
    /// says so).
    static func attach(
        _ environment: Environment, configuration: EventLog.Configuration, placement: Placement
    ) throws {
        let directory = (configuration.path as NSString).appendingPathComponent(directoryName)
        let fileManager = FileManager.default
        if !configuration.readOnly {
            if placement.discard {
                for name in ["data.mdb", "lock.mdb"] {
                    let file = (directory as NSString).appendingPathComponent(name)
                    if fileManager.fileExists(atPath: file) { try fileManager.removeItem(atPath: file) }
                }
            }
            try fileManager.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        // Not `MDB_WRITEMAP`: LMDB does not nest transactions in a write-mapped environment (the
        // writer's atomic batches nest), and writing the mapped file's holes on a full file system
        // raises SIGBUS instead of returning an error.
        // No maximum size of its own: the maximum bounds the log, and the derived state must follow
        // every event the log stored (the disk bounds it; see `Environment.reserveCompanionSpace`).
        let options = EnvironmentOptions(
            path: directory, mapSize: configuration.initialMapSize, maxMapSize: nil,
            maxDatabases: 64, maxReaders: configuration.maxReaders, durability: .unsafeNoSync,
            readOnly: configuration.readOnly)
        let attached = Result { () throws(LMDBError) in try environment.attachCompanion(options) }
        if case .failure(let error) = attached {
            guard isDamage(error) else { throw error }
            // `derived/` is a cache of the log: a damaged one is recreated from the log by a writer,
            // and never a reason to restore the ledger.
            guard !configuration.readOnly else { throw damagedCompanion(configuration.path, error) }
            configuration.logger.warning(
                "derived/ is damaged; discarding it and deriving it again from the log",
                metadata: ["path": "\(directory)", "error": "\(error.message)"])
            discardFiles(in: configuration.path)
            try environment.attachCompanion(options)
        }
    }

    /// Removes the companion's files of the ledger at `path` (a damaged `derived/`, derived again).
    static func discardFiles(in path: String) {
        let directory = (path as NSString).appendingPathComponent(directoryName)
        for name in ["data.mdb", "lock.mdb"] {
            try? FileManager.default.removeItem(atPath: (directory as NSString).appendingPathComponent(name))
        }
    }

    /// Whether `error`, from opening the companion, says its file is damaged (cut, emptied, not an
    /// LMDB file, pages that do not hold together).
    static func isDamage(_ error: LMDBError) -> Bool {
        switch error.code {
        case .corrupted, .invalid, .pageNotFound, .versionMismatch, .panic: true
        default: false
        }
    }

    /// The error of a read-only open whose `derived/` is damaged: it names `derived/` as the cache it
    /// is and says how it is rebuilt; the log (`data.mdb`) is not at fault.
    static func damagedCompanion(_ path: String, _ error: LMDBError) -> LedgerError {
        LedgerError(
            .readOnly, "derived/ of the ledger at \(path) is damaged (\(error.code)); nothing was changed. "
                + damagedAdvice + "; a read-only open cannot rebuild it",
            underlying: error.description)
    }

    /// What to do about a damaged `derived/`.
    static let damagedAdvice =
        "derived/ is a cache of the log (data.mdb), not the log, which this damage does not touch: `share-ledger rebuild` "
        + "derives it again from the log (so does any open for writing that meets the damage), or delete derived/ and "
        + "open the ledger for writing"

    /// Whether `path` (an LMDB error's) is a ledger's companion directory.
    static func isCompanionPath(_ path: String?) -> Bool {
        path.map { ($0 as NSString).lastPathComponent == directoryName } ?? false
    }

    /// Opened for writing: moves the derived databases a version 3 ledger kept with the log into
    /// the companion (one transaction: their entries copied, the old databases dropped, the
    /// position set to the head), and marks the companion as possibly unflushed.
    ///
    /// When this release derives a database the earlier one did not (`added`, missing from an
    /// existing companion; or a derived database missing among those kept with the log), what is
    /// there was derived without it, and a new database would start empty although the log holds
    /// events it reflects: the position record is removed instead, so the derived state is derived
    /// again from the start before the writer starts (``catchUpDerivedState(replay:logger:)``).
    static func prepare(
        _ store: LogStore, existing: [String], derivedSpecs: [DatabaseSpec], added: [String]
    ) throws(LedgerError) {
        let environment = store.environment
        let path = environment.options.path
        let old = derivedSpecs.filter { existing.contains($0.name) }
        let incomplete = !added.isEmpty || (!old.isEmpty && old.count < derivedSpecs.count)
        do {
            let oldDatabases = old.isEmpty ? [] : try environment.openDatabases(old.map { ($0.name, $0.flags) })
            try environment.write { txn in
                if incomplete {
                    for source in oldDatabases { try txn.dropDatabase(source) }
                    if let derivedMeta = store.derivedMeta { try txn.delete(derivedMeta, key: DerivedState.positionKey) }
                } else if !oldDatabases.isEmpty {
                    for source in oldDatabases {
                        guard let target = store.derivedDatabase(source.name) else { continue }
                        try txn.clear(target)
                        try txn.withCursor(source) { cursor in
                            var entry = try cursor.first()
                            while let current = entry {
                                try txn.put(target, key: current.key, value: current.value)
                                entry = try cursor.next()
                            }
                        }
                        try txn.dropDatabase(source)
                    }
                    try store.writeDerivedPosition(txn, try store.readHead(txn))
                }
                if let meta = store.derivedMeta, try txn.get(meta, key: rowsKey) != [1] {
                    try txn.put(meta, key: rowsKey, value: [1])
                }
                try store.markDerivedUnflushed(txn)
            }
        } catch {
            throw LedgerError.wrap(error, while: "moving the derived state of \(path) into \(directoryName)/")
        }
    }
}

/// What a read-only open made of derived state behind the log or not matching it
/// (``LogStore/catchUpDerivedStateInMemory(replay:logger:)``).
enum ReadOnlyDerived: Sendable {
    /// Caught up in memory.
    case caughtUp(DerivedCatchUp)
    /// Not caught up: what reads answer.
    case unusable(LedgerError)
}

/// The derived state a read-only open derived in memory: an overlay of the companion as it was
/// found (`base`: the position it recorded) with the missing events derived.
///
/// `@unchecked Sendable`: the overlay is sealed before this is shared and only read afterwards
/// (reading an overlay changes nothing in it).
final class DerivedCatchUp: @unchecked Sendable {
    let base: (position: UInt64, hash: EventHash)
    let usesTwins: Bool
    let overlay: Overlay

    init(base: (position: UInt64, hash: EventHash), usesTwins: Bool, overlay: Overlay) {
        self.base = base
        self.usesTwins = usesTwins
        self.overlay = overlay
    }
}

/// A `flock` on the ledger directory, held by every process that has the ledger open (shared) and,
/// briefly, by the one that moves its derived databases into the companion (exclusive): database
/// handles of another process would point at the databases that move.
///
/// `@unchecked Sendable`: the descriptor is set once and closed once, under `lock`.
final class DirectoryLock: @unchecked Sendable {
    private let lock = NSLock()
    private var descriptor: Int32

    /// Opens `path` and takes the shared lock (waiting for an exclusive holder); a directory that
    /// cannot be opened is not locked (nothing to move there either).
    init(path: String) {
        descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if descriptor >= 0 { _ = flock(descriptor, LOCK_SH) }
    }

    deinit { release() }

    /// Tries to hold the lock exclusively: true when no other process has the ledger open. On
    /// failure the shared lock is taken again (a conversion may drop it).
    func tryExclusive() -> Bool {
        lock.withLock {
            guard descriptor >= 0 else { return false }
            if flock(descriptor, LOCK_EX | LOCK_NB) == 0 { return true }
            _ = flock(descriptor, LOCK_SH)
            return false
        }
    }

    /// Goes back to the shared lock.
    func shared() {
        lock.withLock {
            if descriptor >= 0 { _ = flock(descriptor, LOCK_SH) }
        }
    }

    /// Releases the lock (idempotent).
    func release() {
        lock.withLock {
            if descriptor >= 0 { close(descriptor) }
            descriptor = -1
        }
    }
}

extension LogStore {
    /// Whether the derived databases live in the companion environment (``DerivedState``).
    package var defersDerivedState: Bool { derivedMeta != nil }

    /// Runs `body` in a read transaction in which the derived databases reflect the log's head.
    ///
    /// A read transaction begins in the companion, then in the log's environment, and the writer
    /// commits in the other order, so a reader that begins between the writer's two commits sees
    /// the log one batch ahead of the derived databases. Such a transaction is ended and begun
    /// again (the window is the writer's second commit, microseconds). When they still differ
    /// after ``consistentReadAttempts`` (the derived state is behind for good: a crash before any
    /// writer caught up, or a damaged event it cannot be brought past), `body` runs on what there
    /// is; the audit then reports the difference.
    package func read<R>(_ body: (borrowing Transaction) throws -> R) throws -> R {
        do {
            return try readConsistently(body)
        } catch {
            recordDerivedDamage(error)
            throw error
        }
    }

    private func readConsistently<R>(_ body: (borrowing Transaction) throws -> R) throws -> R {
        guard derivedMeta != nil else { return try environment.read(body) }
        if let readOnly = readOnlyDerived.withLock({ $0 }), !LogStore.readsAsStored {
            switch readOnly {
            case .unusable(let error): throw error
            case .caughtUp(let catchUp):
                let result: R? = try environment.read { txn in
                    // Until a writer (another process) moves the derived state on from where the
                    // catch-up found it: then it is caught up on disk, and read as usual.
                    guard txn.usesTwins == catchUp.usesTwins,
                        try recordedDerivedPosition(txn).map({ $0.position == catchUp.base.position && $0.hash == catchUp.base.hash })
                            ?? (catchUp.base.position == 0)
                    else { return nil }
                    return try txn.withOverlay(catchUp.overlay) { try body($0) }
                }
                if let result { return result }
            }
        }
        var lastBehind = UInt64.max
        for _ in 1..<LogStore.consistentReadAttempts {
            var behindAt: UInt64? = nil
            let result: R? = try environment.read { txn in
                // Behind where an earlier read gave up: no writer is catching up, read it as it is.
                if let position = try derivedBehind(txn), position != derivedStuckAt.load(ordering: .relaxed) {
                    behindAt = position
                    return nil
                }
                return try body(txn)
            }
            if let result { return result }
            if let behindAt { lastBehind = behindAt }
            sched_yield()
        }
        derivedStuckAt.store(lastBehind, ordering: .relaxed)
        return try environment.read(body)
    }

    /// While true (in the task, or on the thread, that sets it), ``read(_:)`` reads what `derived/`
    /// holds, without a read-only open's catch-up in memory: for the audit, which compares it with
    /// the log at the position it records.
    @TaskLocal package static var readsAsStored = false

    /// The reads of the derived databases as ``read(_:)`` would do them without a read-only open's
    /// catch-up (``catchUpDerivedStateInMemory(replay:logger:)``): what `derived/` holds, for the
    /// audit, which compares it with the log at the position it records.
    package func readAsStored<R>(_ body: (borrowing Transaction) throws -> R) throws -> R {
        try environment.read(body)
    }

    /// At most this many events are derived in memory by a read-only open whose derived state is
    /// behind the log (``catchUpDerivedStateInMemory(replay:logger:)``); further behind, reads answer
    /// ``LedgerError/Code/readOnly`` (open it for writing once).
    package static let inMemoryCatchUpLimit: UInt64 = 100_000

    /// Opened read-only: when the derived databases are behind the log's head (a process stopped
    /// between the log's commit and the companion's) or do not match it (their position carries
    /// another hash, or is beyond the head), derives what they lack from the log into an overlay in
    /// memory, through which ``read(_:)`` then reads: readers see the state the log implies, not a
    /// stale one, and nothing is written. More than ``inMemoryCatchUpLimit`` events to derive makes
    /// ``read(_:)`` answer ``LedgerError/Code/readOnly`` saying to open the ledger for writing once
    /// (which derives them on disk); reads of the log alone (``EventLog`` reads of events, the head,
    /// the chain) do not go through it. A log that does not derive (a damaged event) leaves derived/
    /// read as it is, as a writer would (`verify` and `audit` report the damage).
    /// ``readAsStored(_:)`` reads what is there.
    package func catchUpDerivedStateInMemory(replay: DerivedReplay?, logger: Logger) {
        guard defersDerivedState, environment.options.readOnly, let replay else { return }
        let path = environment.options.path
        do {
            let outcome: ReadOnlyDerived? = try environment.read { txn in
                let head = try readHead(txn)
                let recorded = try recordedDerivedPosition(txn)
                let derived = recorded ?? (0, .zero)
                if derived.position == head.position.rawValue && derived.hash == head.hash { return nil }
                var matches = false
                if recorded != nil && derived.position <= head.position.rawValue {
                    matches = try self.head(at: derived.position, txn)?.hash == derived.hash
                }
                let after = matches ? derived.position : 0
                let missing = head.position.rawValue - after
                guard missing <= LogStore.inMemoryCatchUpLimit else {
                    return .unusable(
                        LedgerError(
                            .readOnly, "derived/ of the ledger at \(path) "
                                + (matches ? "is \(missing) events behind the log" : "does not match the log")
                                + " (derived/ is a cache of the log), and opened read-only it is derived in memory only up to "
                                + "\(LogStore.inMemoryCatchUpLimit) events; open the ledger once for writing (e.g. "
                                + "`share-ledger worker --drain`), which brings derived/ up to the log, or work on a writable copy"))
                }
                logger.notice(
                    matches
                        ? "derived/ is behind the log; deriving the missing events in memory (read-only)"
                        : "derived/ does not match the log; deriving it in memory (read-only)",
                    metadata: ["derivedPosition": "\(derived.position)", "head": "\(head.position)"])
                // Every database, so that nothing a projection writes can reach a read-only LMDB.
                let overlay = Overlay()
                try txn.withOverlay(overlay) { view in
                    if !matches { try clearDerived(view) }
                    try derive(view, after: after, replay(self))
                    try writeDerivedPosition(view, head)
                }
                overlay.seal()
                return .caughtUp(DerivedCatchUp(base: derived, usesTwins: txn.usesTwins, overlay: overlay))
            }
            readOnlyDerived.withLock { $0 = outcome }
        } catch {
            // The log itself does not derive (a damaged event): readers see derived/ as it is, as a
            // writer would leave it, and `verify` and `audit` report the damage.
            let wrapped = LedgerError.wrap(error, while: "deriving in memory what derived/ of \(path) lacks")
            logger.error("the derived state could not be brought up to the log in memory", metadata: ["error": "\(wrapped)"])
        }
    }

    /// How many read transactions ``read(_:)`` begins, at most, looking for one whose derived
    /// databases reflect the log's head.
    package static let consistentReadAttempts = 200

    /// The derived databases' position when the log in `txn` holds an event after it; nil when
    /// they reflect the log's last entry. (One point read; a cursor on the log would cost an
    /// allocation per query.)
    func derivedBehind(_ txn: borrowing Transaction) throws -> UInt64? {
        let derived = try derivedPosition(txn).position
        let next = try BigEndian.withBytes(of: derived &+ 1) { key in try txn.withValue(log, key: key) { _ in true } }
        return next == nil ? nil : derived
    }

    /// The position (and its event's hash) the derived databases reflect; (0, zero) when nothing
    /// was derived yet.
    package func derivedPosition(_ txn: borrowing Transaction) throws -> (position: UInt64, hash: EventHash) {
        try recordedDerivedPosition(txn) ?? (0, .zero)
    }

    /// The position record itself; nil when there is none (a new companion: nothing derived yet).
    package func recordedDerivedPosition(_ txn: borrowing Transaction) throws -> (position: UInt64, hash: EventHash)? {
        guard let derivedMeta else { return nil }
        let record = try DerivedState.positionKey.withUnsafeBytes { key in
            try txn.withValue(derivedMeta, key: key) { value -> (UInt64, EventHash) in
                guard value.count == 40, let position = BigEndian.uint64(value), let hash = EventHash(bytes: value[8...])
                else {
                    throw LedgerError(
                        .corruptedData, "the position record of derived/ is \(value.count) bytes, expected 40; "
                            + DerivedState.damagedAdvice)
                }
                return (position, hash)
            }
        }
        return record
    }

    /// Records that the derived databases reflect the log through `head`.
    package func writeDerivedPosition(_ txn: borrowing Transaction, _ head: LogHead) throws {
        guard let derivedMeta else { return }
        var value = BigEndian.bytes(of: head.position.rawValue)
        value += head.hash.bytes
        try txn.put(derivedMeta, key: DerivedState.positionKey, value: value)
    }

    /// Marks the companion as possibly holding unflushed writes of this boot, unless it is already,
    /// or is marked damaged (which only deriving it again clears).
    package func markDerivedUnflushed(_ txn: borrowing Transaction) throws {
        guard derivedMeta != nil else { return }
        let keep = DerivedState.markerKey.withUnsafeBytes { key in
            (try? txn.withValue(meta, key: key) { $0.elementsEqual(DerivedState.dirtyMarker) || $0.first == 2 }) ?? false
        }
        if keep != true { try txn.put(meta, key: DerivedState.markerKey, value: DerivedState.dirtyMarker) }
    }

    /// Reads every row of the derived databases in use (``Transaction/usesTwins`` decides which copy),
    /// in read transactions of at most `rowsPerTransaction` rows, so that each row's checksum is
    /// checked (``RowChecksum`` in the LMDB module). Returns the databases holding a row that fails,
    /// or that cannot be read, with the error, and how many rows were read. For `audit`, which
    /// reports damage no read reached.
    package func checkDerivedRows(rowsPerTransaction: Int = 50_000) -> (failed: [(database: String, error: String)], rows: Int) {
        guard derivedMeta != nil else { return ([], 0) }
        let databases =
            [commands, streams] + extensionDatabases.values.filter(\.inCompanion).sorted { $0.name < $1.name }
        var failed: [(database: String, error: String)] = []
        var rows = 0
        for db in databases where db.rowsChecksummed {
            let sorted = db.flags.contains(.dupSort)
            var resume: (key: [UInt8], value: [UInt8])? = nil
            while true {
                do {
                    let (next, count) = try environment.read { txn -> ((key: [UInt8], value: [UInt8])?, Int) in
                        try txn.withCursor(db) { cursor in
                            var entry = try resume.map { try Self.entry(after: $0, cursor, sorted: sorted) } ?? cursor.first()
                            var count = 0
                            while let current = entry {
                                count += 1
                                if count == rowsPerTransaction { return ((Array(current.key), Array(current.value)), count) }
                                entry = try cursor.next()
                            }
                            return (nil, count)
                        }
                    }
                    rows += count
                    guard let next else { break }
                    resume = next
                } catch {
                    failed.append((db.name, (error as? LMDBError)?.message ?? "\(error)"))
                    break
                }
            }
        }
        return (failed, rows)
    }

    /// The entry after (`resume.key`, `resume.value`), which a read before this one ended on.
    private static func entry(after resume: (key: [UInt8], value: [UInt8]), _ cursor: borrowing Cursor, sorted: Bool) throws
        -> Entry?
    {
        try resume.key.withUnsafeBytes { key -> Entry? in
            if sorted, let found = try resume.value.withUnsafeBytes({ try cursor.seek(key: key, valueAtLeast: $0) }) {
                return found.key.elementsEqual(resume.key) && found.value.elementsEqual(resume.value) ? try cursor.next() : found
            }
            guard let found = try cursor.seek(atLeast: key) else { return nil }
            guard found.key.elementsEqual(resume.key) else { return found }
            return sorted ? try cursor.nextKey() : try cursor.next()
        }
    }

    /// Empties the derived databases of a companion found damaged and clears the mark: the next
    /// derivation derives everything again from the log (its derived position is gone).
    package func clearDamagedDerived(_ txn: borrowing Transaction) throws {
        try clearDerived(txn)
        try txn.put(meta, key: DerivedState.markerKey, value: DerivedState.dirtyMarker)
    }

    /// When `error` says a row of the companion was found damaged (``RowChecksum`` in the LMDB
    /// module, or LMDB's own check of its pages), sets ``derivedDamageSeen``. Returns whether it did.
    @discardableResult
    package func recordDerivedDamage(_ error: any Error) -> Bool {
        guard derivedMeta != nil, let damage = error as? LMDBError, DerivedState.isDamage(damage),
            DerivedState.isCompanionPath(damage.path)
        else { return false }
        derivedDamageSeen.store(true, ordering: .releasing)
        return true
    }

    /// Marks the companion damaged in the log (`derived_state` `02`): the next open for writing
    /// discards it and derives it again from the log.
    func markDerivedDamaged(logger: Logger) {
        do {
            try environment.write { txn in try txn.put(meta, key: DerivedState.markerKey, value: DerivedState.damagedMarker) }
            logger.error(
                "derived/ holds a damaged row; the next open for writing derives it again from the log",
                metadata: ["path": "\(environment.options.path)"])
        } catch {
            logger.error(
                "derived/ holds a damaged row and could not be marked for deriving again; run `share-ledger rebuild`",
                metadata: ["path": "\(environment.options.path)", "error": "\(error)"])
        }
    }

    /// Empties the derived databases and derives them again from the log, in one write transaction,
    /// after a row of `derived/` was found damaged (``derivedDamageSeen``, which it clears). Called
    /// by the writer thread, with nothing of the derived state pending behind its commits. When it
    /// fails, `derived/` is marked for the next open for writing instead.
    package func rederiveDerivedState(replay: DerivedReplay?, logger: Logger) throws(LedgerError) {
        guard derivedMeta != nil, !environment.options.readOnly else { return }
        logger.error(
            "derived/ holds a damaged row; emptying it and deriving it again from the log",
            metadata: ["path": "\(environment.options.path)"])
        // Marked first, durably: emptying walks derived/'s pages, and when damage reaches its page
        // structure LMDB may stop the process (an assertion); the next open for writing then
        // discards the file instead of meeting the damage again.
        markDerivedDamaged(logger: logger)
        do {
            try environment.write { txn in
                try clearDamagedDerived(txn)
                let head = try readHead(txn)
                if try catchUpDerivedState(txn, head: head, replay: replay, logger: logger) {
                    try writeDerivedPosition(txn, head)
                }
            }
            derivedDamageSeen.store(false, ordering: .releasing)
        } catch {
            // Still marked: the next open for writing discards derived/ and derives it again.
            throw LedgerError(
                .corruptedData, "derived/ of the ledger at \(environment.options.path) is damaged beyond repair in place; "
                    + "nothing was changed. It is marked, and the next open for writing discards it and derives it again "
                    + "from the log: run the command again", underlying: "\(error)")
        }
    }

    /// The derived database named `name` in the companion (the stream and command records or a
    /// layer's).
    func derivedDatabase(_ name: String) -> Database? {
        switch name {
        case commands.name: commands
        case streams.name: streams
        default: extensionDatabases[name]
        }
    }

    /// Empties every derived database (both copies of a twinned one), before they are derived again
    /// from the start. The copy in use stays the one in use.
    package func clearDerived(_ txn: borrowing Transaction) throws {
        for database in extensionDatabases.values where database.inCompanion {
            try txn.clear(database)
            if database.hasTwin { try txn.clear(txn.unused(database)) }
        }
        try txn.clear(commands)
        try txn.clear(streams)
        if let derivedMeta {
            try txn.clear(derivedMeta)
            if txn.usesTwins { try txn.put(derivedMeta, key: DerivedState.switchKey, value: [1]) }
            if commands.rowsChecksummed { try txn.put(derivedMeta, key: DerivedState.rowsKey, value: [1]) }
        }
    }

    /// In the layout that keeps the derived databases with the log, when this open added one of them:
    /// empties every derived database (`names`) and derives them from the whole log, in one write
    /// transaction, before the writer starts.
    func deriveAgainWithTheLog(_ names: Set<String>, replay: DerivedReplay?, logger: Logger) throws(LedgerError) {
        guard let replay, derivedMeta == nil else { return }
        logger.notice(
            "this release derives databases the ledger did not have; deriving the derived state again from the log",
            metadata: ["path": "\(environment.options.path)"])
        do {
            try environment.write { txn in
                guard try readHead(txn).position.rawValue > 0 else { return }
                for database in extensionDatabases.values where names.contains(database.name) { try txn.clear(database) }
                try txn.clear(commands)
                try txn.clear(streams)
                try derive(txn, after: 0, replay(self))
            }
        } catch {
            throw LedgerError.wrap(error, while: "deriving the derived state of \(environment.options.path) again")
        }
    }

    /// Whether the layers' twinned databases have their twins (``DatabaseSpec/twinned``): a ledger
    /// opened for writing in the companion layout.
    package var hasTwins: Bool { extensionDatabases.values.contains(where: \.hasTwin) }

    /// Makes the copies of the twinned databases that `txn` does not use (``Transaction/unused(_:)``)
    /// the ones in use, for every transaction that begins after `txn` commits. `txn` itself goes on
    /// using the copies it began with.
    package func switchTwins(_ txn: borrowing Transaction) throws {
        guard let derivedMeta, hasTwins else {
            throw LedgerError(.invalidArguments, "the ledger at \(environment.options.path) keeps no second copy of its read models")
        }
        try txn.put(derivedMeta, key: DerivedState.switchKey, value: [txn.usesTwins ? 0 : 1])
    }

    /// Derives everything derived from the events after `after`, reading and decoding each once:
    /// its stream and command records, as the writer wrote them (a stream record per versioned
    /// event; a command record per command id: its first position and event count, and the stream
    /// version of its last event, or 0 for a command of a layer's own namespace, which records
    /// none), then what `project` makes of it.
    func derive(_ txn: borrowing Transaction, after: UInt64, _ project: DerivedProjection) throws {
        try txn.withCursor(log) { cursor in
            var entry = try BigEndian.withBytes(of: after + 1) { try cursor.seek(atLeast: $0) }
            while let current = entry {
                guard let position = BigEndian.uint64(current.key) else {
                    throw LedgerError(.corruptedData, "a log key is \(current.key.count) bytes, expected 8")
                }
                let envelope = try EnvelopeCodec.decode(current.value, key: position)
                if envelope.streamVersion != 0 {
                    try writeStreamRecord(
                        txn, key: LogStore.streamKey(container: envelope.container, stream: envelope.stream),
                        version: envelope.streamVersion, last: position)
                }
                _ = try recordCommand(txn, envelope, position: position, refusingGaps: false)
                try project(txn, envelope)
                entry = try cursor.next()
            }
        }
    }

    /// Flushes the companion and then marks it flushed (a clean close). Commits by other processes
    /// are covered: none can commit in the companion while this transaction holds both writer locks.
    package func markDerivedFlushed() throws(LedgerError) {
        guard derivedMeta != nil, !environment.options.readOnly else { return }
        do {
            let damageSeen = derivedDamageSeen.load(ordering: .acquiring)
            try environment.writeFlushingCompanionFirst { txn in
                // A companion found or marked damaged stays so until it is derived again.
                if damageSeen {
                    try txn.put(meta, key: DerivedState.markerKey, value: DerivedState.damagedMarker)
                } else if try txn.get(meta, key: DerivedState.markerKey)?.first != 2 {
                    try txn.put(meta, key: DerivedState.markerKey, value: [0] + DerivedState.currentBoot)
                }
            }
        } catch {
            throw LedgerError.wrap(error, while: "flushing the derived state of \(environment.options.path)")
        }
    }

    /// Marks the companion unflushed and, when the derived databases are behind `head`, derives
    /// the missing events with `replay` first (from the start when their position is not one of
    /// this log's). Returns whether it derived anything (rows and tags kept in memory must then be
    /// forgotten).
    package func catchUpDerivedState(
        _ txn: borrowing Transaction, head: LogHead, replay: DerivedReplay?, logger: Logger
    ) throws -> Bool {
        try markDerivedUnflushed(txn)
        let recorded = try recordedDerivedPosition(txn)
        let derived = recorded ?? (0, .zero)
        if derived.position == head.position.rawValue && derived.hash == head.hash { return false }
        guard let replay else { return false }
        var after = derived.position
        // No record: nothing was derived into this companion (or its first commit was lost); clear
        // whatever it holds and derive everything.
        var matches = false
        if recorded != nil && derived.position <= head.position.rawValue {
            matches = try self.head(at: derived.position, txn)?.hash == derived.hash
        }
        if !matches {
            logger.warning(
                "the derived state does not match the log; deriving it again from the start",
                metadata: ["derivedPosition": "\(derived.position)", "head": "\(head.position)"])
            try clearDerived(txn)
            after = 0
        } else {
            logger.notice(
                "the derived state is behind the log; deriving the missing events",
                metadata: ["derivedPosition": "\(derived.position)", "head": "\(head.position)"])
        }
        try derive(txn, after: after, replay(self))
        return true
    }

    /// Brings the derived state up to the head in one write transaction (when a ledger is opened
    /// for writing, before its writer starts).
    package func catchUpDerivedState(replay: DerivedReplay?, logger: Logger) throws(LedgerError) {
        guard defersDerivedState, !environment.options.readOnly else { return }
        do {
            try environment.write { txn in
                let head = try readHead(txn)
                if try catchUpDerivedState(txn, head: head, replay: replay, logger: logger) {
                    try writeDerivedPosition(txn, head)
                }
            }
        } catch {
            throw LedgerError.wrap(error, while: "bringing the derived state of \(environment.options.path) up to the log")
        }
    }

    /// The head as of `position`: position, hash and time of its event; nil when the log holds no
    /// event there.
    func head(at position: UInt64, _ txn: borrowing Transaction) throws -> LogHead? {
        guard position > 0 else { return LogHead(position: .start, hash: .zero) }
        return try BigEndian.withBytes(of: position) { key in
            try txn.withValue(log, key: key) { value -> LogHead in
                guard let head = LogStore.head(position: position, entry: value) else {
                    throw LedgerError(.corruptedData, "the log entry at \(position) is malformed (\(value.count) bytes)")
                }
                return head
            }
        }
    }
}
