import Foundation
import LMDB
import Logging
import Synchronization

extension LogStore {
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
}
