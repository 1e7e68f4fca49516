import ByteKeys
import Foundation
import LMDB
import Logging
import Synchronization

/// The log's named databases and the byte layout of their keys and values (`docs/log-format.md`).
///
/// Everything here runs inside a transaction lent by the caller; `LogStore` itself holds only
/// immutable handles, so it is `Sendable`.
package final class LogStore: Sendable {
    /// The format this code writes. Ledgers with a higher number are refused.
    ///
    /// - 1: the head (position, hash, time of the last event) kept in `meta`/`head`, written by every commit.
    /// - 2: the head is the last entry of `log` itself; `meta`/`head` is gone (one B-tree fewer per
    ///   commit). A version 1 ledger is upgraded in place when opened for writing.
    /// - 3: the log's bytes are those of 2; the layers above may keep their data in layouts releases
    ///   of version 2 misread (ShareLedger's compact rows and history journal), so those releases
    ///   must refuse the ledger rather than write it. A version 2 ledger is marked 3 when opened for
    ///   writing (nothing else changes); opened read-only, it is read as it is.
    /// - 4: the layers' derived databases may live in a companion environment, `derived/`, flushed
    ///   off the commit path (`meta`/`derived_state` says so; ``DerivedState``). A version 3 ledger
    ///   opened for writing by a layer that defers its derived state is moved to this layout.
    /// - 5: a layer's derived databases in the companion may have twins (`name~b`), and
    ///   `derived_meta`/`twins` says which copy is in use (``switchTwins(_:)``); a release of version 4
    ///   would read the other. A version 4 ledger is marked 5 when opened for writing (its twins are
    ///   created empty; nothing else changes).
    package static let formatVersion: UInt32 = 5

    package let environment: Environment
    /// position (8-byte big-endian) → stored envelope bytes.
    package let log: Database
    /// ASCII key → value: `format_version` (4 bytes), `head` (48 bytes).
    package let meta: Database
    /// container ‖ 0x00 ‖ command id (16 bytes) → first position (8) ‖ event count (4) ‖ stream version (8).
    package let commands: Database
    /// container ‖ 0x00 ‖ stream name → stream version (8) ‖ position of its last event (8), big-endian.
    /// Older events of a stream are found through each envelope's `stream_previous_position`.
    package let streams: Database
    /// position (8-byte big-endian) → a signed checkpoint of the head at that position
    /// (``Checkpoint``; layout in `docs/log-format.md`). Not a read model: it cannot be rebuilt from the log.
    package let checkpoints: Database
    /// The databases of the layers built on the log (``EventLog/Configuration/databases``), by name.
    package let extensionDatabases: [String: Database]
    /// `derived_meta` in the companion environment when the derived databases live there
    /// (``DerivedState``); nil when everything is in one environment.
    package let derivedMeta: Database?
    /// The shared lock on the ledger directory this process holds while the ledger is open.
    let directoryLock: DirectoryLock
    /// The derived position at which ``read(_:)`` last gave up waiting for the derived state to
    /// reach the log (no writer is catching up); reads with the derived state there do not wait.
    let derivedStuckAt = Atomic<UInt64>(.max)
    /// The ids this process's writer's last commit took in the companion environment and in the
    /// log's own file (`first`, `second`), when that commit wrote the derived position at the head it
    /// committed; zeros before any. A read transaction that sees exactly these two snapshots sees the
    /// derived state at the log's head, without looking (``read(_:)``). One atomic pair, so a reader
    /// never matches the companion of one commit with the log of another.
    let consistentCommit = Atomic<WordPair>(WordPair(first: 0, second: 0))
    /// How many read transactions looked for a gap between the derived state and the log (for tests).
    package let derivedGapLooks = Atomic<Int>(0)
    /// Set when a read or a write met a row of `derived/` damaged at rest (``recordDerivedDamage(_:)``):
    /// this process's writer derives `derived/` again before its next batch; a close that finds it
    /// still set marks `derived/` for the next open for writing.
    package let derivedDamageSeen = Atomic<Bool>(false)
    /// Opened read-only with the derived state behind the log or not matching it: what
    /// ``catchUpDerivedStateInMemory(replay:logger:)`` made of it (set once, at the open).
    let readOnlyDerived = Mutex<ReadOnlyDerived?>(nil)

    /// The log's own named databases.
    /// The stream and command records are derived from the log (each envelope names its stream,
    /// version and command id), so with ``EventLog/Configuration/defersDerivedState`` they live
    /// with the layers' derived databases (``DerivedState``).
    package static let databaseSpecs: [DatabaseSpec] = [
        DatabaseSpec("log"),
        DatabaseSpec("meta"),
        DatabaseSpec("commands", derived: true),
        DatabaseSpec("streams", derived: true),
        DatabaseSpec("checkpoints"),
    ]

    package static let formatKey = Array("format_version".utf8)
    package static let headKey = Array("head".utf8)

    private init(environment: Environment, databases: [Database], derivedMeta: Database?, directoryLock: DirectoryLock) {
        self.directoryLock = directoryLock
        var byName = Dictionary(uniqueKeysWithValues: databases.map { ($0.name, $0) })
        self.environment = environment
        self.log = byName.removeValue(forKey: "log")!
        self.meta = byName.removeValue(forKey: "meta")!
        self.commands = byName.removeValue(forKey: "commands")!
        self.streams = byName.removeValue(forKey: "streams")!
        self.checkpoints = byName.removeValue(forKey: "checkpoints")!
        self.extensionDatabases = byName
        self.derivedMeta = derivedMeta
    }

    /// Closes the environment (after the transactions in flight) and lets go of the directory lock.
    package func close() {
        environment.close()
        directoryLock.release()
    }

    /// The database named `name` among the ones the configuration added.
    package func database(_ name: String) -> Database? { extensionDatabases[name] }

    // MARK: - Opening

    /// Opens the ledger at `configuration.path`, creating it when allowed, and checks that it is a
    /// ledger this code can read.
    package static func open(_ configuration: EventLog.Configuration) throws(LedgerError) -> LogStore {
        try open(configuration, discardingDamagedCompanion: !configuration.readOnly)
    }

    /// ``open(_:)``; with `discardingDamagedCompanion`, a `derived/` whose databases LMDB finds damaged
    /// while opening them is discarded and the ledger opened again (once): it is derived again from
    /// the log (``DerivedState``).
    private static func open(
        _ configuration: EventLog.Configuration, discardingDamagedCompanion: Bool
    ) throws(LedgerError) -> LogStore {
        let path = configuration.path
        try prepareDirectory(configuration)
        let directoryLock = DirectoryLock(path: path)
        let environment = try openEnvironment(configuration)
        let existing = try existingDatabases(environment, configuration)

        // Where the derived databases live: with the log, or in the companion `derived/`.
        let split: DerivedState.Placement
        do {
            split = try DerivedState.placement(
                environment, existing: existing, configuration: configuration, lock: directoryLock)
        } catch {
            environment.close()
            throw error
        }
        let allSpecs = databaseSpecs + configuration.databases
        let opened: OpenedDatabases
        switch try openDatabases(
            environment, configuration, existing: existing, split: split, specs: allSpecs,
            discardingDamagedCompanion: discardingDamagedCompanion)
        {
        case .opened(let databases): opened = databases
        case .reopen(let discarding): return try open(configuration, discardingDamagedCompanion: discarding)
        }
        let store = LogStore(
            environment: environment, databases: opened.databases, derivedMeta: opened.derivedMeta, directoryLock: directoryLock)
        do {
            try store.checkFormat(initialize: !configuration.readOnly)
            if split.separate && !configuration.readOnly {
                try DerivedState.prepare(store, existing: existing, derivedSpecs: opened.derivedSpecs, added: opened.addedDerived)
            }
            // Kept with the log: a derived database this open created in a ledger that holds events
            // starts empty though the events it reflects are there, so everything derived is derived
            // again (the companion layout does this through its position record, `DerivedState.prepare`).
            let derivedNames = allSpecs.filter(\.derived).map(\.name)
            if !split.separate && !configuration.readOnly && !existing.isEmpty && derivedNames.contains(where: { !existing.contains($0) }) {
                try store.deriveAgainWithTheLog(Set(derivedNames), replay: configuration.derivedReplay, logger: configuration.logger)
            }
            if split.exclusive { directoryLock.shared() }
        } catch {
            environment.close()
            throw error
        }
        return store
    }

    /// Checks that the ledger directory exists (creating it when allowed) and that a directory
    /// without `data.mdb` holds nothing but what a new ledger may be created beside.
    private static func prepareDirectory(_ configuration: EventLog.Configuration) throws(LedgerError) {
        let path = configuration.path
        let fileManager = FileManager.default
        var isDirectory: ObjCBool = false
        let create = configuration.createIfMissing && !configuration.readOnly
        if !fileManager.fileExists(atPath: path, isDirectory: &isDirectory) {
            guard create else {
                throw LedgerError(
                    .notALedger, "there is no ledger at \(path): the directory does not exist (open with "
                        + "createIfMissing to create a new ledger there)")
            }
            do {
                try fileManager.createDirectory(atPath: path, withIntermediateDirectories: true)
            } catch {
                throw LedgerError(.notALedger, "cannot create the ledger directory \(path): \(error)")
            }
        } else if !isDirectory.boolValue {
            throw LedgerError(.notALedger, "\(path) is a file, not a ledger directory")
        }
        let dataFile = (path as NSString).appendingPathComponent("data.mdb")
        if !fileManager.fileExists(atPath: dataFile) {
            guard create else {
                throw LedgerError(.notALedger, "there is no ledger at \(path) (no data.mdb)")
            }
            let contents = (try? fileManager.contentsOfDirectory(atPath: path)) ?? []
            let foreign = contents.filter { $0 != "lock.mdb" && !configuration.companionFiles.contains($0) && !LedgerRole.fileNames.contains($0) }
            guard foreign.isEmpty else {
                throw LedgerError(
                    .notALedger, "\(path) is not a ledger and not empty (it holds \(foreign.prefix(3).joined(separator: ", "))"
                        + (foreign.count > 3 ? ", ..." : "") + "); choose an empty or new directory")
            }
        }
    }

    /// Opens the LMDB environment of the ledger directory; a directory LMDB cannot open as an
    /// environment is left as it was found (no `lock.mdb` behind) and named as not a ledger.
    private static func openEnvironment(_ configuration: EventLog.Configuration) throws(LedgerError) -> Environment {
        let path = configuration.path
        let lockFile = (path as NSString).appendingPathComponent("lock.mdb")
        let lockExisted = FileManager.default.fileExists(atPath: lockFile)
        do {
            var options = EnvironmentOptions(
                path: path,
                mapSize: configuration.initialMapSize,
                maxMapSize: configuration.maximumMapSize,
                maxDatabases: 32,
                maxReaders: configuration.maxReaders,
                durability: configuration.durability.syncMode,
                readOnly: configuration.readOnly)
            options.writeMap = configuration.scratch
            return try Environment(options: options)
        } catch {
            if !lockExisted { try? FileManager.default.removeItem(atPath: lockFile) }
            if error.code == .invalid || error.code == .versionMismatch {
                throw LedgerError(
                    .notALedger, "\(path) holds a data.mdb that is not a readable LMDB file: \(error.message)",
                    underlying: error.description)
            }
            if error.code == .badPath {
                throw LedgerError(.notALedger, "cannot open the ledger at \(path): \(error.message)", underlying: error.description)
            }
            throw LedgerError(error, while: "opening the ledger at \(path)")
        }
    }

    /// The names of the databases the environment holds, checked to be a ledger's (or none, for a
    /// new ledger opened for writing) of a format this code reads.
    private static func existingDatabases(
        _ environment: Environment, _ configuration: EventLog.Configuration
    ) throws(LedgerError) -> [String] {
        let path = configuration.path
        let existing: [String]
        do {
            existing = try environment.databaseNames()
        } catch {
            throw LedgerError.wrap(error, while: "reading the ledger at \(path)")
        }
        if existing.isEmpty {
            guard !configuration.readOnly else {
                throw LedgerError(.notALedger, "the LMDB environment at \(path) is empty, not a ledger")
            }
        } else if !existing.contains("meta") || !existing.contains("log") {
            throw LedgerError(
                .notALedger, "\(path) is an LMDB environment but not a ShareLedger ledger (it has databases "
                    + "\(existing.prefix(5).joined(separator: ", ")))")
        } else {
            // Before anything is created: a newer release's ledger is refused untouched.
            try refuseNewerFormat(environment, path: path)
        }
        return existing
    }

    /// The databases an open found or created: the log's and the layers', and, with the derived
    /// state in `derived/`, its `derived_meta` and the derived databases a later release added.
    private struct OpenedDatabases {
        var databases: [Database]
        var derivedMeta: Database?
        var derivedSpecs: [DatabaseSpec]
        var addedDerived: [String]
    }

    /// What opening the databases gave: the databases, or `derived/` discarded and the ledger to be
    /// opened again (with or without discarding a damaged `derived/` once more).
    private enum DatabasesOutcome {
        case opened(OpenedDatabases)
        case reopen(discardingDamagedCompanion: Bool)
    }

    /// Opens (creating them when writable) the databases of `specs`: the derived ones in the
    /// companion when `split` says so. Closes the environment when it throws or asks to reopen.
    private static func openDatabases(
        _ environment: Environment, _ configuration: EventLog.Configuration, existing: [String],
        split: DerivedState.Placement, specs allSpecs: [DatabaseSpec], discardingDamagedCompanion: Bool
    ) throws(LedgerError) -> DatabasesOutcome {
        let path = configuration.path
        let derivedSpecs = split.separate ? allSpecs.filter(\.derived) : []
        let primarySpecs = allSpecs.filter { !split.separate || !$0.derived }

        // Databases added by later releases are created by the first open for writing; read-only,
        // they cannot be, so say what to do instead of failing on the first one missing.
        let missing = primarySpecs.map(\.name).filter { !existing.contains($0) }
        if configuration.readOnly && !missing.isEmpty {
            environment.close()
            throw LedgerError(
                .readOnly, "the ledger at \(path) was written by an earlier ShareLedger and lacks the databases "
                    + "\(missing.joined(separator: ", ")), which opening it read-only cannot add; open it once for "
                    + "writing (any command that writes, e.g. `share-ledger worker --drain`), or work on a writable copy")
        }
        var derivedMeta: Database? = nil
        var addedDerived: [String] = []
        do {
            var opened = try environment.openDatabases(primarySpecs.map { ($0.name, $0.flags) })
            if split.separate {
                try DerivedState.attach(environment, configuration: configuration, placement: split)
                let meta = try environment.openDatabases([(DerivedState.metaName, DatabaseFlags())], inCompanion: true)[0]
                let checksummed = try DerivedState.rowsChecksummed(environment, meta)
                if !checksummed && !configuration.readOnly && !split.discard {
                    // A `derived/` written before its rows carried checksums: derived again, with them.
                    configuration.logger.notice(
                        "derived/ predates row checksums; deriving it again from the log", metadata: ["path": "\(path)"])
                    environment.close()
                    DerivedState.discardFiles(in: path)
                    return .reopen(discardingDamagedCompanion: discardingDamagedCompanion)
                }
                // A derived database a later release added is missing from a companion an earlier one
                // wrote: what is there was derived without it (see `DerivedState.prepare`).
                let companionNames = try environment.databaseNames(inCompanion: true)
                if derivedSpecs.contains(where: { companionNames.contains($0.name) }) {
                    addedDerived = derivedSpecs.map(\.name).filter { !companionNames.contains($0) }
                }
                if configuration.readOnly && !addedDerived.isEmpty {
                    throw LedgerError(
                        .readOnly, "the derived state of the ledger at \(path) was written by an earlier ShareLedger and lacks "
                            + "\(addedDerived.joined(separator: ", ")), which opening it read-only cannot derive; open it once for "
                            + "writing (e.g. `share-ledger worker --drain`), or work on a writable copy")
                }
                let companion = try environment.openDatabases(
                    derivedSpecs.map { ($0.name, $0.flags) }, inCompanion: true,
                    checksummed: checksummed || !configuration.readOnly)
                derivedMeta = meta
                opened += try DerivedState.openTwins(environment, companion, specs: derivedSpecs, switchIn: meta)
            }
            return .opened(
                OpenedDatabases(databases: opened, derivedMeta: derivedMeta, derivedSpecs: derivedSpecs, addedDerived: addedDerived))
        } catch let error as LedgerError {
            environment.close()
            throw error
        } catch {
            environment.close()
            if discardingDamagedCompanion, let damage = error as? LMDBError, DerivedState.isDamage(damage),
                DerivedState.isCompanionPath(damage.path)
            {
                // `derived/` is a cache of the log: a damaged one is derived again, not restored.
                configuration.logger.warning(
                    "derived/ is damaged; discarding it and deriving it again from the log",
                    metadata: ["path": "\(path)", "error": "\(damage.code)"])
                DerivedState.discardFiles(in: path)
                return .reopen(discardingDamagedCompanion: false)
            }
            if configuration.readOnly, let damage = error as? LMDBError, damage.code == .notFound,
                DerivedState.isCompanionPath(damage.path)
            {
                // A derived database missing from derived/'s own catalog (a damaged catalog page):
                // derived/ is the cache, rebuilt by an open for writing, not the log.
                throw DerivedState.damagedCompanion(path, damage)
            }
            throw LedgerError.wrap(error, while: "opening the ledger's databases at \(path)")
        }
    }

    /// Throws ``LedgerError/Code/formatTooNew`` when the ledger's format version is above this code's,
    /// reading `meta` without creating or writing anything.
    private static func refuseNewerFormat(_ environment: Environment, path: String) throws(LedgerError) {
        let stored: UInt32?
        do {
            let meta = try environment.openDatabases([("meta", [])], create: false)[0]
            stored = try environment.read { txn in
                try txn.get(meta, key: formatKey).flatMap { bytes in bytes.withUnsafeBytes { BigEndian.uint32($0) } }
            }
        } catch {
            throw LedgerError.wrap(error, while: "reading the format version of \(path)")
        }
        if let stored, stored > formatVersion { throw tooNew(stored, path: path) }
    }

    private static func tooNew(_ stored: UInt32, path: String) -> LedgerError {
        LedgerError(
            .formatTooNew, "the ledger at \(path) has format version \(stored); this version of "
                + "ShareLedger reads up to \(formatVersion). Upgrade ShareLedger to open it")
    }

    /// Writes the format version of a new ledger, or checks that of an existing one, and checks that
    /// the head record agrees with the log.
    private func checkFormat(initialize: Bool) throws(LedgerError) {
        let path = environment.options.path
        let stored: UInt32?
        do {
            stored = try environment.read { txn in
                try txn.get(meta, key: LogStore.formatKey).map { bytes in
                    guard bytes.count == 4, let version = bytes.withUnsafeBytes({ BigEndian.uint32($0) }) else {
                        throw LedgerError(.corruptedData, "the format version record is \(bytes.count) bytes, expected 4")
                    }
                    return version
                }
            }
        } catch {
            throw LedgerError.wrap(error, while: "reading the format version of \(path)")
        }
        if let stored {
            guard stored <= LogStore.formatVersion else { throw LogStore.tooNew(stored, path: path) }
            if stored < 2 {
                try upgradeFromVersion1(initialize: initialize)
            } else if stored < LogStore.formatVersion && initialize {
                try markCurrentFormat(from: stored)
            }
        } else {
            guard initialize else {
                throw LedgerError(.notALedger, "the ledger at \(path) has no format version")
            }
            do {
                try environment.write { txn in
                    guard try txn.statistics(log).entries == 0 else {
                        throw LedgerError(.corruptedData, "the ledger at \(path) has events but no format version")
                    }
                    try txn.put(meta, key: LogStore.formatKey, value: BigEndian.bytes(of: LogStore.formatVersion))
                }
            } catch {
                throw LedgerError.wrap(error, while: "initializing the ledger at \(path)")
            }
        }
        do {
            _ = try environment.read { txn in try readHead(txn) }
        } catch {
            throw LedgerError.wrap(error, while: "reading the head of \(path)")
        }
    }

    /// Format 1 kept a head record that every commit rewrote; format 2 reads the head from the last
    /// log entry. Opened for writing, a version 1 ledger whose head record agrees with its log gets
    /// version 2 and loses the record; opened read-only, it is read as it is.
    private func upgradeFromVersion1(initialize: Bool) throws(LedgerError) {
        let path = environment.options.path
        do {
            try environment.read { txn in
                guard let bytes = try txn.get(meta, key: LogStore.headKey) else { return }
                let recorded = bytes.count == 48 ? BigEndian.uint64(bytes) : nil
                let last = try readHead(txn).position.rawValue
                // Read-only (`verify`, `audit`), a disagreement is left for the chain check to report
                // with its position; it blocks only the upgrade.
                guard recorded == last || initialize else { return }
                guard recorded == last else {
                    throw LedgerError(
                        .corruptedData, "the ledger at \(path) records head position \(recorded.map(String.init) ?? "?") "
                            + "but its last event is at \(last); run `share-ledger audit`")
                }
            }
            guard initialize else { return }
            try environment.write { txn in
                try txn.put(meta, key: LogStore.formatKey, value: BigEndian.bytes(of: LogStore.formatVersion))
                try txn.delete(meta, key: LogStore.headKey)
            }
        } catch {
            throw LedgerError.wrap(error, while: "upgrading the ledger at \(path) from format 1")
        }
    }

    /// The format version recorded in `meta`, or nil when there is none or it is not 4 bytes.
    package func storedFormatVersion(_ txn: borrowing Transaction) throws -> UInt32? {
        try txn.get(meta, key: LogStore.formatKey).flatMap { bytes in bytes.withUnsafeBytes { BigEndian.uint32($0) } }
    }

    /// Marks a version 2 ledger opened for writing as version 3: from now on its read models may
    /// hold what a version 2 release misreads, so such a release must refuse it (`formatTooNew`).
    private func markCurrentFormat(from stored: UInt32) throws(LedgerError) {
        let path = environment.options.path
        do {
            try environment.write { txn in
                try txn.put(meta, key: LogStore.formatKey, value: BigEndian.bytes(of: LogStore.formatVersion))
            }
        } catch {
            throw LedgerError.wrap(error, while: "marking the ledger at \(path) (format \(stored)) as format \(LogStore.formatVersion)")
        }
    }

    // MARK: - Head

    /// The position of the last entry (0 for an empty log), read without its hash.
    package func readHeadPosition(_ txn: borrowing Transaction) throws -> UInt64 {
        try txn.withCursor(log) { cursor in
            guard let entry = try cursor.last() else { return 0 }
            guard let position = BigEndian.uint64(entry.key) else {
                throw LedgerError(.corruptedData, "the last log entry is malformed (key \(entry.key.count) bytes)")
            }
            return position
        }
    }

    /// The head: the last log entry's position, hash and recorded time (the log's zero head when it
    /// is empty). The entry's last 32 bytes are its hash; its recorded time is the envelope's field 2.
    package func readHead(_ txn: borrowing Transaction) throws -> LogHead {
        try txn.withCursor(log) { cursor in
            guard let entry = try cursor.last() else { return LogHead(position: .start, hash: .zero) }
            guard let position = BigEndian.uint64(entry.key), let head = LogStore.head(position: position, entry: entry.value)
            else {
                throw LedgerError(.corruptedData, "the last log entry is malformed (key \(entry.key.count) bytes, value \(entry.value.count))")
            }
            return head
        }
    }

    /// The head at the log entry `entry` stored at `position`: its last 32 bytes are its hash, its
    /// recorded time is the envelope's field 2. Nil when it is too short to hold a hash.
    static func head(position: UInt64, entry: UnsafeRawBufferPointer) -> LogHead? {
        guard entry.count >= EnvelopeCodec.hashSuffixLength, let hash = EventHash(bytes: entry[(entry.count - 32)...]) else {
            return nil
        }
        return LogHead(position: LogPosition(position), hash: hash, recordedAtMicros: EnvelopeCodec.recordedAtMicros(entry))
    }

    // MARK: - Keys

    /// container ‖ 0x00 ‖ name.
    package static func scopedKey(container: String, _ name: some Collection<UInt8>) -> [UInt8] {
        var key = [UInt8]()
        key.reserveCapacity(container.utf8.count + 1 + name.count)
        key.append(contentsOf: container.utf8)
        key.append(0)
        key.append(contentsOf: name)
        return key
    }

    package static func streamKey(container: String, stream: String) -> [UInt8] {
        scopedKey(container: container, stream.utf8)
    }

    package static func commandKey(container: String, commandID: UUID) -> [UInt8] {
        // ``scopedKey(container:_:)`` of the id's 16 bytes, without an array for the id.
        withUnsafeBytes(of: commandID.uuid) { scopedKey(container: container, $0) }
    }

    // MARK: - Streams and commands

    /// A stream's version and the position of its last event; (0, 0) for a stream with no events.
    package func streamRecord(_ txn: borrowing Transaction, key: [UInt8]) throws -> (version: UInt64, last: UInt64) {
        let record = try key.withUnsafeBytes { k in
            try txn.withValue(streams, key: k) { value -> (UInt64, UInt64) in
                guard value.count == 16, let version = BigEndian.uint64(value), let last = BigEndian.uint64(value, at: 8)
                else {
                    throw LedgerError(
                        .corruptedData, "a stream record is \(value.count) bytes, expected 16"
                            + (derivedMeta != nil ? " (in derived/: \(DerivedState.damagedAdvice))" : ""))
                }
                return (version, last)
            }
        }
        return record ?? (0, 0)
    }

    package func writeStreamRecord(_ txn: borrowing Transaction, key: [UInt8], version: UInt64, last: UInt64) throws {
        var record = (version.bigEndian, last.bigEndian)
        try withUnsafeBytes(of: &record) { value in
            try key.withUnsafeBytes { k in try txn.put(streams, key: k, value: value) }
        }
    }

    /// The recorded outcome of a command id, if the ledger has seen it.
    package func commandRecord(_ txn: borrowing Transaction, key: [UInt8]) throws -> (first: UInt64, count: UInt32, streamVersion: UInt64)? {
        try key.withUnsafeBytes { k in
            try txn.withValue(commands, key: k) { raw in
                guard raw.count == 20, let first = BigEndian.uint64(raw), let count = BigEndian.uint32(raw, at: 8),
                    let version = BigEndian.uint64(raw, at: 12)
                else {
                    throw LedgerError(
                        .corruptedData, "a command record is \(raw.count) bytes, expected 20"
                            + (derivedMeta != nil ? " (in derived/: \(DerivedState.damagedAdvice))" : ""))
                }
                // A record the writer made starts at position 1 or later, holds at least one event and
                // ends inside UInt64: anything else is damage (and would overflow the callers' sums).
                guard first >= 1, count >= 1, first.addingReportingOverflow(UInt64(count)).overflow == false else {
                    throw LedgerError(
                        .corruptedData, "a command record says positions \(first) and \(count) after it, which no log holds")
                }
                return (first, count, version)
            }
        }
    }

    /// Records the event `envelope`, stored at `position`, in its command's record, as the writer
    /// recorded it when it appended the event: a command's record holds its first position, its event
    /// count and the stream version after it, which is 0 for a command of the sharing layer (the
    /// ``EventLog/reservedTypePrefix`` namespace, whatever the type) and the event's stream version
    /// for a raw append. An event whose command id has a record that does not end right before it
    /// starts a new record; with `refusingGaps`, it returns false instead and writes nothing. Used
    /// where events the writer appended are recorded again: deriving the records from the log, and
    /// a replica applying its primary's events.
    package func recordCommand(
        _ txn: borrowing Transaction, _ envelope: EventEnvelope, position: UInt64, refusingGaps: Bool
    ) throws -> Bool {
        let key = LogStore.commandKey(container: envelope.container, commandID: envelope.commandID)
        let streamVersion = LogStore.commandStreamVersion(eventType: envelope.eventType, streamVersion: envelope.streamVersion)
        if let record = try commandRecord(txn, key: key) {
            if record.first + UInt64(record.count) == position {
                try writeCommandRecord(txn, key: key, first: record.first, count: record.count + 1, streamVersion: streamVersion)
                return true
            }
            if refusingGaps { return false }
        }
        try writeCommandRecord(txn, key: key, first: position, count: 1, streamVersion: streamVersion)
        return true
    }

    /// The stream version a command's record holds once the command's event of type `eventType` and
    /// stream version `streamVersion` is recorded (its last event so far): 0 for a type of the sharing
    /// layer's namespace (``EventLog/reservedTypePrefix``, known to this release or not), else the
    /// event's stream version (0 for an unversioned event). The writer's own records agree: a raw
    /// append's events are versioned, and its record holds its last event's version; a sharing
    /// command's holds 0. Deriving the records, a replica and `import` all record by this rule.
    package static func commandStreamVersion(eventType: String, streamVersion: UInt64) -> UInt64 {
        eventType.hasPrefix(EventLog.reservedTypePrefix) ? 0 : streamVersion
    }

    package func writeCommandRecord(_ txn: borrowing Transaction, key: [UInt8], first: UInt64, count: UInt32, streamVersion: UInt64) throws {
        try withUnsafeTemporaryAllocation(byteCount: 20, alignment: 8) { buffer in
            buffer.storeBytes(of: first.bigEndian, toByteOffset: 0, as: UInt64.self)
            buffer.storeBytes(of: count.bigEndian, toByteOffset: 8, as: UInt32.self)
            buffer.storeBytes(of: streamVersion.bigEndian, toByteOffset: 12, as: UInt64.self)
            try key.withUnsafeBytes { k in try txn.put(commands, key: k, value: UnsafeRawBufferPointer(buffer)) }
        }
    }
}

extension Durability {
    /// The LMDB flags of this mode.
    package var syncMode: SyncMode {
        switch self {
        case .durable: return .durable
        case .relaxed: return .relaxed
        case .unsafeNoSync: return .unsafeNoSync
        }
    }
}
