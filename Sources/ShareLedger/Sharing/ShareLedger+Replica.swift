import ByteKeys
import Crypto
import Foundation
import LMDB
import SharingDomain

extension ShareLedger {
    /// Appends events another ledger committed, as their stored bytes, to this ledger (a read
    /// replica), verifying them as ShareLedgerAudit's `importLog(from:progress:)` verifies an import, and projects the
    /// sharing-domain events into the read models in the same transaction, as the primary's writer did.
    /// The result is the same log, byte for byte, and the same read models at every position.
    ///
    /// `events` must continue this ledger's head: the first at head + 1 with the head's hash as its
    /// previous hash, each next one after it. Each one is checked before anything is written: its
    /// bytes decode as an envelope at its position, are exactly the canonical encoding of that
    /// envelope (so its hash is SHA-256(previous hash ‖ canonical bytes), recomputed here), its
    /// recorded time does not go backwards, its names and payload are within the writer's limits, a
    /// sharing-domain payload decodes, its stream version and back-link continue the stream, and its
    /// command id is new or continues the command just before it (a command may arrive in two batches).
    /// All of `events` are written in one write transaction on the writer thread, with the stream and
    /// command records the writer keeps; subscriptions hear of them with the commit.
    ///
    /// A replica must take no other writes: record its role (`LedgerRole.replica(shard:)`, which
    /// refuses every other append and keeps the residual-task worker off) and send commands to the
    /// shard's writer. Applying is exempt from the role check: it is how a replica and a standby
    /// about to take over (its term marker included) receive the history.
    ///
    /// A replica reads personal data with a copy of the primary's key store (the keys never travel
    /// with the events). When a batch holds a `PersonalDataForgotten`, the keys it made useless are
    /// destroyed in this ledger's key store after the commit, as the primary's `forget` destroyed its
    /// own (a crash in between is finished by the next open for writing).
    ///
    /// - Returns: the new head.
    /// - Throws: `LedgerError.Code.serverRecordChanged` when `events` do not continue the head
    ///   (another writer appended, or events are missing: resume from `EventLog.head()`);
    ///   `LedgerError.Code.corruptedData` naming the first event that fails a check (nothing is
    ///   written: the source or the transport is damaged, or it is another ledger's history);
    ///   `LedgerError.Code.readOnly`, storage errors.
    @discardableResult
    public func applyReplicated(_ events: [StoredEvent]) async throws(LedgerError) -> LogHead {
        guard let first = events.first else { return try log.head() }
        // Stateless checks first, off the writer thread: decoding, the canonical form and the hash.
        var checked: [ReplicatedEvent] = []
        checked.reserveCapacity(events.count)
        var previous: EventEnvelope?
        for event in events {
            let envelope = try ReplicatedEvent.decode(event)
            if let previous {
                try ReplicatedEvent.checkLink(envelope, after: LogHead(
                    position: previous.position, hash: previous.hash, recordedAtMicros: previous.recordedAtMicros))
            }
            checked.append(try ReplicatedEvent(envelope: envelope, stored: event.bytes))
            previous = envelope
        }
        let store = log.store
        let projector = Projector(models: store.models)
        let batch = checked
        _ = try await maintain(replicating: true) { txn in
            let head = try store.readHead(txn)
            guard head.position.rawValue + 1 == first.position.rawValue else {
                throw LedgerError(
                    .serverRecordChanged, "the replicated events start at position \(first.position) but this ledger's "
                        + "head is \(head.position); resume from the head")
            }
            try ReplicatedEvent.checkLink(batch[0].envelope, after: head)
            for event in batch {
                try event.write(store: store, projector: projector, txn: txn)
            }
            return batch.count
        }
        try finishForgets(among: batch.lazy.map(\.domain))
        return LogHead(position: batch[batch.count - 1].envelope.position, hash: batch[batch.count - 1].envelope.hash,
            recordedAtMicros: batch[batch.count - 1].envelope.recordedAtMicros)
    }

    /// A digest of the read models (every key and value of every read-model database, the worker's
    /// bookkeeping left out) and the head they are at, read in one read transaction: two ledgers at
    /// the same head answer every metadata query alike exactly when their digests are equal. Reads
    /// every read model; for checks and tests, not for a hot path.
    public func readModelDigest() throws(LedgerError) -> (head: LogHead, digest: String) {
        let models = self.models
        let store = log.store
        return try read("computing the read-model digest") { txn in
            var hasher = SHA256()
            // The history journal counts as part of the history indexes (``ReadModels/logicalEntries(_:_:)``).
            for database in models.all where database.name != models.historyJournal.name {
                hasher.update(data: Array(database.name.utf8) + [0])
                for (key, value) in try models.logicalEntries(txn, database) {
                    hasher.update(data: BigEndian.bytes(of: UInt32(key.count)))
                    hasher.update(data: key)
                    hasher.update(data: BigEndian.bytes(of: UInt32(value.count)))
                    hasher.update(data: value)
                }
            }
            return (try store.readHead(txn), Hex.encode(Array(hasher.finalize())))
        }
    }
}

/// A replicated event that passed the checks that need no ledger state.
private struct ReplicatedEvent: Sendable {
    var envelope: EventEnvelope
    var stored: [UInt8]
    /// The decoded sharing-domain event, or nil for a raw append.
    var domain: DomainEvent?

    static func refuse(_ position: LogPosition, _ text: String) -> LedgerError {
        LedgerError(
            .corruptedData, "the replicated event at position \(position) is refused: \(text); nothing of its batch was "
                + "written (check that the source is this ledger's primary)")
    }

    static func decode(_ event: StoredEvent) throws(LedgerError) -> EventEnvelope {
        do {
            return try event.bytes.withUnsafeBytes { raw throws(LedgerError) in
                try EnvelopeCodec.decode(raw, key: event.position.rawValue)
            }
        } catch {
            throw refuse(event.position, "its bytes do not decode (\((error as? LedgerError)?.message ?? "\(error)"))")
        }
    }

    /// The chain link between `envelope` and the event (or head) before it.
    static func checkLink(_ envelope: EventEnvelope, after head: LogHead) throws(LedgerError) {
        guard envelope.position.rawValue == head.position.rawValue + 1 else {
            throw refuse(envelope.position, "it does not follow position \(head.position) (an event is missing or out of order)")
        }
        guard envelope.previousHash == head.hash else {
            throw refuse(envelope.position, "its previous hash is not the hash of position \(head.position): the histories forked")
        }
        guard envelope.recordedAtMicros >= head.recordedAtMicros else {
            throw refuse(envelope.position, "its recorded time goes backwards")
        }
    }

    init(envelope: EventEnvelope, stored: [UInt8]) throws(LedgerError) {
        let position = envelope.position
        let (canonical, hash) = EnvelopeCodec.encode(
            EnvelopeCodec.Fields(
                position: position.rawValue, recordedAtMicros: envelope.recordedAtMicros, container: envelope.container,
                actor: envelope.actor, commandID: envelope.commandID, correlationID: envelope.correlationID,
                causationID: envelope.causationID, schemaVersion: envelope.schemaVersion, stream: envelope.stream,
                streamVersion: envelope.streamVersion, streamPreviousPosition: envelope.streamPreviousPosition.rawValue,
                eventType: envelope.eventType, payload: envelope.payload, previousHash: envelope.previousHash.bytes))
        guard hash == envelope.hash.bytes else {
            throw ReplicatedEvent.refuse(position, "its hash does not match SHA-256(previous hash ‖ canonical bytes): the event was altered")
        }
        guard canonical == stored else {
            throw ReplicatedEvent.refuse(position, "its bytes are not the canonical encoding the writer stores")
        }
        for (value, what) in [(envelope.container, "container"), (envelope.stream, "stream"), (envelope.eventType, "event type")] {
            let utf8 = value.utf8
            guard !utf8.isEmpty, utf8.count <= EventLog.Limits.maxNameBytes, !utf8.contains(0) else {
                throw ReplicatedEvent.refuse(
                    position, "its \(what) is not 1 to \(EventLog.Limits.maxNameBytes) bytes of UTF-8 without NUL")
            }
        }
        guard envelope.schemaVersion >= 1, envelope.payload.count <= EventLog.Limits.maxPayloadBytes else {
            throw ReplicatedEvent.refuse(
                position, "its schema version is 0 or its payload is larger than \(EventLog.Limits.maxPayloadBytes) bytes")
        }
        do {
            domain = try DomainEvent.decode(envelope)
        } catch {
            throw ReplicatedEvent.refuse(position, "its payload does not decode as \(envelope.eventType): \(error.message)")
        }
        self.envelope = envelope
        self.stored = stored
    }

    /// Checks the event against the stream and command records `txn` sees, then writes it, its records
    /// and its projection.
    func write(store: LogStore, projector: Projector, txn: borrowing Transaction) throws {
        let position = envelope.position.rawValue
        let streamKey = LogStore.streamKey(container: envelope.container, stream: envelope.stream)
        // An unversioned event (stream version 0) takes no place in its stream and has no back-link.
        let versioned = envelope.streamVersion != 0
        let stream = versioned ? try store.streamRecord(txn, key: streamKey) : (version: 0, last: 0)
        guard versioned ? envelope.streamVersion == stream.version + 1 && envelope.streamPreviousPosition.rawValue == stream.last
            : envelope.streamPreviousPosition.rawValue == 0
        else {
            throw ReplicatedEvent.refuse(
                envelope.position, "stream \(envelope.stream) is at version \(stream.version) (last position "
                    + "\(stream.last)), the event says version \(envelope.streamVersion) after \(envelope.streamPreviousPosition)")
        }
        // A command that began in an earlier batch: this event must be its next one.
        guard try store.recordCommand(txn, envelope, position: position, refusingGaps: true) else {
            throw ReplicatedEvent.refuse(envelope.position, "its command id \(envelope.commandID) was used by an earlier command")
        }
        try txn.put(store.log, key: BigEndian.bytes(of: position), value: stored)
        if versioned { try store.writeStreamRecord(txn, key: streamKey, version: envelope.streamVersion, last: position) }
        if let domain {
            _ = try projector.apply(domain, Projector.Context(envelope), txn)
        }
    }
}
