import EventLog
import Foundation
import SwiftProtobuf

package typealias PBLookupInfo = Shareledger_Events_V1_LookupInfo
package typealias PBRole = Shareledger_Events_V1_Role
package typealias PBPermission = Shareledger_Events_V1_Permission
package typealias PBStatus = Shareledger_Events_V1_AcceptanceStatus
package typealias PBField = Shareledger_Events_V1_Field

/// An event of the sharing domain: one of the messages of `Protos/shareledger/events/v1/events.proto`.
///
/// The envelope's `event_type` is the message's full protobuf name; `schema_version` is the message's
/// schema version (``schemaVersion``). Payloads of earlier versions are upcast on read to the current
/// message (``decode(type:schemaVersion:payload:position:)``), so projections only see current
/// messages (`docs/events.md` has the catalogue and the policy).
package enum DomainEvent: Sendable, Equatable {
    case userRegistered(Shareledger_Events_V1_UserRegistered)
    case zoneCreated(Shareledger_Events_V1_ZoneCreated)
    case zoneDeleted(Shareledger_Events_V1_ZoneDeleted)
    case recordSaved(Shareledger_Events_V1_RecordSaved)
    case recordDeleted(Shareledger_Events_V1_RecordDeleted)
    case shareCreated(Shareledger_Events_V1_ShareCreated)
    case shareDeleted(Shareledger_Events_V1_ShareDeleted)
    case shareTitleChanged(Shareledger_Events_V1_ShareTitleChanged)
    case publicPermissionChanged(Shareledger_Events_V1_PublicPermissionChanged)
    case participantAdded(Shareledger_Events_V1_ParticipantAdded)
    case participantUpdated(Shareledger_Events_V1_ParticipantUpdated)
    case participantRemoved(Shareledger_Events_V1_ParticipantRemoved)
    case verificationRequested(Shareledger_Events_V1_VerificationRequested)
    case participantVerified(Shareledger_Events_V1_ParticipantVerified)
    case shareAccepted(Shareledger_Events_V1_ShareAccepted)
    case shareMetadataFetched(Shareledger_Events_V1_ShareMetadataFetched)
    case participantZoneCreated(Shareledger_Events_V1_ParticipantZoneCreated)
    case participantZoneRemoved(Shareledger_Events_V1_ParticipantZoneRemoved)
    case shareParticipantFetched(Shareledger_Events_V1_ShareParticipantFetched)
    case accessRequestsAllowedChanged(Shareledger_Events_V1_AccessRequestsAllowedChanged)
    case accessRequested(Shareledger_Events_V1_AccessRequested)
    case accessRequestDenied(Shareledger_Events_V1_AccessRequestDenied)
    case identityBlocked(Shareledger_Events_V1_IdentityBlocked)
    case identityUnblocked(Shareledger_Events_V1_IdentityUnblocked)
    case personalDataForgotten(Shareledger_Events_V1_PersonalDataForgotten)

    /// The schema version this code writes for each event type that is past version 1.
    package static let currentVersions: [String: UInt32] = [
        Shareledger_Events_V1_UserRegistered.protoMessageName: 2
    ]

    /// The schema version this code writes for the event type `typeName`.
    package static func currentSchemaVersion(of typeName: String) -> UInt32 { currentVersions[typeName] ?? 1 }

    /// The schema version of this event as this code writes it: ``currentSchemaVersion(of:)`` of its
    /// ``typeName``, without the lookup by name for the types still at version 1 (every type but
    /// those of ``currentVersions``; `DomainEventTests` checks the two agree for every type).
    package var schemaVersion: UInt32 {
        switch self {
        case .userRegistered: return DomainEvent.currentSchemaVersion(of: typeName)
        default: return 1
        }
    }

    /// Decoders of payloads written with an earlier schema version, by type and version: each reads
    /// the old message (`Protos/shareledger/events/v1/legacy.proto`) and upcasts it to the current one.
    private static let upcasters: [String: [UInt32: @Sendable ([UInt8]) throws -> DomainEvent]] = [
        Shareledger_Events_V1_UserRegistered.protoMessageName: [
            1: { bytes in .userRegistered(Upcast.userRegistered(try Shareledger_Events_V1_UserRegisteredV1(serializedBytes: bytes))) }
        ]
    ]

    package var message: any SwiftProtobuf.Message {
        switch self {
        case .userRegistered(let m): return m
        case .zoneCreated(let m): return m
        case .zoneDeleted(let m): return m
        case .recordSaved(let m): return m
        case .recordDeleted(let m): return m
        case .shareCreated(let m): return m
        case .shareDeleted(let m): return m
        case .shareTitleChanged(let m): return m
        case .publicPermissionChanged(let m): return m
        case .participantAdded(let m): return m
        case .participantUpdated(let m): return m
        case .participantRemoved(let m): return m
        case .verificationRequested(let m): return m
        case .participantVerified(let m): return m
        case .shareAccepted(let m): return m
        case .shareMetadataFetched(let m): return m
        case .participantZoneCreated(let m): return m
        case .participantZoneRemoved(let m): return m
        case .shareParticipantFetched(let m): return m
        case .accessRequestsAllowedChanged(let m): return m
        case .accessRequested(let m): return m
        case .accessRequestDenied(let m): return m
        case .identityBlocked(let m): return m
        case .identityUnblocked(let m): return m
        case .personalDataForgotten(let m): return m
        }
    }

    /// The envelope's `event_type`: the message's full protobuf name.
    /// (A switch over the cases rather than ``message``'s dynamic type: that boxed the message in an
    /// existential for every event appended.)
    package var typeName: String {
        switch self {
        case .userRegistered: return Shareledger_Events_V1_UserRegistered.protoMessageName
        case .zoneCreated: return Shareledger_Events_V1_ZoneCreated.protoMessageName
        case .zoneDeleted: return Shareledger_Events_V1_ZoneDeleted.protoMessageName
        case .recordSaved: return Shareledger_Events_V1_RecordSaved.protoMessageName
        case .recordDeleted: return Shareledger_Events_V1_RecordDeleted.protoMessageName
        case .shareCreated: return Shareledger_Events_V1_ShareCreated.protoMessageName
        case .shareDeleted: return Shareledger_Events_V1_ShareDeleted.protoMessageName
        case .shareTitleChanged: return Shareledger_Events_V1_ShareTitleChanged.protoMessageName
        case .publicPermissionChanged: return Shareledger_Events_V1_PublicPermissionChanged.protoMessageName
        case .participantAdded: return Shareledger_Events_V1_ParticipantAdded.protoMessageName
        case .participantUpdated: return Shareledger_Events_V1_ParticipantUpdated.protoMessageName
        case .participantRemoved: return Shareledger_Events_V1_ParticipantRemoved.protoMessageName
        case .verificationRequested: return Shareledger_Events_V1_VerificationRequested.protoMessageName
        case .participantVerified: return Shareledger_Events_V1_ParticipantVerified.protoMessageName
        case .shareAccepted: return Shareledger_Events_V1_ShareAccepted.protoMessageName
        case .shareMetadataFetched: return Shareledger_Events_V1_ShareMetadataFetched.protoMessageName
        case .participantZoneCreated: return Shareledger_Events_V1_ParticipantZoneCreated.protoMessageName
        case .participantZoneRemoved: return Shareledger_Events_V1_ParticipantZoneRemoved.protoMessageName
        case .shareParticipantFetched: return Shareledger_Events_V1_ShareParticipantFetched.protoMessageName
        case .accessRequestsAllowedChanged: return Shareledger_Events_V1_AccessRequestsAllowedChanged.protoMessageName
        case .accessRequested: return Shareledger_Events_V1_AccessRequested.protoMessageName
        case .accessRequestDenied: return Shareledger_Events_V1_AccessRequestDenied.protoMessageName
        case .identityBlocked: return Shareledger_Events_V1_IdentityBlocked.protoMessageName
        case .identityUnblocked: return Shareledger_Events_V1_IdentityUnblocked.protoMessageName
        case .personalDataForgotten: return Shareledger_Events_V1_PersonalDataForgotten.protoMessageName
        }
    }

    /// The payload bytes (deterministic serialization).
    package func payload() throws -> [UInt8] {
        // Each message serialized by its own type, not through the existential ``message``.
        func serialized<M: SwiftProtobuf.Message>(_ m: M) throws -> [UInt8] {
            var options = BinaryEncodingOptions()
            options.useDeterministicOrdering = true
            return try m.serializedBytes(options: options)
        }
        switch self {
        case .userRegistered(let m): return try serialized(m)
        case .zoneCreated(let m): return try serialized(m)
        case .zoneDeleted(let m): return try serialized(m)
        case .recordSaved(let m): return try serialized(m)
        case .recordDeleted(let m): return try serialized(m)
        case .shareCreated(let m): return try serialized(m)
        case .shareDeleted(let m): return try serialized(m)
        case .shareTitleChanged(let m): return try serialized(m)
        case .publicPermissionChanged(let m): return try serialized(m)
        case .participantAdded(let m): return try serialized(m)
        case .participantUpdated(let m): return try serialized(m)
        case .participantRemoved(let m): return try serialized(m)
        case .verificationRequested(let m): return try serialized(m)
        case .participantVerified(let m): return try serialized(m)
        case .shareAccepted(let m): return try serialized(m)
        case .shareMetadataFetched(let m): return try serialized(m)
        case .participantZoneCreated(let m): return try serialized(m)
        case .participantZoneRemoved(let m): return try serialized(m)
        case .shareParticipantFetched(let m): return try serialized(m)
        case .accessRequestsAllowedChanged(let m): return try serialized(m)
        case .accessRequested(let m): return try serialized(m)
        case .accessRequestDenied(let m): return try serialized(m)
        case .identityBlocked(let m): return try serialized(m)
        case .identityUnblocked(let m): return try serialized(m)
        case .personalDataForgotten(let m): return try serialized(m)
        }
    }

    /// The type names of the domain events, in a fixed order (fuzz inputs pick one by index).
    package static let typeNames: [String] = [
        Shareledger_Events_V1_UserRegistered.protoMessageName,
        Shareledger_Events_V1_ZoneCreated.protoMessageName,
        Shareledger_Events_V1_ZoneDeleted.protoMessageName,
        Shareledger_Events_V1_RecordSaved.protoMessageName,
        Shareledger_Events_V1_RecordDeleted.protoMessageName,
        Shareledger_Events_V1_ShareCreated.protoMessageName,
        Shareledger_Events_V1_ShareDeleted.protoMessageName,
        Shareledger_Events_V1_ShareTitleChanged.protoMessageName,
        Shareledger_Events_V1_PublicPermissionChanged.protoMessageName,
        Shareledger_Events_V1_ParticipantAdded.protoMessageName,
        Shareledger_Events_V1_ParticipantUpdated.protoMessageName,
        Shareledger_Events_V1_ParticipantRemoved.protoMessageName,
        Shareledger_Events_V1_VerificationRequested.protoMessageName,
        Shareledger_Events_V1_ParticipantVerified.protoMessageName,
        Shareledger_Events_V1_ShareAccepted.protoMessageName,
        Shareledger_Events_V1_ShareMetadataFetched.protoMessageName,
        Shareledger_Events_V1_ParticipantZoneCreated.protoMessageName,
        Shareledger_Events_V1_ParticipantZoneRemoved.protoMessageName,
        Shareledger_Events_V1_ShareParticipantFetched.protoMessageName,
        Shareledger_Events_V1_AccessRequestsAllowedChanged.protoMessageName,
        Shareledger_Events_V1_AccessRequested.protoMessageName,
        Shareledger_Events_V1_AccessRequestDenied.protoMessageName,
        Shareledger_Events_V1_IdentityBlocked.protoMessageName,
        Shareledger_Events_V1_IdentityUnblocked.protoMessageName,
        Shareledger_Events_V1_PersonalDataForgotten.protoMessageName,
    ]

    private static let decoders: [String: @Sendable ([UInt8]) throws -> DomainEvent] = {
        func entry<M: SwiftProtobuf.Message>(_ type: M.Type, _ wrap: @escaping @Sendable (M) -> DomainEvent)
            -> (String, @Sendable ([UInt8]) throws -> DomainEvent)
        {
            (M.protoMessageName, { bytes in wrap(try M(serializedBytes: bytes)) })
        }
        return Dictionary(uniqueKeysWithValues: [
            entry(Shareledger_Events_V1_UserRegistered.self, DomainEvent.userRegistered),
            entry(Shareledger_Events_V1_ZoneCreated.self, DomainEvent.zoneCreated),
            entry(Shareledger_Events_V1_ZoneDeleted.self, DomainEvent.zoneDeleted),
            entry(Shareledger_Events_V1_RecordSaved.self, DomainEvent.recordSaved),
            entry(Shareledger_Events_V1_RecordDeleted.self, DomainEvent.recordDeleted),
            entry(Shareledger_Events_V1_ShareCreated.self, DomainEvent.shareCreated),
            entry(Shareledger_Events_V1_ShareDeleted.self, DomainEvent.shareDeleted),
            entry(Shareledger_Events_V1_ShareTitleChanged.self, DomainEvent.shareTitleChanged),
            entry(Shareledger_Events_V1_PublicPermissionChanged.self, DomainEvent.publicPermissionChanged),
            entry(Shareledger_Events_V1_ParticipantAdded.self, DomainEvent.participantAdded),
            entry(Shareledger_Events_V1_ParticipantUpdated.self, DomainEvent.participantUpdated),
            entry(Shareledger_Events_V1_ParticipantRemoved.self, DomainEvent.participantRemoved),
            entry(Shareledger_Events_V1_VerificationRequested.self, DomainEvent.verificationRequested),
            entry(Shareledger_Events_V1_ParticipantVerified.self, DomainEvent.participantVerified),
            entry(Shareledger_Events_V1_ShareAccepted.self, DomainEvent.shareAccepted),
            entry(Shareledger_Events_V1_ShareMetadataFetched.self, DomainEvent.shareMetadataFetched),
            entry(Shareledger_Events_V1_ParticipantZoneCreated.self, DomainEvent.participantZoneCreated),
            entry(Shareledger_Events_V1_ParticipantZoneRemoved.self, DomainEvent.participantZoneRemoved),
            entry(Shareledger_Events_V1_ShareParticipantFetched.self, DomainEvent.shareParticipantFetched),
            entry(Shareledger_Events_V1_AccessRequestsAllowedChanged.self, DomainEvent.accessRequestsAllowedChanged),
            entry(Shareledger_Events_V1_AccessRequested.self, DomainEvent.accessRequested),
            entry(Shareledger_Events_V1_AccessRequestDenied.self, DomainEvent.accessRequestDenied),
            entry(Shareledger_Events_V1_IdentityBlocked.self, DomainEvent.identityBlocked),
            entry(Shareledger_Events_V1_IdentityUnblocked.self, DomainEvent.identityUnblocked),
            entry(Shareledger_Events_V1_PersonalDataForgotten.self, DomainEvent.personalDataForgotten),
        ])
    }()

    /// Whether `typeName` is a domain event type.
    package static func isDomainEvent(_ typeName: String) -> Bool { decoders[typeName] != nil }

    /// Decodes the payload of `envelope` (``decode(type:schemaVersion:payload:position:)``).
    package static func decode(_ envelope: EventEnvelope) throws(LedgerError) -> DomainEvent? {
        try decode(
            type: envelope.eventType, schemaVersion: envelope.schemaVersion, payload: envelope.payload,
            position: envelope.position.rawValue)
    }

    /// Decodes a payload. Returns `nil` for event types that are not domain events (raw appends);
    /// throws ``LedgerError/Code/corruptedData`` for a domain event that does not decode, or for a
    /// schema version newer than this code knows.
    package static func decode(type typeName: String, schemaVersion: UInt32, payload: [UInt8], position: UInt64) throws(LedgerError)
        -> DomainEvent?
    {
        guard let current = decoders[typeName] else { return nil }
        let latest = currentSchemaVersion(of: typeName)
        guard schemaVersion <= latest else {
            throw LedgerError(
                .formatTooNew, "the event at position \(position) (\(typeName)) has schema version \(schemaVersion); "
                    + "this version of ShareLedger knows up to \(latest). Upgrade ShareLedger")
        }
        let decoder: @Sendable ([UInt8]) throws -> DomainEvent
        if schemaVersion == latest {
            decoder = current
        } else if let upcaster = upcasters[typeName]?[schemaVersion] {
            decoder = upcaster
        } else {
            throw LedgerError(
                .corruptedData, "the event at position \(position) (\(typeName)) has schema version \(schemaVersion), "
                    + "which no version of ShareLedger wrote")
        }
        do {
            return try decoder(payload)
        } catch {
            throw LedgerError(
                .corruptedData, "the payload of the event at position \(position) (\(typeName)) does not decode: \(error)")
        }
    }
}

/// Upcasters: old messages to current ones. Each is total (every old payload has a current form) and
/// pure (it depends on the old message alone), so a replay of the log gives the same read models on
/// every run.
package enum Upcast {
    /// UserRegistered 1 → 2: the top-level given and family names move into `name`.
    package static func userRegistered(_ old: Shareledger_Events_V1_UserRegisteredV1) -> Shareledger_Events_V1_UserRegistered {
        var new = Shareledger_Events_V1_UserRegistered()
        new.userRecordName = old.userRecordName
        new.emailAddress = old.emailAddress
        new.phoneNumber = old.phoneNumber
        if !old.givenName.isEmpty || !old.familyName.isEmpty {
            new.name.givenName = old.givenName
            new.name.familyName = old.familyName
        }
        return new
    }
}

/// An event a decision appends, with the stream it goes to.
package struct PendingEvent: Sendable {
    package var stream: String
    package var event: DomainEvent

    /// Makes the value from its fields.
    package init(stream: String, event: DomainEvent) {
        self.stream = stream
        self.event = event
    }
}

extension DomainEvent {
    /// Whether the event records a read (a logged metadata fetch or participant lookup) rather than a change: such events
    /// are unversioned (stream version 0, `docs/log-format.md`), so appending one writes only the
    /// log, its command record and its history entry, never the stream record.
    package var recordsARead: Bool {
        switch self {
        case .shareMetadataFetched, .shareParticipantFetched: return true
        default: return false
        }
    }
}

package enum Streams {
    package static func user(_ name: String) -> String { "user/\(name)" }
    package static func zone(owner: String, zone: String) -> String { "zone/\(owner)/\(zone)" }
    package static func share(_ token: String) -> String { "share/\(token)" }
    /// An address nobody registered with, by the subject of its key (``AddressHash/subject``).
    package static func address(_ address: AddressHash) -> String { "address/\(address.subject)" }
    /// Fetches by callers without an account.
    package static let anonymous = "anonymous"
}
