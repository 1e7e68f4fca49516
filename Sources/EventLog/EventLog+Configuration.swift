import Foundation
import LMDB
import Logging

/// Where the ledger's "now" comes from. Inject a fixed or stepping clock in tests.
public protocol LedgerClock: Sendable {
    /// The current time in microseconds since 1970-01-01T00:00:00Z.
    func nowMicros() -> Int64
}

/// The system's wall clock.
public struct SystemClock: LedgerClock {
    /// Makes the clock.
    public init() {}
    /// The current time in microseconds since 1970-01-01T00:00:00Z.
    public func nowMicros() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1_000_000 + Int64(spec.tv_nsec) / 1_000
    }
}

extension EventLog {
    /// How to open an ``EventLog``.
    public struct Configuration: Sendable {
        /// The directory of the ledger (holds `data.mdb` and `lock.mdb`).
        public var path: String
        /// Create the directory and an empty ledger when there is none. When `false`, opening a path
        /// without a ledger throws ``LedgerError/Code/notALedger``.
        public var createIfMissing: Bool
        /// Open without the ability to write (for audits of a read-only copy).
        public var readOnly: Bool
        /// What a commit does to survive a power loss.
        public var durability: Durability
        /// The map size to start with, in bytes. The map grows by itself as the ledger grows.
        public var initialMapSize: Int
        /// The largest the ledger may grow to, in bytes; `nil` for no limit. Past it, writes fail with
        /// ``LedgerError/Code/storageFull`` and store nothing.
        public var maximumMapSize: Int?
        /// Concurrent read transactions allowed (across processes).
        public var maxReaders: Int
        /// The most commands one group commit holds.
        public var maxBatchCommands: Int
        /// The most payload bytes one group commit holds (a single larger command still goes alone).
        public var maxBatchBytes: Int
        /// How long the writer thread polls for the next command before it sleeps, in microseconds,
        /// after a group commit of more than one command (after a commit of one it sleeps at once).
        /// Waking a sleeping thread costs tens of microseconds on a VM; polling spends CPU instead.
        /// 0 never polls.
        public var writerPollMicroseconds: Int = 50
        /// Where event times come from.
        public var clock: any LedgerClock
        /// The monotonic clock a writer's lease token is checked against before each commit
        /// (``LedgerRole/checkWritable(at:now:)``); inject one in tests.
        public var monotonicClock: @Sendable () -> UInt64 = LedgerRole.monotonicNanos
        /// Where the ledger logs; it never prints.
        public var logger: Logger
        /// Told by the writer thread before each batch and after each commit that appended
        /// (``WriterProbe``): the hook of the tests' pause and of the benchmarks' commit-size
        /// recorder, which live outside the product. None by default.
        package var writerProbe: (any WriterProbe)?
        /// Named databases a layer built on the log keeps in the same environment (read models,
        /// outboxes), opened (and created when missing) with the log's, so that a ``CommitStep``
        /// writes them in the transaction that appends its events.
        package var databases: [DatabaseSpec] = []
        /// Files a layer built on the log keeps in the ledger directory next to LMDB's: a directory
        /// holding only these (and `lock.mdb`) may become a new ledger.
        package var companionFiles: Set<String> = []
        /// A scratch ledger that nothing must survive (a rebuild's, an audit's, an as-of view's):
        /// opened with `MDB_WRITEMAP | MDB_MAPASYNC` on top of ``durability`` (which should be
        /// `.unsafeNoSync`), so that a write transaction's dirty pages are the file's own mapped pages
        /// instead of malloc'd copies written out at every commit. Off by default.
        package var scratch = false
        /// Keep the ``DatabaseSpec/derived`` databases in a companion environment (`derived/` in
        /// the ledger directory) that commits after the log without flushing, so a commit flushes
        /// only the log's pages (``DerivedState``). The derived state is brought up to the log's
        /// head before every write, after a process crash from the page cache, after a machine
        /// crash by deriving it again from the log. Off by default; a ledger already laid out this
        /// way is opened this way whatever the setting.
        package var defersDerivedState = false
        /// How the layer that owns the derived databases applies one event to them, when the
        /// writer brings them up to the head. Without it, derived databases found behind the head
        /// are left as they are.
        package var derivedReplay: DerivedReplay?

        /// The configuration of a scratch ledger at `path` that is deleted after use (a rebuild's,
        /// an audit's, an import's check): no flush at all (``Durability/unsafeNoSync``) and
        /// ``scratch`` on.
        package static func scratch(at path: String, logger: Logger) -> Configuration {
            var configuration = Configuration(path: path, durability: .unsafeNoSync, logger: logger)
            configuration.scratch = true
            return configuration
        }

        /// A configuration with the defaults: created when missing, durable, 64 MiB to start, no
        /// maximum size, 1,024 commands or 8 MiB per group commit.
        public init(
            path: String,
            createIfMissing: Bool = true,
            readOnly: Bool = false,
            durability: Durability = .durable,
            initialMapSize: Int = 64 << 20,
            maximumMapSize: Int? = nil,
            maxReaders: Int = 126,
            maxBatchCommands: Int = 1024,
            maxBatchBytes: Int = 8 << 20,
            clock: any LedgerClock = SystemClock(),
            logger: Logger = Logger(label: "ShareLedger", factory: { _ in SwiftLogNoOpLogHandler() })
        ) {
            self.path = path
            self.createIfMissing = createIfMissing
            self.readOnly = readOnly
            self.durability = durability
            self.initialMapSize = initialMapSize
            self.maximumMapSize = maximumMapSize
            self.maxReaders = maxReaders
            self.maxBatchCommands = maxBatchCommands
            self.maxBatchBytes = maxBatchBytes
            self.clock = clock
            self.logger = logger
        }
    }

    /// Limits the log enforces on every append.
    public enum Limits {
        /// The largest payload of one event: 1 MiB (CloudKit's record limit).
        public static let maxPayloadBytes = 1 << 20
        /// The most events one command may append.
        public static let maxEventsPerCommand = 10_000
        /// The longest stream name, container or actor, in UTF-8 bytes.
        public static let maxNameBytes = 200
    }
}

/// Applies one event of the log to a layer's derived databases, in the write transaction `txn`.
package typealias DerivedProjection = (_ txn: borrowing Transaction, _ envelope: EventEnvelope) throws -> Void

/// Makes the layer's ``DerivedProjection`` for one catch-up of `store`'s derived databases
/// (``EventLog/Configuration/derivedReplay``): the log reads and decodes each missing event once,
/// derives its own stream and command records from it, then hands it to the projection.
package typealias DerivedReplay = @Sendable (_ store: LogStore) -> DerivedProjection

/// A named database of a layer built on the log (see ``EventLog/Configuration/databases``).
package struct DatabaseSpec: Sendable, Hashable {
    /// Its name in the LMDB environment.
    package var name: String
    /// Its LMDB flags (sorted duplicates, fixed-size duplicates).
    package var flags: DatabaseFlags
    /// Whether its contents are derived from the log (read models, indexes) and can be derived
    /// again: with ``EventLog/Configuration/defersDerivedState`` it then lives in the companion
    /// environment, flushed off the commit path (``DerivedState``). Operational state that is not
    /// derived from the log stays with the log and is flushed at every commit.
    package var derived: Bool
    /// Whether, derived and in the companion environment, it has a twin (`name~b`, ``Database``):
    /// a second copy that a layer fills beside the one in use and then puts in its place with one
    /// committed write (``LogStore/switchTwins(_:)``), so that rewriting it whole never takes one
    /// transaction's worth of memory.
    package var twinned: Bool

    package init(_ name: String, _ flags: DatabaseFlags = [], derived: Bool = false, twinned: Bool = false) {
        self.name = name
        self.flags = flags
        self.derived = derived
        self.twinned = twinned && derived
    }
}
