import EventLog
import Foundation
import LMDB
import SharingDomain
import SwiftProtobuf

/// A sharing-domain event read from the log or from an import, with the envelope fields its
/// projection uses: what a client of the facade (the audit module) holds between reading events and
/// projecting them, while the projection and the rules stay with the facade.
package struct ReplayedEvent: Sendable {
    /// The event.
    package let event: DomainEvent
    let context: Projector.Context

    /// The sharing-domain event of `fields`, or nil for a raw append.
    ///
    /// - Throws: `LedgerError.Code.corruptedData` (or what the decoder says) when its payload does not
    ///   decode as its type.
    package static func decode(_ fields: EnvelopeCodec.Fields) throws(LedgerError) -> ReplayedEvent? {
        let event = try DomainEvent.decode(
            type: fields.eventType, schemaVersion: fields.schemaVersion, payload: fields.payload, position: fields.position)
        return event.map {
            ReplayedEvent(
                event: $0,
                context: Projector.Context(
                    position: fields.position, recordedAtMicros: fields.recordedAtMicros, container: fields.container,
                    actor: fields.actor))
        }
    }

    /// Projects `events` into `models` in the write transaction `txn`, as the writer does.
    package static func project(
        _ events: some Sequence<ReplayedEvent>, into models: ReadModels, _ txn: borrowing Transaction
    ) throws {
        let projector = Projector(models: models)
        for replayed in events { try projector.apply(replayed.event, replayed.context, txn) }
    }

    /// Projects `events` (nil: a raw append) into the read models of `scratch`, each first checked by
    /// the ``EventValidator`` against the read models as they stand before it, in transactions of
    /// ``LogReplay/chunk`` events; it projects with the key store of `keys` (as the live read models
    /// do). Returns the index of the first event the sharing rules could not have produced, with what
    /// is wrong in words (nothing from its transaction is kept), or nil when every event is admissible.
    package static func firstInadmissible(
        _ events: [ReplayedEvent?], into scratch: LogStore, sealingWith keys: ReadModels
    ) throws -> (index: Int, text: String)? {
        let models = scratch.models.sealing(with: keys.vault)
        let projector = Projector(models: models)
        let validator = EventValidator(models: models)
        /// Thrown out of the transaction, so that nothing of its chunk is kept.
        struct Found: Error {
            var index: Int
            var text: String
        }
        var done = 0
        do {
            while done < events.count {
                let end = min(done + LogReplay.chunk, events.count)
                try scratch.environment.write { txn in
                    for index in done..<end {
                        guard let replayed = events[index] else { continue }
                        let (event, context) = (replayed.event, replayed.context)
                        if let problem = try validator.problem(event, context, txn) {
                            throw Found(
                                index: index,
                                text: EventValidator.describe(position: context.position, event, actor: context.actor, problem))
                        }
                        try projector.apply(event, context, txn)
                    }
                }
                done = end
            }
        } catch let found as Found {
            return (found.index, found.text)
        }
        return nil
    }

    /// `event`'s payload in protobuf's text format on one line, and as JSON (for a history).
    package static func texts(of event: DomainEvent) -> (summary: String, payloadJSON: String) {
        let message = event.message
        return (message.textFormatString().split(separator: "\n").joined(separator: " "), (try? message.jsonString()) ?? "{}")
    }
}
