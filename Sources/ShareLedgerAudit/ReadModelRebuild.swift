import ByteKeys
import Crypto
import EventLog
import Foundation
import LMDB
import ShareLedger
import SharingDomain

/// Rebuilding the read models from the log, and comparing two sets of read models.
enum ReadModelRebuild {
    /// One change that makes a live database hold what its rebuild holds.
    struct Change {
        var key: [UInt8]
        var value: [UInt8]
        /// Delete (key, value) (for sorted duplicates; the key for any other database), else put it.
        var isDelete: Bool
    }

    /// The changes that make `live` (in the write transaction `txn`) hold exactly the entries of
    /// `rebuilt` (in `built`): both are walked once, in order, without writing. Returns nil as soon as
    /// more than `limit` are needed (then rewriting the database costs no more than changing it).
    static func differences(
        _ live: Database, in txn: borrowing Transaction, from rebuilt: Database, in built: borrowing Transaction, limit: Int
    ) throws -> [Change]? {
        let duplicates = live.flags.contains(.dupSort)
        var changes: [Change] = []
        return try built.withCursor(rebuilt) { source -> [Change]? in
            try txn.withCursor(live) { target -> [Change]? in
                var want = try source.first()
                var have = try target.first()
                while want != nil || have != nil {
                    guard changes.count <= limit else { return nil }
                    guard let w = want else {
                        changes.append(Change(key: Array(have!.key), value: Array(have!.value), isDelete: true))
                        have = try target.next()
                        continue
                    }
                    guard let h = have else {
                        changes.append(Change(key: Array(w.key), value: Array(w.value), isDelete: false))
                        want = try source.next()
                        continue
                    }
                    var order = KeyOrder.compare(w.key, h.key)
                    if order == 0 && duplicates { order = KeyOrder.compare(w.value, h.value) }
                    if order < 0 {
                        changes.append(Change(key: Array(w.key), value: Array(w.value), isDelete: false))
                        want = try source.next()
                    } else if order > 0 {
                        changes.append(Change(key: Array(h.key), value: Array(h.value), isDelete: true))
                        have = try target.next()
                    } else {
                        // Same key (and, with duplicates, same value): a unique key's value may differ.
                        if !duplicates && KeyOrder.compare(w.value, h.value) != 0 {
                            changes.append(Change(key: Array(w.key), value: Array(w.value), isDelete: false))
                        }
                        want = try source.next()
                        have = try target.next()
                    }
                }
                return changes.count <= limit ? changes : nil
            }
        }
    }

    /// What the final step of a rebuild wrote into the live read models.
    struct SwapOutcome: Sendable, Hashable {
        /// Entries put or deleted in databases changed in place.
        var changedEntries = 0
        /// Databases cleared and rewritten whole (more differences than ``changeLimit`` allows).
        var rewrittenDatabases: [String] = []
    }

    /// Differences up to which the final step of a rebuild changes a live database in place instead of
    /// rewriting it, counted over all databases: each may dirty a page (4 KiB of memory until the
    /// commit), so the in-place path keeps that step within about 32 MiB.
    static let changeLimit = 8_192

    /// Makes the live read models of `models` (in the write transaction `txn`) hold exactly the read
    /// models of `rebuiltModels` (in `built`). A database that differs in up to the remaining
    /// `limit` (``changeLimit``) entries is changed in place; one that differs more (or every one with
    /// `rewriteAll`) is cleared and copied whole with sorted appends, which keeps every page of it in
    /// memory until the commit. Without `rewriteBeyondLimit`, a database that differs more makes it
    /// return nil instead, having changed nothing (then fill the unused copies:
    /// ``fillUnused(_:in:from:in:resume:)``).
    static func swap(
        into models: ReadModels, in txn: borrowing Transaction, from rebuiltModels: ReadModels, in built: borrowing Transaction,
        rewriteAll: Bool = false, limit: Int = changeLimit, rewriteBeyondLimit: Bool = true
    ) throws -> SwapOutcome? {
        let (targets, sources) = (models.allDatabases, rebuiltModels.allDatabases)
        guard
            let plan = try plan(
                targets, in: txn, from: sources, in: built, limit: limit, rewriteAll: rewriteAll, rewriteBeyondLimit: rewriteBeyondLimit)
        else { return nil }
        return try write(plan, into: targets, in: txn, from: sources, in: built)
    }

    /// What makes each of `targets` (in `txn`) hold its database of `sources` (in `built`): the
    /// changes, within `limit` entries in all, or nil for a database to be rewritten whole (beyond
    /// the limit, or every one with `rewriteAll`). Nil when one is beyond the limit and not
    /// `rewriteBeyondLimit`. Nothing is written.
    static func plan(
        _ targets: [Database], in txn: borrowing Transaction, from sources: [Database], in built: borrowing Transaction,
        limit: Int, rewriteAll: Bool = false, rewriteBeyondLimit: Bool
    ) throws -> [[Change]?]? {
        var planned: [[Change]?] = []
        var budget = limit
        for (target, source) in zip(targets, sources) {
            let changes = rewriteAll ? nil : try differences(target, in: txn, from: source, in: built, limit: budget)
            if changes == nil && !rewriteBeyondLimit { return nil }
            budget -= changes?.count ?? 0
            planned.append(changes)
        }
        return planned
    }

    /// Writes a ``plan(_:in:from:in:limit:rewriteAll:rewriteBeyondLimit:)``: its changes, and the
    /// databases to rewrite cleared and copied whole from `sources` with sorted appends.
    static func write(
        _ plan: [[Change]?], into targets: [Database], in txn: borrowing Transaction, from sources: [Database],
        in built: borrowing Transaction
    ) throws -> SwapOutcome {
        var outcome = SwapOutcome()
        for ((target, source), changes) in zip(zip(targets, sources), plan) {
            guard let changes else {
                try txn.clear(target)
                try built.withCursor(source) { cursor in
                    var entry = try cursor.first()
                    try LogReplay.copy(&entry, with: cursor, into: target, in: txn)
                }
                outcome.rewrittenDatabases.append(target.name)
                continue
            }
            try apply(changes, to: target, in: txn)
            outcome.changedEntries += changes.count
        }
        return outcome
    }

    /// Puts and deletes `changes` in `db`.
    static func apply(_ changes: [Change], to db: Database, in txn: borrowing Transaction) throws {
        for change in changes {
            if change.isDelete {
                try txn.delete(db, key: change.key, value: db.flags.contains(.dupSort) ? change.value : nil)
            } else {
                try txn.put(db, key: change.key, value: change.value)
            }
        }
    }

    // MARK: - Filling the unused copies (twins), then switching them in

    /// Bytes of keys and values one transaction of ``fillUnused(_:in:from:in:resume:budget:)`` copies, at
    /// most (and one entry more): what bounds the memory of a rebuild that rewrites the read models
    /// whole (each dirty page stays in memory until its commit).
    static let fillBytes = 8 << 20

    /// Where a fill of the unused copies goes on: the database (an index into ``ReadModels/all``) and
    /// the first entry of the rebuilt one not copied yet.
    struct FillPoint: Sendable, Hashable {
        var database: Int
        var key: [UInt8]?
        var value: [UInt8]?
    }

    /// Copies the rebuilt read models (`rebuiltModels`, read in `built`) into the copies of the live
    /// ones that `txn` does not use (``Transaction/unused(_:)``), from `resume` on (nil: empty them
    /// all and start), up to about `budget` bytes of keys and values. Returns where to go on, nil
    /// when all is copied. The rebuilt ones must not change between the calls of one fill.
    static func fillUnused(
        _ models: ReadModels, in txn: borrowing Transaction, from rebuiltModels: ReadModels, in built: borrowing Transaction,
        resume: FillPoint?, budget: Int = fillBytes
    ) throws -> FillPoint? {
        let live = models.all
        let rebuilt = rebuiltModels.all
        guard var point = resume else {
            for db in live { try txn.clear(txn.unused(db)) }
            return FillPoint(database: 0)
        }
        var bytes = 0
        while point.database < live.count {
            let target = txn.unused(live[point.database])
            let source = rebuilt[point.database]
            let duplicates = source.flags.contains(.dupSort)
            let next: FillPoint? = try built.withCursor(source) { cursor in
                var entry: Entry?
                switch (point.key, point.value) {
                case (let key?, let value?) where duplicates:
                    entry = try key.withUnsafeBytes { k in try value.withUnsafeBytes { v in try cursor.seek(key: k, valueAtLeast: v) } }
                case (let key?, _):
                    entry = try key.withUnsafeBytes { try cursor.seek(atLeast: $0) }
                default:
                    entry = try cursor.first()
                }
                bytes += try LogReplay.copy(&entry, with: cursor, into: target, in: txn, byteLimit: budget - bytes).bytes
                return entry.map { FillPoint(database: point.database, key: Array($0.key), value: Array($0.value)) }
            }
            if let next { return next }
            point = FillPoint(database: point.database + 1)
        }
        return nil
    }

    /// The last step of a fill: makes the unused copies hold exactly the rebuilt read models (the
    /// events committed since the fill began changed the live ones, and were replayed into the
    /// rebuilt ones) and, when they then do, switches them in (``LogStore/switchTwins(_:)``) and
    /// empties the copies that were in use. Returns nil, changing nothing, when more than `limit`
    /// entries differ (then fill again); with `force`, the databases that differ more are rewritten
    /// whole in this transaction instead.
    static func finishFill(
        _ store: LogStore, in txn: borrowing Transaction, from rebuiltModels: ReadModels, in built: borrowing Transaction,
        limit: Int = changeLimit, force: Bool
    ) throws -> SwapOutcome? {
        let models = store.models
        let (targets, sources) = (models.all.map { txn.unused($0) }, rebuiltModels.allDatabases)
        guard let plan = try plan(targets, in: txn, from: sources, in: built, limit: limit, rewriteBeyondLimit: force) else {
            return nil
        }
        let outcome = try write(plan, into: targets, in: txn, from: sources, in: built)
        try store.switchTwins(txn)
        for live in models.all { try txn.clear(live) }
        return outcome
    }

    /// Makes the live stream and command records of `store` (in the write transaction `txn`) hold
    /// exactly those of `rebuilt` (in `built`, replayed with `records`): a damaged or missing record
    /// is repaired, one the log does not imply is removed. Returns the entries changed.
    static func repairRecords(
        _ store: LogStore, in txn: borrowing Transaction, from rebuilt: LogStore, in built: borrowing Transaction
    ) throws -> Int {
        let (targets, sources) = ([store.commands, store.streams], [rebuilt.commands, rebuilt.streams])
        guard let plan = try plan(targets, in: txn, from: sources, in: built, limit: changeLimit, rewriteBeyondLimit: true) else {
            return 0
        }
        let outcome = try write(plan, into: targets, in: txn, from: sources, in: built)
        return outcome.changedEntries + outcome.rewrittenDatabases.count
    }

    /// How two sets of read models compare, database by database.
    struct Comparison: Sendable, Hashable {
        /// Databases whose contents differ, with the first key (hex) where they do.
        var differences: [Difference]
        /// SHA-256 over every key and value, per database (of the first set).
        var digests: [String: String]
        /// The first event the rules could not have produced, when the rebuild stopped at one (then
        /// nothing was compared).
        var inadmissible: LogReplay.InadmissibleEvent? = nil

        var matches: Bool { differences.isEmpty && inadmissible == nil }

        struct Difference: Sendable, Hashable {
            var database: String
            var firstDifferingKeyHex: String
        }
    }

    /// Compares the read models of `a` and `b` entry by entry (the history journal as part of the
    /// history indexes: ``ReadModels/logicalEntries(_:_:)``).
    static func compare(_ a: LogStore, _ b: LogStore) throws -> Comparison {
        var differences: [Comparison.Difference] = []
        var digests: [String: String] = [:]
        for (dbA, dbB) in zip(a.models.all, b.models.all) where dbA.name != a.models.historyJournal.name {
            let entriesA = try a.read { txn in try a.models.logicalEntries(in: txn, dbA) }
            let entriesB = try b.read { txn in try b.models.logicalEntries(in: txn, dbB) }
            var hasher = SHA256()
            for (key, value) in entriesA {
                hasher.update(data: BigEndian.bytes(of: UInt32(key.count)) + key + BigEndian.bytes(of: UInt32(value.count)) + value)
            }
            digests[dbA.name] = Hex.encode(Array(hasher.finalize()))
            if entriesA.count != entriesB.count || !zip(entriesA, entriesB).allSatisfy({ $0.0 == $1.0 && $0.1 == $1.1 }) {
                let index = Array(zip(entriesA, entriesB)).firstIndex { $0.0 != $1.0 || $0.1 != $1.1 } ?? min(entriesA.count, entriesB.count)
                let key = index < entriesA.count ? entriesA[index].0 : (index < entriesB.count ? entriesB[index].0 : [])
                differences.append(Comparison.Difference(database: dbA.name, firstDifferingKeyHex: Hex.encode(key)))
            }
        }
        return Comparison(differences: differences, digests: digests)
    }

    /// Every (key, value) of a database, in order (dupsort values each as their own entry).
    static func dump(_ environment: Environment, _ db: Database) throws -> [([UInt8], [UInt8])] {
        try environment.read { txn in
            try txn.withCursor(db) { cursor in
                var out: [([UInt8], [UInt8])] = []
                var entry = try cursor.first()
                while let current = entry {
                    out.append((Array(current.key), Array(current.value)))
                    entry = try cursor.next()
                }
                return out
            }
        }
    }

    /// ``dump(_:_:)`` of a read-model table's database.
    static func dump(_ environment: Environment, _ table: ReadModelTable) throws -> [([UInt8], [UInt8])] {
        try dump(environment, table.database)
    }
}

extension LedgerAudit {
    /// Rebuilds every read model from the log into a new ledger directory at `scratchPath`, checking
    /// every event against the sharing rules (`EventValidator`), and compares it with the live read
    /// models, entry by entry. At the first event the rules could not have produced, it stops and
    /// reports that event (``ReadModelRebuild/Comparison/inadmissible``) instead. With `last`, the
    /// read models are compared as of that position (where `derived/` is, when it is behind the
    /// head), and the events after it are only checked against the rules.
    ///
    /// - Returns: whether they are identical, the databases that differ (with the first differing
    ///   key) and a digest per database.
    func verifyReadModels(scratchPath: String, through last: UInt64 = .max) throws(LedgerError) -> ReadModelRebuild.Comparison {
        do {
            let scratch = try LogStore.openLedger(
                EventLog.Configuration.scratch(at: scratchPath, logger: configuration.logger))
            defer { scratch.environment.close() }
            do {
                try LogReplay.replay(from: log.store, into: scratch, through: last, validate: true)
            } catch let inadmissible as LogReplay.InadmissibleEvent {
                return ReadModelRebuild.Comparison(differences: [], digests: [:], inadmissible: inadmissible)
            }
            var comparison = try ReadModelRebuild.compare(log.store, scratch)
            if last != .max {
                // Compared where the read models are; the events after are still checked against the rules.
                do {
                    try LogReplay.replay(from: log.store, into: scratch, after: last, validate: true)
                } catch let inadmissible as LogReplay.InadmissibleEvent {
                    comparison.inadmissible = inadmissible
                }
            }
            return comparison
        } catch {
            throw LedgerError.wrap(error, while: "rebuilding the read models into \(scratchPath)")
        }
    }
}
