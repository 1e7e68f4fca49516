import ByteKeys
import EventLog
import Foundation
import LMDB
import SharingDomain

/// Opens the personal data of a source ledger's events for `importResealingPersonalData(from:progress:)` (`ShareLedgerAudit`):
/// each event's sealed fields opened with the source's key store (a box it cannot open is kept as it
/// is), keyed hashes the target recomputes cleared, so that the target's sealing step seals them anew.
/// It runs the domain (decoding, sealing, projecting), so it lives with the facade; the audit module
/// drives it.
package struct Resealing {
    /// An event of the source, ready to be sealed again.
    package struct Opened: Sendable {
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
    /// Events of the source opened so far that held personal data in plaintext.
    package private(set) var plaintextEventsInSource: UInt64 = 0
    /// Sealed boxes the source's key store could not open (their person was forgotten), kept as they are.
    package private(set) var unopenedBoxes: UInt64 = 0

    /// Reseals from the ledger of `source` into the ledger of `target`.
    package init(source: ShareLedger, target: ShareLedger) {
        self.source = source.models
        self.target = target.models
    }

    /// `envelope`'s event with its personal fields opened.
    package mutating func open(_ envelope: EventEnvelope) throws(LedgerError) -> Opened {
        let decoded = try DomainEvent.decode(envelope)
        guard let original = decoded else { return Opened(envelope: envelope, event: nil, stream: envelope.stream, rewrite: false) }
        if PersonalDataVault.holdsPlaintextPersonalData(original) { plaintextEventsInSource += 1 }
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
        unopenedBoxes += unopened
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

extension Resealing {
    /// Writes one batch of opened events, sealing each in the writer's transaction (a title's owner, a
    /// forgotten user's addresses are read from the read models as they stand before it), with its
    /// stream and command records, and projects it.
    /// Returns how many events were re-encoded, how many still hold plaintext, and the head after them.
    package static func write(
        _ batch: [Resealing.Opened], into ledger: ShareLedger, _ txn: borrowing Transaction
    ) throws -> (resealed: UInt64, plaintext: UInt64, head: LogHead) {
        let (models, store) = (ledger.models, ledger.log.store)
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
                if PersonalDataVault.holdsPlaintextPersonalData(sealed.event) { plaintext += 1 }
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
