import CLMDB
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An open LMDB environment: one per directory per process (`lmdb-notes.md`, rule 5).
///
/// Always opened with `MDB_NOTLS`, so a read transaction belongs to its closure, not to a thread.
/// Transactions exist only inside ``read(_:)`` and ``write(_:)`` closures: they begin and end on
/// the calling thread inside one synchronous call, so they can never cross an `await` or end in a
/// `deinit`. `write` grows the map when it fills up and runs its closure again, so the closure must
/// not change anything outside the transaction before `write` returns.
///
/// `@unchecked Sendable`: the `MDB_env` pointer is safe to share between threads under `MDB_NOTLS`
/// (LMDB's own contract). The mutable state (`closed`, `mapSize`) is only written while
/// ``ResizeLock`` is held exclusive and only read while it is held shared, so no data race is
/// possible. The companion and the twins' switch are set once, before the environment is shared
/// with another thread, and only read after. (For the same reasons they are `@exclusivity(unchecked)`:
/// no access to one overlaps another, so the runtime's checks, on every transaction, are not needed.)
package final class Environment: @unchecked Sendable {
    package let options: EnvironmentOptions
    private let env: OpaquePointer
    /// The companion environment (``attachCompanion(_:)``): set once, before the environment is
    /// shared with another thread, and never changed after.
    @exclusivity(unchecked) private var companionEnv: OpaquePointer?
    /// The companion's options; nil when there is none.
    @exclusivity(unchecked) package private(set) var companionOptions: EnvironmentOptions?
    private let resizeLock = ResizeLock()
    /// Bytes of the companion's file allocated ahead of its use (``reserveCompanionSpace()``).
    private let companionAllocated = Mutex<Int>(0)
    @exclusivity(unchecked) private var closed = false
    /// Where the switch of the twins is (``setSwitch(_:key:twinsOpened:)``); nil when there is none.
    /// Set once, before the environment is shared with another thread, and never changed after (as
    /// `companionEnv`): every transaction reads it as it begins, so it takes no lock.
    @exclusivity(unchecked) private var twinSwitch: (db: Database, key: [UInt8], twinsOpened: Bool)?
    /// The switch's value at one snapshot of the file that holds it: `first` is that snapshot's
    /// transaction id plus one (0: none known), `second` 1 when set. A snapshot never changes, so a
    /// transaction that begins on the same one (a read of it, or the write that follows it) takes
    /// the value from here instead of reading it (``switchIsSet(_:companion:writable:)``).
    private let knownSwitch = Atomic<WordPair>(WordPair(first: 0, second: 0))
    /// Stale reader slots cleared by `mdb_reader_check` when the environment was opened.
    package let staleReadersCleared: Int
    /// Read-only transaction handles that ended (`mdb_txn_reset`), each with its companion's, kept
    /// to be begun again with `mdb_txn_renew`: beginning a read-only transaction allocates and zeroes
    /// its handle (`calloc`), about 2,000 instructions per handle, which renewing one skips. A reset
    /// handle holds no snapshot: it is not an open transaction (a map resize may happen while it
    /// waits here), but it keeps its reader slot, so at most ``idleReaderLimit`` are kept. They are
    /// aborted when the environment closes.
    private let idleReaders = Mutex<[IdleReader]>([])

    /// Reset read-only handles waiting in ``idleReaders``. `@unchecked Sendable`: under `MDB_NOTLS` a
    /// read-only handle may move between threads, and one is only ever used by the transaction that
    /// took it out of the pool, or by ``freeIdleReaders()`` under the exclusive resize lock.
    private struct IdleReader: @unchecked Sendable {
        let txn: OpaquePointer
        let companion: OpaquePointer?

        /// Frees both handles.
        func abortBoth() {
            mdb_txn_abort(txn)
            if let companion { mdb_txn_abort(companion) }
        }
    }

    /// Opens the environment at `options.path`.
    ///
    /// - Throws: ``LMDBError`` with ``LMDBError/Code/badPath`` when the directory is missing, is not a
    ///   directory or is not writable; ``LMDBError/Code/invalid`` when it holds a `data.mdb` that is not
    ///   an LMDB file; ``LMDBError/Code/versionMismatch`` for a file from an incompatible LMDB.
    package init(options: EnvironmentOptions) throws(LMDBError) {
        (env, staleReadersCleared) = try Environment.open(options)
        self.options = options
    }

    /// Creates and opens one LMDB environment; returns it with the stale reader slots cleared.
    private static func open(_ options: EnvironmentOptions) throws(LMDBError) -> (OpaquePointer, Int) {
        try Environment.checkDirectory(options.path, writable: !options.readOnly)
        try DataFileCheck.check(directory: options.path)
        try Environment.prepareLockFile(directory: options.path, maxReaders: options.maxReaders)
        var envPointer: OpaquePointer?
        try check(mdb_env_create(&envPointer), "mdb_env_create")
        guard let env = envPointer else {
            throw LMDBError(code: .unknown, operation: "mdb_env_create", message: "returned no environment")
        }
        do {
            try check(mdb_env_set_maxdbs(env, MDB_dbi(options.maxDatabases)), "mdb_env_set_maxdbs")
            try check(mdb_env_set_maxreaders(env, UInt32(options.maxReaders)), "mdb_env_set_maxreaders")
            let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
            var requested = Environment.roundUp(max(options.mapSize, pageSize * 16), to: pageSize)
            if let maxSize = options.maxMapSize { requested = min(requested, Environment.roundUp(maxSize, to: pageSize)) }
            try check(mdb_env_set_mapsize(env, requested), "mdb_env_set_mapsize")
            var flags = UInt32(MDB_NOTLS) | options.durability.environmentFlags
            if options.readOnly { flags |= UInt32(MDB_RDONLY) }
            if options.writeMap && !options.readOnly { flags |= UInt32(MDB_WRITEMAP) | UInt32(MDB_MAPASYNC) }
            try check(mdb_env_open(env, options.path, flags, 0o644), "mdb_env_open", path: options.path)
            var dead: Int32 = 0
            try check(mdb_reader_check(env, &dead), "mdb_reader_check", path: options.path)
            return (env, Int(dead))
        } catch {
            mdb_env_close(env)
            throw error
        }
    }

    /// Opens a second environment, the companion, that every transaction of this one spans from
    /// now on: a database opened with `inCompanion` lives there, and ``Transaction`` routes each
    /// operation to the environment of its database.
    ///
    /// Transactions begin in the companion first, then here (so every process takes the two
    /// writer locks in the same order), and a write commits here first, then in the companion: a
    /// companion opened without flushes (``SyncMode/unsafeNoSync``) holds state derived from this
    /// environment's, which its owner can derive again after a crash. Call it once, right after
    /// `init`, before the environment is used by another thread; `readOnly` must match.
    package func attachCompanion(_ companion: EnvironmentOptions) throws(LMDBError) {
        precondition(companionEnv == nil, "an environment has at most one companion")
        precondition(companion.readOnly == options.readOnly, "a companion is read-only exactly when its environment is")
        let (opened, _) = try Environment.open(companion)
        // Idle read handles were begun without a companion's: a read from now on needs both.
        freeIdleReaders()
        companionEnv = opened
        companionOptions = companion
    }

    /// The least the companion's file is allocated beyond its used pages before a write begins.
    package static let companionReserveBytes = 256 << 10

    /// Makes sure the companion's file has disk blocks allocated (`posix_fallocate`) for its used
    /// pages plus ``companionReserveBytes`` or an eighth of them, whichever is more, before a write
    /// transaction begins. The companion commits after this environment, when the callers' events
    /// are already stored: on a full file system its page writes must not be the ones that find no
    /// room, so the room is taken first, and a write that cannot get it fails before anything is
    /// stored (``LMDBError/Code/system`` with `ENOSPC`).
    private func reserveCompanionSpace() throws(LMDBError) {
        guard !closed, let companionEnv, let companionOptions, !companionOptions.readOnly else { return }
        var info = MDB_envinfo()
        var stat = MDB_stat()
        guard mdb_env_info(companionEnv, &info) == MDB_SUCCESS, mdb_env_stat(companionEnv, &stat) == MDB_SUCCESS else { return }
        let used = (info.me_last_pgno + 1) * Int(stat.ms_psize)
        let wanted = used + max(Environment.companionReserveBytes, used / 8)
        if companionAllocated.withLock({ $0 }) >= wanted { return }
        var fd: mdb_filehandle_t = -1
        guard mdb_env_get_fd(companionEnv, &fd) == MDB_SUCCESS, fd >= 0 else { return }
        // Allocate twice the shortfall at once, so this runs rarely.
        let target = used + 2 * max(Environment.companionReserveBytes, used / 8)
        let rc = posix_fallocate(fd, 0, off_t(target))
        if rc == 0 {
            companionAllocated.withLock { $0 = max($0, target) }
        } else if rc == ENOSPC || rc == EDQUOT {
            throw LMDBError(
                code: .system, returnCode: ENOSPC, operation: "posix_fallocate", path: companionOptions.path,
                message: "the disk is full (no room for the derived state's next pages); nothing of the failed write "
                    + "was stored. Free space and retry")
        }
        // Other answers (a file system without fallocate): the write goes on unreserved.
    }

    /// Grows the companion's map before a write when fewer than ``companionHeadroomBytes`` (or a
    /// sixteenth of the map, whichever is more) are left past its last page. The companion commits
    /// after this environment has: a full map found only by its commit (liblmdb saving its free list)
    /// could no longer be undone and run again, so the room is made before the transaction begins.
    /// At the maximum size this throws ``LMDBError/Code/storageFull`` with nothing written.
    private func keepCompanionHeadroom() throws(LMDBError) {
        guard !closed, let companionEnv, let companionOptions, !companionOptions.readOnly else { return }
        var info = MDB_envinfo()
        var stat = MDB_stat()
        guard mdb_env_info(companionEnv, &info) == MDB_SUCCESS, mdb_env_stat(companionEnv, &stat) == MDB_SUCCESS else { return }
        let used = (info.me_last_pgno + 1) * Int(stat.ms_psize)
        guard used + max(Environment.companionHeadroomBytes, info.me_mapsize / 16) > info.me_mapsize else { return }
        try grow(companion: true, after: info.me_mapsize)
    }

    /// The least room ``keepCompanionHeadroom()`` keeps in the companion's map before a write.
    package static let companionHeadroomBytes = 64 << 10

    /// The bytes ``prepareLockFile(directory:maxReaders:)`` allocates for `lock.mdb`: more than
    /// liblmdb's reader table of `maxReaders` slots (64 bytes each) and its header take.
    static func lockFileBytes(maxReaders: Int) -> Int {
        let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
        return roundUp(maxReaders * 64 + 4096, to: pageSize)
    }

    /// Makes `lock.mdb` with its disk blocks allocated when there is none (a new environment, or a
    /// restored backup, which never holds one), before liblmdb makes it. liblmdb sizes the file with
    /// `ftruncate` and writes it through a shared map: on a full file system such a sparse file
    /// faults the process (SIGBUS) on its first write, where this gives
    /// ``LMDBError/Code/storageFull`` and leaves no file. An existing file is left as it is; a
    /// directory that takes no new file (read-only) is left to liblmdb.
    static func prepareLockFile(directory: String, maxReaders: Int) throws(LMDBError) {
        let path = directory + "/lock.mdb"
        #if canImport(Glibc)
            let fd = Glibc.open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode_t(0o644))
        #else
            let fd = Darwin.open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode_t(0o644))
        #endif
        guard fd >= 0 else { return }
        let rc = posix_fallocate(fd, 0, off_t(lockFileBytes(maxReaders: maxReaders)))
        #if canImport(Glibc)
            _ = Glibc.close(fd)
        #else
            _ = Darwin.close(fd)
        #endif
        guard rc == ENOSPC || rc == EDQUOT else { return }
        unlink(path)
        throw LMDBError(
            code: .storageFull, returnCode: ENOSPC, operation: "creating lock.mdb", path: directory,
            message: "the file system holding \(directory) is full: there is no room for the lock file lock.mdb that "
                + "opening a ledger makes (a restored backup has none). Nothing was read or written; free space and retry")
    }

    /// Whether ``attachCompanion(_:)`` attached one.
    package var hasCompanion: Bool { companionEnv != nil }

    deinit {
        // Closing the environment is not ending a transaction: none can be open once the last
        // reference is gone, because transactions only live inside this object's methods. (The idle
        // read handles were reset when their transactions ended: freeing them ends nothing.)
        if !closed {
            freeIdleReaders()
            if options.durability == .unsafeNoSync && !options.readOnly { mdb_env_sync(env, 1) }
            mdb_env_close(env)
            if let companionEnv, let companionOptions {
                if !companionOptions.readOnly { mdb_env_sync(companionEnv, 1) }
                mdb_env_close(companionEnv)
            }
        }
    }

    private static func checkDirectory(_ path: String, writable: Bool) throws(LMDBError) {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw LMDBError(
                code: .badPath, returnCode: ENOENT, operation: "open", path: path,
                message: "the directory does not exist; create it first")
        }
        guard isDirectory.boolValue else {
            throw LMDBError(
                code: .badPath, returnCode: ENOTDIR, operation: "open", path: path,
                message: "the path is not a directory; an environment is a directory holding data.mdb and lock.mdb")
        }
        if writable && access(path, W_OK) != 0 {
            throw LMDBError(
                code: .badPath, returnCode: EACCES, operation: "open", path: path,
                message: "the directory is not writable; fix its permissions or open it read-only")
        }
    }

    @inline(__always)
    static func roundUp(_ value: Int, to multiple: Int) -> Int {
        (value + multiple - 1) / multiple * multiple
    }

    // MARK: - Databases

    /// Opens (creating where missing, unless read-only or `create` is false) the named databases in
    /// one transaction. Without `create`, a missing database fails with ``LMDBError/Code/notFound``
    /// and nothing is written.
    ///
    /// Call once at start-up with every database the program uses (`lmdb-notes.md`, rule 7).
    /// With `inCompanion`, they are opened in the companion (``attachCompanion(_:)``).
    ///
    /// With `checksummed`, every value carries a CRC-32C trailer checked on every read (``RowChecksum``;
    /// sorted duplicates of varying sizes excepted, whose order a trailer would change).
    package func openDatabases(
        _ specs: [(name: String, flags: DatabaseFlags)], create: Bool = true, inCompanion: Bool = false,
        checksummed: Bool = false
    ) throws(LMDBError) -> [Database] {
        precondition(!inCompanion || companionEnv != nil, "no companion environment is attached")
        let handles = try handles(
            specs.map { ($0.name, $0.flags, inCompanion) }, create: create, missingAllowed: false, operation: "openDatabases")
        return zip(specs, handles).map { spec, dbi in
            Database(name: spec.name, dbi: dbi!, flags: spec.flags, inCompanion: inCompanion, checksummed: checksummed)
        }
    }

    /// `databases` with twins (``Database``): for each, the database of the same flags named with
    /// ``Database/twinSuffix``, in the same environment, opened (created where missing, unless
    /// read-only or `create` is false). A database whose twin is missing and cannot be created is
    /// returned as it is, without one.
    package func openTwins(of databases: [Database], create: Bool = true) throws(LMDBError) -> [Database] {
        let handles = try handles(
            databases.map { ($0.name + Database.twinSuffix, $0.flags, $0.inCompanion) }, create: create,
            missingAllowed: true, operation: "openTwins")
        return zip(databases, handles).map { db, twin in
            guard let twin else { return db }
            return Database(
                name: db.name, dbi: db.dbi, twinDBI: twin, flags: db.flags, inCompanion: db.inCompanion,
                checksummed: db.checksummed)
        }
    }

    /// Opens the named databases in one transaction (creating them where missing, unless read-only
    /// or not `create`); nil for one missing that may be (`missingAllowed`, not created).
    private func handles(
        _ requests: [(name: String, flags: DatabaseFlags, inCompanion: Bool)], create: Bool, missingAllowed: Bool,
        operation: String
    ) throws(LMDBError) -> [MDB_dbi?] {
        let readOnly = options.readOnly || !create
        let paths = (main: path(inCompanion: false), companion: path(inCompanion: true))
        let body = { (txn: borrowing Transaction) throws -> [MDB_dbi?] in
            var opened: [MDB_dbi?] = []
            for request in requests {
                var dbi: MDB_dbi = 0
                var flags = request.flags.rawValue
                if !readOnly { flags |= UInt32(MDB_CREATE) }
                let rc = mdb_dbi_open(request.inCompanion ? txn.companion : txn.handle, request.name, flags, &dbi)
                if rc == MDB_NOTFOUND && readOnly && missingAllowed {
                    opened.append(nil)
                    continue
                }
                try check(rc, "mdb_dbi_open(\(request.name))", path: request.inCompanion ? paths.companion : paths.main)
                opened.append(dbi)
            }
            return opened
        }
        do {
            // Handles opened in a transaction live on only if it commits, read-only ones included.
            var opened: [MDB_dbi?] = []
            try withTransaction(writable: !readOnly, commitReadOnly: true) { txn in opened = try body(txn) }
            return opened
        } catch let error as LMDBError {
            throw error
        } catch {
            throw LMDBError(code: .unknown, operation: operation, path: options.path, message: "\(error)")
        }
    }

    /// The directory of the environment that holds databases in the companion (`inCompanion`) or not:
    /// what errors there name.
    private func path(inCompanion: Bool) -> String { inCompanion ? companionOptions?.path ?? options.path : options.path }

    /// Where the switch of the twins is (``Database``): the one-byte value 1 under `key` in `db`
    /// makes every transaction that begins after its commit use the twins; any other value, or
    /// none, the databases themselves. Set once, before the environment is shared with another
    /// thread. Each transaction then reads it once, as it begins. Without `twinsOpened` (a
    /// read-only process that found no twins), a transaction that begins with the switch set fails
    /// with ``LMDBError/Code/incompatible`` rather than read databases no longer in use.
    package func setSwitch(_ db: Database, key: [UInt8], twinsOpened: Bool = true) {
        precondition(twinSwitch == nil, "an environment has at most one switch")
        twinSwitch = (db, key, twinsOpened)
    }

    /// Whether the switch (``setSwitch(_:key:twinsOpened:)``) is set in the snapshot `txn` (and
    /// `companion`) began on: a write transaction begins on the snapshot its file's last commit
    /// made, one id below its own.
    private func switchIsSet(_ txn: OpaquePointer, companion: OpaquePointer?, writable: Bool) throws(LMDBError) -> Bool {
        guard let (db, key, twinsOpened) = twinSwitch else { return false }
        let holder = db.inCompanion ? companion ?? txn : txn
        let id = UInt(truncatingIfNeeded: mdb_txn_id(holder))
        let snapshot = writable ? id &- 1 : id
        let known = knownSwitch.load(ordering: .acquiring)
        let set: Bool
        if known.first != 0 && known.first == snapshot &+ 1 {
            set = known.second == 1
        } else {
            var value = MDB_val()
            let rc = key.withUnsafeBytes { bytes in
                var k = MDB_val(buffer: bytes)
                return mdb_get(holder, db.dbi, &k, &value)
            }
            if rc != MDB_NOTFOUND { try check(rc, "mdb_get(\(db.name), switch)", path: path(inCompanion: db.inCompanion)) }
            set = rc == MDB_SUCCESS && value.mv_size == 1 && value.mv_data.load(as: UInt8.self) == 1
            knownSwitch.store(WordPair(first: snapshot &+ 1, second: set ? 1 : 0), ordering: .releasing)
        }
        if set && !twinsOpened {
            throw LMDBError(
                code: .incompatible, operation: "mdb_txn_begin", path: options.path,
                message: "its databases were switched to their second copies, which did not exist when it was opened; open it again")
        }
        return set
    }

    /// The names of the named databases in the environment (the keys of the unnamed main database).
    package func databaseNames(inCompanion: Bool = false) throws -> [String] {
        precondition(!inCompanion || companionEnv != nil, "no companion environment is attached")
        return try read { txn in
            var dbi: MDB_dbi = 0
            let handle = inCompanion ? txn.companion : txn.handle
            try check(mdb_dbi_open(handle, nil, 0, &dbi), "mdb_dbi_open(main)", path: options.path)
            return try txn.withCursor(Database(name: "(main)", dbi: dbi, flags: [], inCompanion: inCompanion)) { cursor in
                var names: [String] = []
                var entry = try cursor.first()
                while let current = entry {
                    names.append(String(decoding: current.key, as: UTF8.self))
                    entry = try cursor.next()
                }
                return names
            }
        }
    }

    // MARK: - Transactions

    /// Runs `body` in a read-only transaction and returns its result.
    ///
    /// The transaction and every buffer it hands out are valid only inside `body`. Keep it short:
    /// a reader pins the pages it can see, and a long one makes the file grow.
    package func read<R>(_ body: (borrowing Transaction) throws -> R) throws -> R {
        var result: R?
        try withTransaction(writable: false) { txn in result = try body(txn) }
        return try Environment.ran(result)
    }

    /// Runs `body` in a write transaction and commits it when `body` returns; aborts it when `body`
    /// throws or any operation inside it failed (the first error wins and is rethrown).
    ///
    /// When the map fills up, the transaction is aborted, the map is grown with no transaction open
    /// in the process, and `body` runs again; so `body` must not change state outside the transaction.
    /// With ``EnvironmentOptions/maxMapSize`` reached it throws ``LMDBError/Code/storageFull`` and
    /// nothing is written.
    package func write<R>(_ body: (borrowing Transaction) throws -> R) throws -> R {
        var result: R?
        try withTransaction(writable: true) { txn in result = try body(txn) }
        return try Environment.ran(result)
    }

    /// Like ``write(_:)``, but with a companion the companion commits first and is then flushed to
    /// disk whole (`mdb_env_sync`), before this environment commits: when this environment's commit
    /// is on disk, every commit of the companion up to this one is too. (No process can commit in
    /// the companion in between: a writer takes the companion's lock first and commits there last.)
    package func writeFlushingCompanionFirst<R>(_ body: (borrowing Transaction) throws -> R) throws -> R {
        var result: R?
        try withTransaction(writable: true, flushCompanionFirst: true) { txn in result = try body(txn) }
        return try Environment.ran(result)
    }

    /// ``read(_:)`` for a body that returns nothing: not generic, so a caller that keeps its own
    /// result makes no generic metadata at run time (a generic call across modules is not
    /// specialized).
    package func readWithoutResult(_ body: (borrowing Transaction) throws -> Void) throws {
        try withTransaction(writable: false, body)
    }

    /// The result a transaction's body left: always there when the transaction loop returned.
    package static func ran<R>(_ result: R?) throws -> R {
        guard let result else {
            throw LMDBError(code: .unknown, operation: "transaction", message: "the transaction ended without running its body")
        }
        return result
    }

    /// The common transaction loop: begin (adopting a size another process set), run, end, and on
    /// `MDB_MAP_FULL` grow and run again. With a companion, its transaction begins first and, for a
    /// write, commits last (unless `flushCompanionFirst`).
    ///
    /// Not generic: the generic entry points above keep the result themselves, so the loop makes no
    /// generic metadata at run time (its generic form did, thousands of instructions per transaction:
    /// a generic call from another module of the package is not specialized).
    func withTransaction(
        writable: Bool, commitReadOnly: Bool = false, flushCompanionFirst: Bool = false,
        _ body: (borrowing Transaction) throws -> Void
    ) throws {
        precondition(!writable || !options.readOnly, "write transaction on an environment opened read-only")
        while true {
            if writable && companionEnv != nil {
                try resizeLock.withShared { () throws(LMDBError) in try reserveCompanionSpace() }
                try keepCompanionHeadroom()
            }
            let outcome: TransactionOutcome = try resizeLock.withShared { () throws -> TransactionOutcome in
                guard !closed else {
                    throw LMDBError(
                        code: .closed, operation: writable ? "write" : "read", path: options.path,
                        message: "the environment is closed")
                }
                let begun: BegunTransactions
                switch try beginTransactions(writable: writable) {
                case .resized(let companion): return .mapResized(companion: companion)
                case .begun(let transactions): begun = transactions
                }
                let ran = try TransactionState.withTransactionState { state in try run(body, begun, writable: writable, state: state) }
                guard case .done = ran else { return ran }
                guard writable || commitReadOnly else {
                    endReadOnly(begun)
                    return .done
                }
                if let outcome = try commitTransactions(begun, writable: writable, flushCompanionFirst: flushCompanionFirst) {
                    return outcome
                }
                return .done
            }
            if try settle(outcome) { return }
        }
    }

    /// A transaction of this environment and of its companion (nil without one), just begun, with
    /// the map sizes they began with.
    private struct BegunTransactions {
        let txn: OpaquePointer
        let companion: OpaquePointer?
        let mapSizeAtStart: Int
        let companionSizeAtStart: Int
        /// The companion's directory (an error there is the companion's).
        let companionPath: String?

        func abortAll() {
            mdb_txn_abort(txn)
            if let companion { mdb_txn_abort(companion) }
        }

        /// The outcome for `error`, a full map: the companion's when it names its directory.
        func mapFull(_ error: LMDBError) -> TransactionOutcome {
            if let companionPath, error.path == companionPath {
                return .mapFull(companion: true, sizeAtFailure: companionSizeAtStart)
            }
            return .mapFull(companion: false, sizeAtFailure: mapSizeAtStart)
        }
    }

    /// What beginning the transactions gave: the transactions, or a map another process resized
    /// (in the companion or not), whose new size must be adopted first.
    private enum Beginning {
        case begun(BegunTransactions)
        case resized(companion: Bool)
    }

    /// At most this many idle read handles (pairs, with a companion) are kept for renewal.
    private var idleReaderLimit: Int { min(8, max(0, options.maxReaders / 8)) }

    /// Ends a read-only transaction that ran: its handles are reset and kept for the next read (up
    /// to ``idleReaderLimit``), else aborted. Called with the resize lock held shared.
    private func endReadOnly(_ begun: BegunTransactions) {
        mdb_txn_reset(begun.txn)
        if let companion = begun.companion { mdb_txn_reset(companion) }
        let kept = idleReaders.withLock { idle in
            guard idle.count < idleReaderLimit else { return false }
            idle.append(IdleReader(txn: begun.txn, companion: begun.companion))
            return true
        }
        if !kept { begun.abortAll() }
    }

    /// Frees the idle read handles (when the environment closes, before `mdb_env_close`).
    private func freeIdleReaders() {
        let idle = idleReaders.withLock { idle in
            defer { idle.removeAll() }
            return idle
        }
        for reader in idle { reader.abortBoth() }
    }

    /// A read-only transaction begun again from idle handles (``idleReaders``), companion first as
    /// ``beginTransactions(writable:)`` begins them; nil when none is idle. Called with the resize
    /// lock held shared.
    private func renewReadOnly() throws -> Beginning? {
        guard let reader = idleReaders.withLock({ $0.popLast() }) else { return nil }
        let (txn, companion) = (reader.txn, reader.companion)
        guard (companion != nil) == (companionEnv != nil) else {
            // (Not after ``attachCompanion(_:)``, which frees every idle handle; kept as a guard.)
            reader.abortBoth()
            return nil
        }
        if let companion, let companionOptions {
            let rc = mdb_txn_renew(companion)
            if rc != MDB_SUCCESS {
                reader.abortBoth()
                if rc == MDB_MAP_RESIZED { return .resized(companion: true) }
                try check(rc, "mdb_txn_renew", path: companionOptions.path)
            }
        }
        let rc = mdb_txn_renew(txn)
        if rc != MDB_SUCCESS {
            reader.abortBoth()
            if rc == MDB_MAP_RESIZED { return .resized(companion: false) }
            try check(rc, "mdb_txn_renew", path: options.path)
        }
        return .begun(
            BegunTransactions(
                txn: txn, companion: companion, mapSizeAtStart: currentMapSizeUnlocked(env),
                companionSizeAtStart: companionEnv.map { currentMapSizeUnlocked($0) } ?? 0, companionPath: companionOptions?.path))
    }

    /// Begins the companion's transaction (when there is a companion), then this environment's.
    /// Called with the resize lock held shared.
    private func beginTransactions(writable: Bool) throws -> Beginning {
        if !writable, let renewed = try renewReadOnly() { return renewed }
        let beginFlags = writable ? UInt32(0) : UInt32(MDB_RDONLY)
        var companionTxn: OpaquePointer?
        if let companionEnv, let companionOptions {
            var pointer: OpaquePointer?
            let rc = mdb_txn_begin(companionEnv, nil, beginFlags, &pointer)
            if rc == MDB_MAP_RESIZED { return .resized(companion: true) }
            try check(rc, "mdb_txn_begin", path: companionOptions.path)
            guard let pointer else {
                throw LMDBError(code: .unknown, operation: "mdb_txn_begin", message: "returned no transaction")
            }
            companionTxn = pointer
        }
        var txnPointer: OpaquePointer?
        let rc = mdb_txn_begin(env, nil, beginFlags, &txnPointer)
        if rc != MDB_SUCCESS, let companionTxn { mdb_txn_abort(companionTxn) }
        if rc == MDB_MAP_RESIZED { return .resized(companion: false) }
        try check(rc, "mdb_txn_begin", path: options.path)
        guard let txn = txnPointer else {
            if let companionTxn { mdb_txn_abort(companionTxn) }
            throw LMDBError(code: .unknown, operation: "mdb_txn_begin", message: "returned no transaction")
        }
        return .begun(
            BegunTransactions(
                txn: txn, companion: companionTxn, mapSizeAtStart: currentMapSizeUnlocked(env),
                companionSizeAtStart: companionEnv.map { currentMapSizeUnlocked($0) } ?? 0, companionPath: companionOptions?.path))
    }

    /// Commits both transactions of `begun`: the companion last, or, with `flushCompanionFirst`,
    /// first and flushed to disk before this environment commits. Returns the outcome to return
    /// instead of the result (a full map), nil when committed.
    private func commitTransactions(
        _ begun: BegunTransactions, writable: Bool, flushCompanionFirst: Bool
    ) throws -> TransactionOutcome? {
        let txn = begun.txn
        if flushCompanionFirst, let companionTxn = begun.companion, let companionEnv, let companionOptions {
            let rc = mdb_txn_commit(companionTxn)
            if rc != MDB_SUCCESS { mdb_txn_abort(txn) }
            if rc == MDB_MAP_FULL { return .mapFull(companion: true, sizeAtFailure: begun.companionSizeAtStart) }
            try check(rc, "mdb_txn_commit", path: companionOptions.path)
            let synced = mdb_env_sync(companionEnv, 1)
            if synced != MDB_SUCCESS { mdb_txn_abort(txn) }
            try check(synced, "mdb_env_sync", path: companionOptions.path)
            return try commit(txn, writable: writable, sizeAtStart: begun.mapSizeAtStart, companion: nil)
        }
        // mdb_txn_commit frees the transaction, success or not.
        if let outcome = try commit(
            txn, writable: writable, sizeAtStart: begun.mapSizeAtStart, companion: begun.companion)
        {
            return outcome
        }
        if let companionTxn = begun.companion, let companionOptions {
            // This environment has committed: a failure here leaves the companion behind it,
            // which its owner detects and repairs (the companion holds derived state).
            try checkCompanionCommit(mdb_txn_commit(companionTxn), path: companionOptions.path)
        }
        return nil
    }

    /// Commits `txn` in this environment; on failure aborts `companion` too. Returns the outcome to
    /// return instead of going on (a full map), nil when committed.
    private func commit(
        _ txn: OpaquePointer, writable: Bool, sizeAtStart: Int, companion: OpaquePointer?
    ) throws -> TransactionOutcome? {
        let rc = mdb_txn_commit(txn)
        guard rc != MDB_SUCCESS else { return nil }
        if let companion { mdb_txn_abort(companion) }
        if rc == MDB_MAP_FULL { return .mapFull(companion: false, sizeAtFailure: sizeAtStart) }
        if writable, let full = fileSystemFull(afterCommitFailure: rc) { throw full }
        try check(rc, "mdb_txn_commit", path: options.path)
        return nil
    }

    /// Runs `body` in `begun`'s transactions. When it throws, or an LMDB error was recorded inside
    /// it (the first one wins over what `body` made of it), aborts both and throws that error, or
    /// returns the outcome of a full map (``BegunTransactions/mapFull(_:)``). Otherwise `.done`, the
    /// transactions still open. (`begun` is passed whole, not as the closures
    /// `begun.abortAll` and `begun.mapFull`: those partial applications allocated two contexts per
    /// transaction.)
    private func run(
        _ body: (borrowing Transaction) throws -> Void, _ begun: BegunTransactions, writable: Bool, state: TransactionState
    ) throws -> TransactionOutcome {
        let txn = begun.txn
        let companion = begun.companion
        do {
            let usesTwins = try switchIsSet(txn, companion: companion, writable: writable)
            try body(
                Transaction(
                    txn: txn, companion: companion, isWritable: writable, state: state, path: path(inCompanion: txn == companion),
                    companionPath: companionOptions?.path, usesTwins: usesTwins))
        } catch {
            begun.abortAll()
            if let first = state.firstError {
                if first.code == .mapFull { return begun.mapFull(first) }
                throw first
            }
            if let lmdb = error as? LMDBError, lmdb.code == .mapFull { return begun.mapFull(lmdb) }
            throw error
        }
        if let first = state.firstError {
            begun.abortAll()
            if first.code == .mapFull { return begun.mapFull(first) }
            throw first
        }
        return .done
    }

    /// Whether the transaction ended (false after growing the map or adopting its new size: the
    /// transaction runs again).
    private func settle(_ outcome: TransactionOutcome) throws -> Bool {
        switch outcome {
        case .done:
            return true
        case .mapResized(let companion):
            try adoptMapSizeFromFile(companion: companion)
        case .mapFull(let companion, let sizeAtFailure):
            try grow(companion: companion, after: sizeAtFailure)
        }
        return false
    }

    /// Checks the return code of the companion's commit: a full disk as such.
    private func checkCompanionCommit(_ rc: Int32, path: String) throws {
        if rc != MDB_SUCCESS, let full = fileSystemFull(afterCommitFailure: rc, path: path) { throw full }
        try check(rc, "mdb_txn_commit", path: path)
    }

    private enum TransactionOutcome {
        case done
        case mapFull(companion: Bool, sizeAtFailure: Int)
        case mapResized(companion: Bool)
    }

    // MARK: - A full file system

    /// Free bytes below which a failed commit's I/O error is taken for a full file system.
    package static let fullFileSystemThreshold = 16 << 20

    /// The error for a commit that failed because the file system is full, or nil when `rc` is not
    /// that. LMDB 0.9 reports a full disk as `EIO` when the page write comes up short (`mdb_page_flush`:
    /// "short write, filesystem full?") and as `ENOSPC` or `EDQUOT` only when nothing could be written,
    /// so an `EIO`, `ENOSPC` or `EDQUOT` from the commit counts as a full file system when less than
    /// ``fullFileSystemThreshold`` bytes are free for this process at the ledger's directory. The
    /// failed commit stored nothing (its meta page was never written).
    private func fileSystemFull(afterCommitFailure rc: Int32, path: String? = nil) -> LMDBError? {
        guard rc == EIO || rc == ENOSPC || rc == EDQUOT else { return nil }
        var stats = statvfs()
        guard statvfs(path ?? options.path, &stats) == 0 else { return nil }
        let free = Int(stats.f_bavail) * Int(stats.f_frsize)
        guard free < Environment.fullFileSystemThreshold else { return nil }
        let outcome =
            path == nil
            ? "nothing of the failed write was stored. Free space and retry"
            : "the write's events were stored, the state derived from them was not (it is derived again by the next "
                + "write that finds room). Free space"
        return LMDBError(
            code: .system, returnCode: ENOSPC, operation: "mdb_txn_commit", path: path ?? options.path,
            message: "the disk is full (\(free) bytes free; LMDB reported \(String(cString: strerror(rc)))); " + outcome)
    }

    // MARK: - Map size

    private func currentMapSizeUnlocked(_ env: OpaquePointer) -> Int {
        var info = MDB_envinfo()
        mdb_env_info(env, &info)
        return info.me_mapsize
    }

    /// Grows the map after a transaction failed with `MDB_MAP_FULL` at `sizeAtFailure`: doubling up to
    /// 1 GiB, then 1 GiB at a time, never beyond the maximum.
    private func grow(companion: Bool, after sizeAtFailure: Int) throws(LMDBError) {
        let (env, options) = companion ? (companionEnv!, companionOptions!) : (self.env, self.options)
        try resizeLock.withExclusive { () throws(LMDBError) in
            guard !closed else {
                throw LMDBError(code: .closed, operation: "grow", path: options.path, message: "the environment is closed")
            }
            let current = currentMapSizeUnlocked(env)
            if current > sizeAtFailure { return }  // grown by another thread meanwhile
            let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
            var next = current < (1 << 30) ? current * 2 : current + (1 << 30)
            if let maxSize = options.maxMapSize {
                let limit = Environment.roundUp(maxSize, to: pageSize)
                if current >= limit {
                    throw LMDBError(
                        code: .storageFull, operation: "grow", path: options.path,
                        message: "the ledger reached its maximum size of \(limit) bytes; nothing of the failed "
                            + "write was stored. Raise the maximum size (or free disk space) and retry")
                }
                next = min(next, limit)
            }
            next = Environment.roundUp(next, to: pageSize)
            try check(mdb_env_set_mapsize(env, next), "mdb_env_set_mapsize(\(next))", path: options.path)
        }
    }

    /// Adopts the map size another process set (`MDB_MAP_RESIZED`).
    private func adoptMapSizeFromFile(companion: Bool) throws(LMDBError) {
        let (env, options) = companion ? (companionEnv!, companionOptions!) : (self.env, self.options)
        try resizeLock.withExclusive { () throws(LMDBError) in
            guard !closed else { return }
            try check(mdb_env_set_mapsize(env, 0), "mdb_env_set_mapsize(0)", path: options.path)
        }
    }

    // MARK: - Maintenance

    /// Sizes and counters.
    package func info(companion: Bool = false) throws(LMDBError) -> EnvironmentInfo {
        precondition(!companion || companionEnv != nil, "no companion environment is attached")
        let env = companion ? companionEnv! : self.env
        return try resizeLock.withShared { () throws(LMDBError) -> EnvironmentInfo in
            guard !closed else {
                throw LMDBError(code: .closed, operation: "info", path: options.path, message: "the environment is closed")
            }
            var info = MDB_envinfo()
            try check(mdb_env_info(env, &info), "mdb_env_info")
            var stat = MDB_stat()
            try check(mdb_env_stat(env, &stat), "mdb_env_stat")
            let pageSize = Int(stat.ms_psize)
            return EnvironmentInfo(
                mapSize: info.me_mapsize,
                pageSize: pageSize,
                usedBytes: (info.me_last_pgno + 1) * pageSize,
                lastTransactionID: info.me_last_txnid,
                maxReaders: Int(info.me_maxreaders),
                readersInUse: Int(info.me_numreaders))
        }
    }

    /// The id of the last committed transaction, by any process (`mdb_env_info`'s `me_last_txnid`,
    /// read from the meta pages without a transaction); nil once the environment is closed. With a
    /// companion, the companion's (as ``Transaction/id``).
    package func lastCommittedTransactionID() -> UInt64? {
        resizeLock.withShared { () -> UInt64? in
            guard !closed else { return nil }
            var info = MDB_envinfo()
            guard mdb_env_info(companionEnv ?? env, &info) == MDB_SUCCESS else { return nil }
            return UInt64(info.me_last_txnid)
        }
    }

    /// The id of the last transaction committed in this environment's own file (not its
    /// companion's), by any process; nil once closed. A commit that writes only the log's databases
    /// moves it, where ``lastCommittedTransactionID()`` may not move.
    package func lastCommittedOwnTransactionID() -> UInt64? {
        resizeLock.withShared { () -> UInt64? in
            guard !closed else { return nil }
            var info = MDB_envinfo()
            guard mdb_env_info(env, &info) == MDB_SUCCESS else { return nil }
            return UInt64(info.me_last_txnid)
        }
    }

    /// Flushes buffers to disk (`mdb_env_sync(force: 1)`), for the relaxed and no-sync modes.
    package func sync() throws(LMDBError) {
        try resizeLock.withShared { () throws(LMDBError) in
            guard !closed, !options.readOnly else { return }
            try check(mdb_env_sync(env, 1), "mdb_env_sync", path: options.path)
            if let companionEnv, let companionOptions {
                try check(mdb_env_sync(companionEnv, 1), "mdb_env_sync", path: companionOptions.path)
            }
        }
    }

    /// Closes the environment after the transactions in flight have ended; flushes first in the
    /// no-sync mode. Later calls throw ``LMDBError/Code/closed``. Closing twice is harmless.
    package func close() {
        resizeLock.withExclusive {
            guard !closed else { return }
            freeIdleReaders()
            if options.durability == .unsafeNoSync && !options.readOnly { mdb_env_sync(env, 1) }
            mdb_env_close(env)
            if let companionEnv, let companionOptions {
                if !companionOptions.readOnly { mdb_env_sync(companionEnv, 1) }
                mdb_env_close(companionEnv)
            }
            closed = true
        }
    }

    /// Whether ``close()`` was called.
    package var isClosed: Bool { resizeLock.withShared { closed } }
}
