import ByteKeys
import Dispatch
import Foundation
import LMDB
import SharingDomain

/// Replaying the log into a set of read models: the domain's projection (and, when asked, its rules)
/// run over the events of one ledger into the read models of another. Rebuilds, audits, imports and
/// states as of a past point (the audit module) replay through it; it runs the domain, so it lives with
/// the facade.
package enum LogReplay {
    /// Events replayed per write transaction.
    package static let chunk = 4_096

    /// Replays the domain events of `source` after position `start` through `last` (in chunks, a
    /// fresh read transaction each) into the read models of `target`, which must hold the read models
    /// as of `start` (empty for 0). Returns the last position read.
    ///
    /// Two stages overlap: while one chunk is applied in a write transaction of `target`, the next is
    /// read and decoded (envelopes and payloads, upcast) on another thread. Chunks are applied in
    /// order, one transaction each, exactly as a single pass would.
    ///
    /// With `validate`, each event is first checked by the ``EventValidator`` against the read models
    /// as they stand before it (the transaction the projection then writes): the first event the
    /// rules could not have produced stops the replay with ``InadmissibleEvent``.
    @discardableResult
    package static func replay(
        from source: LogStore, into target: LogStore, after start: UInt64 = 0, through last: UInt64 = .max,
        validate: Bool = false, records: Bool = false, progress: ((UInt64) -> Void)? = nil
    ) throws -> UInt64 {
        // No RowCache here: it costs more than the decoding it saves. Told about each chunk as the
        // writer's is about its commits (each attempt at a chunk a transaction of its own to it, rows
        // kept into the next chunk), the replay was slower: `share-ledger rebuild` of a 234,886-event
        // ledger took 4.6 to 4.9 s with it against 4.1 to 4.4 s without (three alternating runs each).
        // A scratch target has no key store of its own: it projects with the source's, so sealed
        // registrations get the same lookup hashes (and forgotten ones none) as the live read models.
        let models = target.models.sealing(with: target.models.vault ?? source.models.vault)
        let projector = Projector(models: models)
        let validator = validate ? EventValidator(models: models) : nil
        var after: UInt64 = start
        var next = Result { () throws -> DecodedChunk in try decodeChunk(source, after: start, through: last, records: records) }
        while true {
            let chunk = try next.get()
            guard let chunkLast = chunk.lastPosition else { return after }
            // Decode the following chunk meanwhile.
            let following = PendingChunk()
            let group = DispatchGroup()
            DispatchQueue.global(qos: .userInitiated).async(group: group) {
                following.set(Result { try decodeChunk(source, after: chunkLast, through: last, records: records) })
            }
            defer { group.wait() }
            try target.environment.write { txn in
                // The stream and command records, as the writer keeps them.
                for envelope in chunk.envelopes {
                    if envelope.streamVersion != 0 {
                        try target.writeStreamRecord(
                            txn, key: LogStore.streamKey(container: envelope.container, stream: envelope.stream),
                            version: envelope.streamVersion, last: envelope.position.rawValue)
                    }
                    _ = try target.recordCommand(txn, envelope, position: envelope.position.rawValue, refusingGaps: false)
                }
                for (event, context) in chunk.events {
                    if let validator, let problem = try validator.problem(event, context, txn) {
                        throw InadmissibleEvent(
                            position: context.position,
                            text: EventValidator.describe(position: context.position, event, actor: context.actor, problem))
                    }
                    try projector.apply(event, context, txn)
                }
            }
            group.wait()
            next = following.get()
            after = chunkLast
            progress?(after)
        }
    }

    /// The first event of a replay that the sharing rules could not have produced (``EventValidator``).
    package struct InadmissibleEvent: Error, Sendable, Hashable {
        /// Its position.
        package var position: UInt64
        /// The event and what is wrong with it, in words.
        package var text: String

        /// As the error of a rebuild that met it.
        package var error: LedgerError {
            LedgerError(.corruptedData, text + "; the read models were not rebuilt: audit the ledger (share-ledger audit)")
        }
    }

    /// The domain events of one chunk, decoded, with the last position read (nil when none).
    struct DecodedChunk: Sendable {
        var events: [(DomainEvent, Projector.Context)]
        var lastPosition: UInt64?
        /// Every event of the chunk, when the stream and command records are replayed too.
        var envelopes: [EventEnvelope] = []
    }

    /// Reads up to ``chunk`` entries after `after` (through `last`) in one read transaction and
    /// decodes them; raw appends are skipped.
    static func decodeChunk(_ source: LogStore, after: UInt64, through last: UInt64, records: Bool = false) throws -> DecodedChunk {
        let envelopes: [EventEnvelope] = try source.environment.read { txn in
            try txn.withCursor(source.log) { cursor in
                var out: [EventEnvelope] = []
                out.reserveCapacity(chunk)
                var entry = try BigEndian.withBytes(of: after + 1) { try cursor.seek(atLeast: $0) }
                while let current = entry, out.count < chunk {
                    guard let key = BigEndian.uint64(current.key) else {
                        throw LedgerError(.corruptedData, "a log key is \(current.key.count) bytes, expected 8")
                    }
                    guard key <= last else { break }
                    out.append(try EnvelopeCodec.decode(current.value, key: key))
                    entry = try cursor.next()
                }
                return out
            }
        }
        var decoded = DecodedChunk(
            events: [], lastPosition: envelopes.last?.position.rawValue, envelopes: records ? envelopes : [])
        decoded.events.reserveCapacity(envelopes.count)
        for envelope in envelopes {
            guard let event = try DomainEvent.decode(envelope) else { continue }
            decoded.events.append((event, Projector.Context(envelope)))
        }
        return decoded
    }

    /// The result of a chunk decoded on another thread, handed over once (after `DispatchGroup.wait`).
    private final class PendingChunk: @unchecked Sendable {
        // @unchecked: `result` is written by the decoding thread before it leaves the group and read
        // only after `wait()` returns; the lock makes that hand-over explicit.
        private let lock = NSLock()
        private var result: Result<DecodedChunk, any Error> = .success(DecodedChunk(events: [], lastPosition: nil))

        func set(_ value: Result<DecodedChunk, any Error>) { lock.withLock { result = value } }
        func get() -> Result<DecodedChunk, any Error> { lock.withLock { result } }
    }

    /// Copies entries in order, from `entry` on, with `cursor` into `db` in `txn`, as sorted appends
    /// (`MDB_APPEND`; plain puts for dupsort databases); at most `limit` entries, and none once
    /// `byteLimit` bytes of keys and values are copied. Leaves `entry` at the first entry not copied
    /// (nil at the end) and returns how many entries and bytes were copied. `db` must hold nothing
    /// after the entries copied.
    @discardableResult
    package static func copy(
        _ entry: inout Entry?, with cursor: borrowing Cursor, into db: Database, in txn: borrowing Transaction,
        limit: Int = .max, byteLimit: Int = .max
    ) throws -> (entries: Int, bytes: Int) {
        let flags: PutFlags = db.flags.contains(.dupSort) ? PutFlags(rawValue: 0) : .append
        var copied = 0
        var bytes = 0
        while let current = entry, copied < limit, bytes < byteLimit {
            try txn.put(db, key: current.key, value: current.value, flags: flags)
            copied += 1
            bytes += current.key.count + current.value.count
            entry = try cursor.next()
        }
        return (copied, bytes)
    }

}

extension LogReplay {
    /// ``copy(_:with:into:in:limit:byteLimit:)`` into the table's database.
    @discardableResult
    package static func copy(
        _ entry: inout Entry?, with cursor: borrowing Cursor, into table: ReadModelTable, in txn: borrowing Transaction,
        limit: Int = .max, byteLimit: Int = .max
    ) throws -> (entries: Int, bytes: Int) {
        try copy(&entry, with: cursor, into: table.database, in: txn, limit: limit, byteLimit: byteLimit)
    }
}
