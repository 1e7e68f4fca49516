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

    /// The error of a position record of `count` bytes (it has 40: a position and a hash).
    static func badPositionRecord(count: Int) -> LedgerError {
        LedgerError(.corruptedData, "the position record of derived/ is \(count) bytes, expected 40; " + damagedAdvice)
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
