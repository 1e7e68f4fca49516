import ByteKeys
import Foundation
import LMDB
import Logging
import Synchronization

extension LogStore {
    /// The position (and its event's hash) the derived databases reflect; (0, zero) when nothing
    /// was derived yet.
    package func derivedPosition(_ txn: borrowing Transaction) throws -> (position: UInt64, hash: EventHash) {
        try recordedDerivedPosition(txn) ?? (0, .zero)
    }

    /// The position record itself; nil when there is none (a new companion: nothing derived yet).
    package func recordedDerivedPosition(_ txn: borrowing Transaction) throws -> (position: UInt64, hash: EventHash)? {
        try withDerivedPositionRecord(txn) { value in
            guard let position = BigEndian.uint64(value), let hash = EventHash(bytes: value[8...]) else {
                throw DerivedState.badPositionRecord(count: value.count)
            }
            return (position, hash)
        }
    }

    /// The position of ``recordedDerivedPosition(_:)`` without its hash (which every read would
    /// otherwise copy out).
    package func recordedDerivedPositionOnly(_ txn: borrowing Transaction) throws -> UInt64? {
        try withDerivedPositionRecord(txn) { value in
            guard let position = BigEndian.uint64(value) else { throw DerivedState.badPositionRecord(count: value.count) }
            return position
        }
    }

    /// `body` on the 40 bytes of the position record; nil when there is none.
    private func withDerivedPositionRecord<R>(_ txn: borrowing Transaction, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R? {
        guard let derivedMeta else { return nil }
        return try DerivedState.positionKey.withUnsafeBytes { key in
            try txn.withValue(derivedMeta, key: key) { value -> R in
                guard value.count == 40 else { throw DerivedState.badPositionRecord(count: value.count) }
                return try body(value)
            }
        }
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

    /// Whether write transaction `txn` begins right on the snapshots of this process's writer's last
    /// commit that left the derived state at the log's head (``consistentCommit``): each of the two
    /// files' ids is that commit's plus one, so nothing committed in either since. The derived
    /// position is then the head and the companion is marked unflushed, as that commit left them:
    /// ``catchUpDerivedState(_:head:replay:logger:)`` has nothing to look at. (A commit that writes
    /// nothing takes no id, so a later one of another process cannot take the id looked for here:
    /// only commits that wrote both files are recorded.)
    package func followsConsistentCommit(_ txn: borrowing Transaction) -> Bool {
        let known = consistentCommit.load(ordering: .acquiring)
        let id = txn.id
        guard known.first != 0, id & (1 << 63) == 0 else { return false }
        return UInt(truncatingIfNeeded: id) == known.first &+ 1 && UInt(truncatingIfNeeded: txn.ownID) == known.second &+ 1
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
