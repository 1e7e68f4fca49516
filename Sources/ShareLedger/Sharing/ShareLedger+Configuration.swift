import EventLog
import Foundation
import Logging
import SharingDomain

extension ShareLedger {
    /// How to open a ``ShareLedger``: the event log's settings (``log``) and the sharing layer's own.
    ///
    /// The log's settings can be read and written on this value directly as well
    /// (`configuration.durability = .relaxed` sets `configuration.log.durability`).
    @dynamicMemberLookup
    public struct Configuration: Sendable {
        /// The event log's settings: path, durability, sizes, batching, clock, logger.
        public var log: EventLog.Configuration
        /// The host name in share URLs (`https://<host>/share/<token>`), like CloudKit's displayed host.
        public var shareURLHost: String = "share.localhost"
        /// How many (share, container, viewer) answers ``Container/shareMetadataWithoutLogging(for:)``
        /// keeps, each reused only while no event about its share has happened since. 0 turns the
        /// cache off.
        public var metadataCacheCapacity: Int = 4_096
        /// Where share tokens, participant ids and verification codes get their randomness: the
        /// system's cryptographically secure generator unless a test injects a seeded one.
        public var randomSource: any LedgerRandomSource = SystemRandomSource()
        /// The residual-task worker ``ShareLedger/open(_:)`` runs in the process (the default), or
        /// `nil` to run none: then run a ``ResidualTaskWorker`` yourself (as a Service, or
        /// `share-ledger worker`) or call ``ShareLedger/completeResidualTasks(limit:)``.
        public var residualTaskWorker: ResidualTaskWorker.Configuration? = ResidualTaskWorker.Configuration()
        /// Whether personal fields of new events are sealed under their person's key
        /// (crypto-shredding, the default). `false` writes them in plaintext as releases before it
        /// did: only for comparisons (benchmarks, the in-memory domain's equivalence tests); sealed
        /// data already in the ledger is opened either way.
        public var sealsPersonalData = true

        /// The sharing layer's defaults around the log's settings `log`.
        public init(log: EventLog.Configuration) {
            self.log = log
        }

        /// A configuration with the defaults of `EventLog.Configuration.init(path:createIfMissing:readOnly:durability:initialMapSize:maximumMapSize:maxReaders:maxBatchCommands:maxBatchBytes:clock:logger:)`
        /// and of the sharing layer.
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
            self.log = EventLog.Configuration(
                path: path, createIfMissing: createIfMissing, readOnly: readOnly, durability: durability,
                initialMapSize: initialMapSize, maximumMapSize: maximumMapSize, maxReaders: maxReaders,
                maxBatchCommands: maxBatchCommands, maxBatchBytes: maxBatchBytes, clock: clock, logger: logger)
        }

        /// Reads or writes one of the log's settings (``log``).
        public subscript<Value>(dynamicMember keyPath: WritableKeyPath<EventLog.Configuration, Value>) -> Value {
            get { log[keyPath: keyPath] }
            set { log[keyPath: keyPath] = newValue }
        }
    }
}
