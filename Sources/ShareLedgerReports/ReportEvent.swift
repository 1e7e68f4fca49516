import Foundation
import ShareLedger
import ShareLedgerAudit

/// One event of a report: where it is in the log, who did it, its hash, and what it changed about
/// access (read from the history's payload JSON, `HistoryEntry.payloadJSON`).
public struct ReportEvent: Sendable, Hashable {
    /// Its log position.
    public var position: UInt64
    /// When it was recorded.
    public var recordedAt: Date
    /// The event's name, e.g. `ShareAccepted`.
    public var name: String
    /// The container it belongs to.
    public var container: String
    /// Who did it (a user record name, `system` or `operator`).
    public var actor: String
    /// Its hash, hexadecimal.
    public var hash: String
    /// The share token it is about, if any.
    public var token: String?
    /// What it changed about access to its share.
    public var change: AccessChange
    /// Whether personal data it holds is sealed under a destroyed key (`HistoryEntry.personalDataErased`).
    public var personalDataErased = false

    /// Reads `entry`'s envelope and payload.
    public init(_ entry: HistoryEntry) {
        position = entry.envelope.position.rawValue
        recordedAt = entry.envelope.recordedAt
        name = entry.name
        container = entry.envelope.container
        actor = entry.envelope.actor
        hash = entry.envelope.hash.hex
        let fields = (try? JSONSerialization.jsonObject(with: Data(entry.payloadJSON.utf8))) as? [String: Any] ?? [:]
        token = (fields["token"] as? String).flatMap { $0.isEmpty ? nil : $0 }
        change = AccessChange(name: entry.name, fields)
        personalDataErased = entry.personalDataErased
    }

    /// An event made by hand (tests and previews).
    public init(
        position: UInt64, recordedAt: Date, name: String, container: String, actor: String, hash: String, token: String?,
        change: AccessChange
    ) {
        self.position = position
        self.recordedAt = recordedAt
        self.name = name
        self.container = container
        self.actor = actor
        self.hash = hash
        self.token = token
        self.change = change
    }
}

/// What an event changed about who can access a share (the events `LedgerAudit(ShareLedger).access(to:at:)` replays).
public enum AccessChange: Sendable, Hashable {
    /// The share was created (or created again under the same token); its owner has access.
    case created(owner: String, ownerParticipantID: String, publicPermission: Share.Participant.Permission)
    /// The share was deleted.
    case deleted
    /// The public permission changed.
    case publicPermission(old: Share.Participant.Permission, new: Share.Participant.Permission)
    /// A participant was invited (pending), or a removed one invited again.
    case added(
        participantID: String, userRecordName: String?, role: Share.Participant.Role,
        permission: Share.Participant.Permission, approvedRequester: Bool, oneTimeURL: Bool)
    /// A participant's role or permission changed.
    case updated(participantID: String, role: Share.Participant.Role, permission: Share.Participant.Permission)
    /// A participant was removed or left.
    case removed(participantID: String, reason: RemovalReason)
    /// A user proved a participant's address: the participant is theirs.
    case verified(participantID: String, userRecordName: String)
    /// A participant accepted.
    case accepted(participantID: String, userRecordName: String)
    /// Access requests were allowed or not.
    case requestsAllowed(Bool)
    /// A user asked for access.
    case requested(userRecordName: String)
    /// A request was denied.
    case denied(userRecordName: String)
    /// A user was blocked.
    case blocked(userRecordName: String)
    /// A user was unblocked.
    case unblocked(userRecordName: String)
    /// Anything else (metadata fetches, title changes, residual tasks...).
    case other

    /// Why a participant left the share.
    public enum RemovalReason: String, Sendable, Hashable {
        /// Removed by the owner or an administrator.
        case removed
        /// Left by themselves.
        case left
        /// Dropped when the public permission changed.
        case publicPermissionChanged
        /// Their identity was blocked.
        case blocked
    }

    init(name: String, _ fields: [String: Any]) {
        func text(_ key: String) -> String { fields[key] as? String ?? "" }
        func optionalText(_ key: String) -> String? { text(key).isEmpty ? nil : text(key) }
        func permission(_ key: String) -> Share.Participant.Permission {
            switch fields[key] {
            case let name as String:
                let names: [String: Share.Participant.Permission] = [
                    "PERMISSION_NONE": Share.Participant.Permission.none, "PERMISSION_READ_ONLY": .readOnly,
                    "PERMISSION_READ_WRITE": .readWrite,
                ]
                return names[name] ?? .unknown
            case let raw as Int: return Share.Participant.Permission(rawValue: raw) ?? .unknown
            default: return .unknown
            }
        }
        func role(_ key: String) -> Share.Participant.Role {
            switch fields[key] {
            case let name as String:
                let names: [String: Share.Participant.Role] = [
                    "ROLE_OWNER": .owner, "ROLE_ADMINISTRATOR": .administrator, "ROLE_PRIVATE_USER": .privateUser,
                    "ROLE_PUBLIC_USER": .publicUser,
                ]
                return names[name] ?? .unknown
            case let raw as Int: return Share.Participant.Role(rawValue: raw) ?? .unknown
            default: return .unknown
            }
        }
        let participant = text("participantId")
        let user = text("userRecordName")
        switch name {
        case "ShareCreated":
            self = .created(owner: text("ownerName"), ownerParticipantID: text("ownerParticipantId"), publicPermission: permission("publicPermission"))
        case "ShareDeleted": self = .deleted
        case "PublicPermissionChanged": self = .publicPermission(old: permission("oldPermission"), new: permission("newPermission"))
        case "ParticipantAdded":
            self = .added(
                participantID: participant, userRecordName: optionalText("userRecordName"), role: role("role"),
                permission: permission("permission"), approvedRequester: fields["approvedRequester"] as? Bool ?? false,
                oneTimeURL: optionalText("oneTimeToken") != nil)
        case "ParticipantUpdated": self = .updated(participantID: participant, role: role("role"), permission: permission("permission"))
        case "ParticipantRemoved":
            let reason: RemovalReason
            switch text("reason") {
            case "REASON_LEFT": reason = .left
            case "REASON_PUBLIC_PERMISSION_CHANGED": reason = .publicPermissionChanged
            case "REASON_BLOCKED": reason = .blocked
            default: reason = .removed
            }
            self = .removed(participantID: participant, reason: reason)
        case "ParticipantVerified": self = .verified(participantID: participant, userRecordName: user)
        case "ShareAccepted": self = .accepted(participantID: participant, userRecordName: user)
        case "AccessRequestsAllowedChanged": self = .requestsAllowed(fields["allowed"] as? Bool ?? false)
        case "AccessRequested": self = .requested(userRecordName: user)
        case "AccessRequestDenied": self = .denied(userRecordName: user)
        case "IdentityBlocked": self = .blocked(userRecordName: user)
        case "IdentityUnblocked": self = .unblocked(userRecordName: user)
        default: self = .other
        }
    }
}
