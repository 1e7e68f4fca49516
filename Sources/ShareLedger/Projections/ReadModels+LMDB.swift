import EventLog
import Foundation
import LMDB
import SharingDomain
import SwiftProtobuf

// The read models on LMDB: each ``ReadModelTable`` of the domain with its database as its handle,
// the log's transactions as a ``ReadModelStore``, and how a ledger's environment asks the log for
// the read models' databases.

/// A read-model table's LMDB database (``ReadModelTable/handle``).
final class LMDBTable: ReadModelTableHandle {
    let database: Database
    init(_ database: Database) { self.database = database }
}

extension ReadModelTable {
    /// The table's LMDB database: its handle's, for read models opened on a ``LogStore``. The only
    /// handles this module gives tables are ``LMDBTable``s. A table without one (the in-memory
    /// store's) names no database of any environment, so LMDB refuses it with an error, as it
    /// refuses any handle of another environment.
    @inline(__always)
    package var database: Database {
        guard let handle else {
            return Database.unattached(name: name, flags: lmdbFlags)
        }
        return unsafeDowncast(handle, to: LMDBTable.self).database
    }

    /// LMDB's flags for the table's.
    package var lmdbFlags: DatabaseFlags {
        var flags: DatabaseFlags = []
        if self.flags.contains(.dupSort) { flags.insert(.dupSort) }
        if self.flags.contains(.dupFixed) { flags.insert(.dupFixed) }
        return flags
    }
}

extension ReadModelPutFlags {
    /// LMDB's flags for these.
    var lmdb: PutFlags { contains(.append) ? .append : PutFlags(rawValue: 0) }
}

extension ReadModels {
    /// The databases the sharing layer adds to the log's environment (``EventLog/Configuration/databases``).
    /// Every one but the worker's bookkeeping and lease is derived from the log, so it lives in the
    /// companion environment that is flushed off the commit path (``DerivedState``), with a twin
    /// that a rebuild which rewrites it fills and switches in (``ReadModelRebuild``).
    package static let specs: [DatabaseSpec] = ReadModelTable.catalog.map { table in
        table.derived
            ? DatabaseSpec(table.name, table.lmdbFlags, derived: true, twinned: true) : DatabaseSpec(table.name, table.lmdbFlags)
    }

    /// The read models of a log opened with ``specs`` among its databases.
    convenience init(_ store: LogStore) {
        let databases = store.extensionDatabases
        self.init(
            tables: ReadModelTable.catalog.map { table in
                guard let database = databases[table.name] else {
                    preconditionFailure("the log was opened without the read models' databases")
                }
                return table.with(handle: LMDBTable(database))
            },
            rowCache: nil, personalData: PersonalDataVault.registered(at: store.environment.options.path), sealsNewEvents: true)
    }

    /// The ledger's key store, when these read models have one.
    package var vault: PersonalDataVault? { personalData as? PersonalDataVault }

    /// The read models' databases, in the order of ``all``.
    package var allDatabases: [Database] { all.map(\.database) }

    /// Parked residual tasks: a walk of `worker_tasks` (tasks that have had an attempt), counted in
    /// place without copying entries.
    package func parkedTaskCount(_ txn: borrowing Transaction) throws -> Int {
        try txn.withCursor(workerTasks) { cursor in
            var count = 0
            var entry = try cursor.first()
            while let current = entry {
                if (try? WorkerTaskState(serializedBytes: Array(current.value)))?.parked == true { count += 1 }
                entry = try cursor.next()
            }
            return count
        }
    }

    /// Seconds since the oldest pending residual task was scheduled; 0 when none is pending.
    package func oldestTaskAge(_ txn: borrowing Transaction, now: Int64) throws -> Double {
        guard let first = try scan(txn, outbox, prefix: [], limit: 1).first else { return 0 }
        let task = try ResidualTaskState(serializedBytes: first.value)
        return max(0, Double(now - task.scheduledAtMicros) / 1_000_000)
    }

}

extension PersonalDataVault: PersonalDataKeys {}

extension Transaction: ReadModelStore {
    @inline(__always)
    package func withValue<R>(_ table: ReadModelTable, key: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> R) throws
        -> R?
    {
        try withValue(table.database, key: key, body)
    }

    @inline(__always)
    package func put(_ table: ReadModelTable, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, flags: ReadModelPutFlags) throws {
        try put(table.database, key: key, value: value, flags: flags.lmdb)
    }

    @discardableResult
    package func delete(_ table: ReadModelTable, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer?) throws -> Bool {
        try delete(table.database, key: key, value: value)
    }

    package func visit(
        _ table: ReadModelTable, from start: UnsafeRawBufferPointer?,
        _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        // Through the transaction's overlay, when it has one (`Overlay`).
        try visitEntries(table.database, from: start, body)
    }

    package func visitDuplicates(
        _ table: ReadModelTable, key: UnsafeRawBufferPointer, _ body: (_ value: UnsafeRawBufferPointer) throws -> Void
    ) throws {
        try visitValues(table.database, key: key, body)
    }

    package func entryCount(_ table: ReadModelTable) throws -> Int { try statistics(table.database).entries }

    package func clear(_ table: ReadModelTable) throws { try clear(table.database) }

    package func addDuplicatesInKeyOrder(
        _ table: ReadModelTable, size: Int,
        _ body: (_ add: (_ key: UnsafeRawBufferPointer, _ values: UnsafeRawBufferPointer) throws -> Void) throws -> Void
    ) throws {
        let db = table.database
        // Through an overlay, writes go to the overlay, which has no cursor: value by value.
        if readsThroughOverlay(db) { return try body { key, values in try putEach(table, key: key, values: values, size: size) } }
        try withCursor(db) { cursor in try body { key, values in try cursor.addDuplicates(key: key, values: values, size: size) } }
    }
}

// The LMDB operations the ledger's own code (audit, rebuilds, the worker) runs on a read-model
// table beyond the domain's ``ReadModelStore``: on the table's database.
extension Transaction {
    /// ``withCursor(_:_:)`` on the table's database.
    package func withCursor<R>(_ table: ReadModelTable, _ body: (borrowing Cursor) throws -> R) throws -> R {
        try withCursor(table.database, body)
    }

    /// ``statistics(_:)`` of the table's database.
    package func statistics(_ table: ReadModelTable) throws -> DatabaseStatistics { try statistics(table.database) }

    /// ``readsThroughOverlay(_:)`` for the table's database.
    package func readsThroughOverlay(_ table: ReadModelTable) -> Bool { readsThroughOverlay(table.database) }

    /// ``visitValues(_:key:_:)`` of the table's database.
    package func visitValues(_ table: ReadModelTable, key: UnsafeRawBufferPointer, _ body: (_ value: UnsafeRawBufferPointer) throws -> Void)
        throws
    {
        try visitValues(table.database, key: key, body)
    }

    /// ``unused(_:)`` of the table's database: the twin a rebuild fills.
    package func unused(_ table: ReadModelTable) -> Database { unused(table.database) }
}

extension LogStore {
    /// The read models of a store opened with their databases (``openLedger(_:)``, or a log opened by
    /// ``ShareLedger/open(_:)``).
    package var models: ReadModels { ReadModels(self) }

    /// Opens a ledger's databases, the read models' included, without a writer thread: scratch
    /// ledgers of rebuilds and snapshots, and copies read by the audit.
    ///
    /// Without a writer there is nothing to bring a derived state kept apart up to the log, so a
    /// new ledger opened this way keeps its read models with the log (one environment); a ledger
    /// already laid out with its derived state apart is opened as it is.
    package static func openLedger(_ configuration: EventLog.Configuration) throws(LedgerError) -> LogStore {
        var configuration = ReadModels.ledgerConfiguration(configuration)
        configuration.defersDerivedState = false
        return try open(configuration)
    }
}

extension ReadModels {
    /// How the log's writer brings the read models of `store` up to its head when it finds them
    /// behind (``EventLog/Configuration/derivedReplay``): each domain event projected as it was
    /// when it was appended; other event types change nothing.
    static func projection(into store: LogStore) -> DerivedProjection {
        let projector = Projector(models: store.models)
        return { txn, envelope in
            guard let event = try DomainEvent.decode(envelope) else { return }
            _ = try projector.apply(event, Projector.Context(envelope), txn)
        }
    }

    /// `configuration` with the read models' databases added: how every opening of a sharing
    /// ledger's environment (``ShareLedger/open(_:)``, ``ShareLedger/openLog(_:)``, scratch copies)
    /// asks the log for them.
    package static func ledgerConfiguration(_ configuration: EventLog.Configuration) -> EventLog.Configuration {
        var configuration = configuration
        configuration.databases = specs
        // A key store copied in before the first open (to import an export with its keys).
        configuration.companionFiles = [PersonalDataVault.fileName]
        // Scratch ledgers keep everything in one environment (``DerivedState/placement``).
        configuration.defersDerivedState = true
        configuration.derivedReplay = { store in ReadModels.projection(into: store) }
        return configuration
    }
}

extension ReadModels {
    /// The change tag of the share `token` (read from its stored `ShareState` row without decoding
    /// the rest, in either layout: ``ShareState/storedChangeTag(_:)``), or nil when there is no such share.
    package func shareChangeTag(_ txn: borrowing Transaction, token: String) throws -> UInt64? {
        var key = token
        return try key.withUTF8 { bytes in
            try txn.withValue(shares, key: UnsafeRawBufferPointer(bytes)) { ShareState.storedChangeTag($0) } ?? nil
        }
    }
}

// The history walks the audit module runs in a transaction of the ledger's environment.
extension ReadModels {
    /// ``journalPositions(_:_:key:from:)`` in a transaction of the ledger's environment.
    package func journalPositions(in txn: borrowing Transaction, _ db: ReadModelTable, key: [UInt8], from: UInt64) throws -> [UInt64] {
        try journalPositions(txn, db, key: key, from: from)
    }

    /// ``logicalEntries(_:_:)`` in a transaction of the ledger's environment.
    package func logicalEntries(in txn: borrowing Transaction, _ db: ReadModelTable) throws -> [([UInt8], [UInt8])] {
        try logicalEntries(txn, db)
    }
}
