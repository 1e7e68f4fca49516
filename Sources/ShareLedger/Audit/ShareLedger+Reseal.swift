import EventLog
import Foundation
import LMDB
import SharingDomain

/// What ``ShareLedger/importResealingPersonalData(from:progress:)`` wrote.
public struct ResealSummary: Sendable, Hashable, Codable {
    /// Events written: every event of the source, at the same position.
    public var events: UInt64
    /// Events whose payload was re-encoded because it holds personal data: plaintext sealed, or
    /// sealed data opened with the source's key store and sealed again under the new one.
    public var resealedEvents: UInt64
    /// Events of the source that held personal data in plaintext (what `audit` reports for it).
    public var plaintextEventsInSource: UInt64
    /// Sealed fields the source's key store could not open (their person was forgotten, or the key
    /// store is missing or another one): copied as they are, so they stay unreadable.
    public var unopenedBoxes: UInt64
    /// Events of the new ledger that hold personal data in plaintext: 0.
    public var plaintextEventsLeft: UInt64
    /// The position of the last event written (the new ledger's head).
    public var headPosition: UInt64
    /// The hash of the last event written (hex): a new chain, so not the source's.
    public var headHash: String
}

extension ShareLedger {
    /// Writes every event of `source` into this ledger, which must be new and empty, with every
    /// personal field sealed under this ledger's key store: re-encrypts a ledger whose events were
    /// written before crypto-shredding (or before invitations were sealed) into a new one
    /// (`share-ledger import --reseal-personal-data --from OLD`).
    ///
    /// An event of a hash-chained log cannot change, so the re-encrypted events make a new chain. Each
    /// event keeps its position, recorded time, container, actor, command, correlation and causation
    /// ids, stream and type; an event without personal data keeps its payload byte for byte. An event
    /// with personal data gets a new payload (and its type's current schema version): plaintext fields
    /// sealed with new keys (made in this ledger's key store), fields the source had sealed opened with
    /// the source's key store and sealed again, keyed hashes recomputed under this ledger's lookup key.
    /// Boxes the source cannot open (their person was forgotten) are copied as they are and stay
    /// unreadable. The read models are projected in the same transactions, in batches that never
    /// split a command; at the end the keys of every user and address the log says is forgotten are
    /// destroyed, so a person forgotten in the source, even one whose old events held plaintext, is
    /// unreadable here.
    ///
    /// The source is only read (it may be open read-only); keep it until the new ledger is checked
    /// (`audit`), then delete it and its backups as the old ledger's plaintext requires.
    ///
    /// - Throws: `LedgerError.Code.invalidArguments` when this ledger is not empty (nothing is
    ///   written), does not seal personal data (``Configuration/sealsPersonalData``) or is the source;
    ///   `LedgerError.Code.readOnly` when it is read-only or has no writable key store; storage
    ///   errors (a crash or an error part way leaves a prefix of whole commands: delete the new
    ///   ledger's directory and run it again).
    @discardableResult
    public func importResealingPersonalData(
        from source: ShareLedger, progress: (@Sendable (UInt64, UInt64) -> Void)? = nil
    ) async throws(LedgerError) -> ResealSummary {
        guard !configuration.readOnly, models.vault?.writable == true else {
            throw LedgerError(.readOnly, "the ledger at \(configuration.path) is not open for writing with its key store")
        }
        guard configuration.sealsPersonalData else {
            throw LedgerError(
                .invalidArguments, "the new ledger does not seal personal data (sealsPersonalData is off); open it with "
                    + "sealing on to re-encrypt into it")
        }
        let here = URL(fileURLWithPath: configuration.path).standardizedFileURL.path
        guard URL(fileURLWithPath: source.configuration.path).standardizedFileURL.path != here else {
            throw LedgerError(.invalidArguments, "a ledger cannot be re-encrypted into itself; write into a new, empty directory")
        }
        let start = try log.head()
        guard start.position.rawValue == 0 else {
            throw LedgerError(
                .invalidArguments, "the ledger at \(configuration.path) is not empty (its head is \(start.position)): "
                    + "re-encrypting writes a new ledger; choose a new, empty directory. Nothing was written")
        }
        let sourceHead = try source.log.head().position.rawValue
        var reseal = Resealing(source: source.models, target: models)
        var summary = ResealSummary(
            events: 0, resealedEvents: 0, plaintextEventsInSource: 0, unopenedBoxes: 0, plaintextEventsLeft: 0,
            headPosition: 0, headHash: EventHash.zero.hex)
        var after: UInt64 = 0
        var pending: [EventEnvelope] = []
        var sourceRead = sourceHead == 0
        let store = log.store
        while true {
            if !sourceRead {
                let read = try source.log.events(after: LogPosition(after), limit: 4_096).filter { $0.position.rawValue <= sourceHead }
                if let last = read.last { after = last.position.rawValue }
                sourceRead = read.isEmpty || after >= sourceHead
                pending += read
            }
            guard let last = pending.last else { break }
            // Whole commands only: the last one may go on in the next chunk, unless the source ends here.
            var end = pending.count
            if !sourceRead {
                while end > 0 && pending[end - 1].commandID == last.commandID && pending[end - 1].container == last.container {
                    end -= 1
                }
                if end == 0 { continue }
            }
            // Boxes are opened with the source's key store here, outside any transaction.
            var opened: [Resealing.Opened] = []
            opened.reserveCapacity(end)
            for envelope in pending[..<end] { opened.append(try reseal.open(envelope, &summary)) }
            pending.removeFirst(end)
            let batch = opened
            let written = try await maintain { [models] txn in
                try ShareLedger.writeResealed(batch, models: models, store: store, txn)
            }
            summary.events += UInt64(batch.count)
            summary.resealedEvents += written.resealed
            summary.plaintextEventsLeft += written.plaintext
            summary.headPosition = written.head.position.rawValue
            summary.headHash = written.head.hash.hex
            progress?(summary.headPosition, sourceHead)
        }
        // Keys of people and addresses forgotten in the source, made again above for their plaintext.
        try ShareLedger.destroyKeysOfForgottenUsers(log)
        return summary
    }

    /// Writes one batch of opened events, sealing each in the writer's transaction (a title's owner, a
    /// forgotten user's addresses are read from the read models as they stand before it), with its
    /// stream and command records, and projects it.
    private static func writeResealed(
        _ batch: [Resealing.Opened], models: ReadModels, store: LogStore, _ txn: borrowing Transaction
    ) throws -> (resealed: UInt64, plaintext: UInt64, head: LogHead) {
        var previous = try store.readHead(txn).hash
        var resealed: UInt64 = 0
        var plaintext: UInt64 = 0
        var commands: [(key: [UInt8], first: UInt64, count: UInt32, streamVersion: UInt64)] = []
        let projector = Projector(models: models)
        for item in batch {
            let envelope = item.envelope
            var payload = envelope.payload
            var schemaVersion = envelope.schemaVersion
            var stream = item.stream
            var projected: DomainEvent?
            if let event = item.event {
                let sealed = try models.sealingPersonalData(
                    of: PendingEvent(stream: stream, event: event), container: envelope.container, txn)
                // Re-encoded when opening or sealing changed it; kept byte for byte otherwise.
                if item.rewrite || sealed.event != event {
                    payload = try sealed.event.payload()
                    schemaVersion = sealed.event.schemaVersion
                    resealed += 1
                }
                stream = sealed.stream
                if sealed.event.holdsPlaintextPersonalData { plaintext += 1 }
                projected = sealed.event
            }
            let fields = EnvelopeCodec.Fields(
                position: envelope.position.rawValue, recordedAtMicros: envelope.recordedAtMicros, container: envelope.container,
                actor: envelope.actor, commandID: envelope.commandID, correlationID: envelope.correlationID,
                causationID: envelope.causationID, schemaVersion: schemaVersion, stream: stream,
                streamVersion: envelope.streamVersion, streamPreviousPosition: envelope.streamPreviousPosition.rawValue,
                eventType: envelope.eventType, payload: payload, previousHash: previous.bytes)
            let (stored, hash) = EnvelopeCodec.encode(fields)
            try txn.put(store.log, key: BigEndian.bytes(of: fields.position), value: stored)
            if fields.streamVersion != 0 {
                try store.writeStreamRecord(
                    txn, key: LogStore.streamKey(container: fields.container, stream: stream), version: fields.streamVersion,
                    last: fields.position)
            }
            let commandKey = LogStore.commandKey(container: fields.container, commandID: fields.commandID)
            if let last = commands.indices.last, commands[last].key == commandKey {
                commands[last].count += 1
                commands[last].streamVersion = LogStore.commandStreamVersion(
                    eventType: fields.eventType, streamVersion: fields.streamVersion)
            } else {
                // As the writer records it: 0 for a sharing command, the stream's version for a raw append.
                commands.append(
                    (commandKey, fields.position, 1,
                     LogStore.commandStreamVersion(eventType: fields.eventType, streamVersion: fields.streamVersion)))
            }
            if let projected {
                try projector.apply(
                    projected,
                    Projector.Context(
                        position: fields.position, recordedAtMicros: fields.recordedAtMicros, container: fields.container,
                        actor: fields.actor), txn)
            }
            previous = EventHash(bytes: hash)!
        }
        for command in commands {
            try store.writeCommandRecord(
                txn, key: command.key, first: command.first, count: command.count, streamVersion: command.streamVersion)
        }
        return (resealed, plaintext, try store.readHead(txn))
    }
}

/// Opens the personal data of a source ledger's events for ``ShareLedger/importResealingPersonalData(from:progress:)``:
/// each event's sealed fields opened with the source's key store (a box it cannot open is kept as it
/// is), keyed hashes the target recomputes cleared, so that the target's sealing step seals them anew.
struct Resealing {
    /// An event of the source, ready to be sealed again.
    struct Opened: Sendable {
        var envelope: EventEnvelope
        /// The domain event with its personal fields in plaintext; nil for a raw append.
        var event: DomainEvent?
        /// Its stream in the new ledger (an address's stream is named after the address's new hash).
        var stream: String
        /// Whether opening changed it (its payload is re-encoded); else it is kept byte for byte unless
        /// sealing changes it.
        var rewrite: Bool
    }

    let source: ReadModels
    let target: ReadModels
    /// The addresses opened so far, by their source hash: an address forgotten in the source is
    /// forgotten here by its new hash.
    private var addresses: [AddressHash: PBLookupInfo] = [:]

    init(source: ReadModels, target: ReadModels) {
        self.source = source
        self.target = target
    }

    mutating func open(_ envelope: EventEnvelope, _ summary: inout ResealSummary) throws(LedgerError) -> Opened {
        let decoded = try DomainEvent.decode(envelope)
        guard let original = decoded else { return Opened(envelope: envelope, event: nil, stream: envelope.stream, rewrite: false) }
        if original.holdsPlaintextPersonalData { summary.plaintextEventsInSource += 1 }
        let container = envelope.container
        var stream = envelope.stream
        var unopened: UInt64 = 0
        func opened(_ sealed: Shareledger_Events_V1_SealedPersonalData) -> Shareledger_Events_V1_PersonalFields? {
            let fields = source.vault?.open(sealed, container: container)
            if fields == nil { unopened += 1 }
            return fields
        }
        // A plaintext address is remembered by its source hash too (a forget of it in the source
        // could not reach its plaintext; here it does).
        switch original {
        case .participantAdded(let e) where !e.hasSealedLookup: remember(e.lookupInfo, container: container)
        case .shareParticipantFetched(let e) where !e.hasSealedLookup: remember(e.lookupInfo, container: container)
        default: break
        }
        var event = original
        switch event {
        case .userRegistered(var e) where e.hasSealed:
            if let fields = opened(e.sealed) {
                (e.emailAddress, e.phoneNumber) = (fields.emailAddress, fields.phoneNumber)
                if fields.hasName { e.name = fields.name }
                e.clearSealed()
            }
            event = .userRegistered(e)
        case .shareCreated(var e) where e.hasSealedTitle:
            if let fields = opened(e.sealedTitle) {
                e.title = fields.title
                e.clearSealedTitle()
            }
            event = .shareCreated(e)
        case .shareTitleChanged(var e) where e.hasSealedTitle:
            if let fields = opened(e.sealedTitle) {
                e.title = fields.title
                e.clearSealedTitle()
            }
            event = .shareTitleChanged(e)
        case .participantAdded(var e) where e.hasSealedLookup:
            if let fields = opened(e.sealedLookup) {
                openLookup(&e.lookupInfo, fields, from: e.sealedLookup)
                e.clearSealedLookup()
            }
            event = .participantAdded(e)
        case .shareParticipantFetched(var e) where e.hasSealedLookup:
            if let fields = opened(e.sealedLookup) {
                openLookup(&e.lookupInfo, fields, from: e.sealedLookup)
                e.clearSealedLookup()
            }
            event = .shareParticipantFetched(e)
        case .personalDataForgotten(var e) where !e.addresses.isEmpty:
            if !e.userRecordName.isEmpty {
                // The target's sealing step adds the hashes of the user's addresses under its own key.
                (e.emailHash, e.phoneHash) = (Data(), Data())
            } else if let address = e.addresses.first, let lookup = addresses[address],
                let new = target.addressHash(container, of: lookup)
            {
                // An address forgotten in the source, named by its hash under the target's lookup key.
                (e.emailHash, e.phoneHash) = (Data(), Data())
                switch new.kind {
                case .email: e.emailHash = Data(new.hash)
                case .phone: e.phoneHash = Data(new.hash)
                }
                stream = Streams.address(new)
            }
            event = .personalDataForgotten(e)
        default:
            break
        }
        summary.unopenedBoxes += unopened
        return Opened(envelope: envelope, event: event, stream: stream, rewrite: event != original)
    }

    /// Remembers a plaintext lookup's address by its hash under the source's lookup key (if it has one).
    private mutating func remember(_ lookup: PBLookupInfo, container: String) {
        if let address = source.addressHash(container, of: lookup) { addresses[address] = lookup }
    }

    /// Puts an opened lookup's email or phone back into `lookup`, remembering its address by its
    /// source hash.
    private mutating func openLookup(
        _ lookup: inout PBLookupInfo, _ fields: Shareledger_Events_V1_PersonalFields,
        from sealed: Shareledger_Events_V1_SealedPersonalData
    ) {
        lookup.emailAddress = fields.emailAddress
        lookup.phoneNumber = fields.phoneNumber
        if let address = sealed.address { addresses[address] = lookup }
    }
}
