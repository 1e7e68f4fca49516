import EventLog
import Foundation

/// A share: a hierarchy of records (a root record and its `parent` chain) or a whole zone, and who
/// may access it (CloudKit's `CKShare`).
///
/// A `Share` value is a snapshot, as the user who asked for it may see it: ``participants`` holds
/// the participants that user is allowed to see (the owner and administrators see everyone; others
/// see the owner, the accepted participants and themselves).
public struct Share: Sendable, Hashable {
    /// The stored fields, in one copy-on-write box: a share holds two participants inline (each with
    /// an identity and its name components) and some forty references, so a share (and the metadata,
    /// results and answers holding one) moved or copied by value cost hundreds of bytes of `memmove`
    /// and a retain per reference, in every async frame and `Result` it passed through.
    private var box: CopyOnWrite<Fields>

    /// A share's stored fields (see the properties of the same names).
    private struct Fields: Sendable, Hashable {
        var recordID: RecordID
        var containerIdentifier: String
        var url: URL
        var token: ShareToken
        var title: String?
        var publicPermission: Participant.Permission
        var participants: [Participant]
        var owner: Participant
        var currentUserParticipant: Participant?
        var hierarchicalRootRecordID: RecordID?
        var recordChangeTag: String
        var creationDate: Date
        var allowsAccessRequests: Bool = false
        var requesters: [AccessRequester] = []
        var blockedIdentities: [BlockedIdentity] = []
        var oneTimeURLs: [OneTimeURL] = []
    }

    /// The share record's id: in the zone it shares; named ``zoneWideShareRecordName`` for a zone-wide share.
    public var recordID: RecordID {
        get { box.fields.recordID }
        set { box.fields.recordID = newValue }
    }
    /// The container that holds the share.
    public var containerIdentifier: String {
        get { box.fields.containerIdentifier }
        set { box.fields.containerIdentifier = newValue }
    }
    /// The invitation URL. Stable: sharing the same root (or zone) again gives the same URL.
    public var url: URL {
        get { box.fields.url }
        set { box.fields.url = newValue }
    }
    /// The unguessable token in ``url``.
    public var token: ShareToken {
        get { box.fields.token }
        set { box.fields.token = newValue }
    }
    /// The title shown in invitations (CloudKit's `CKShare.SystemFieldKey.title`).
    public var title: String? {
        get { box.fields.title }
        set { box.fields.title = newValue }
    }
    /// What anyone with the URL may do. Anything above ``Participant/Permission/none`` makes the
    /// share public: anyone signed in can join as a ``Participant/Role/publicUser``.
    public var publicPermission: Participant.Permission {
        get { box.fields.publicPermission }
        set { box.fields.publicPermission = newValue }
    }
    /// The participants the viewer may see.
    public var participants: [Participant] {
        get { box.fields.participants }
        set { box.fields.participants = newValue }
    }
    /// The owner.
    public var owner: Participant {
        get { box.fields.owner }
        set { box.fields.owner = newValue }
    }
    /// The viewer's own participant entry, if the viewer is a participant.
    public var currentUserParticipant: Participant? {
        get { box.fields.currentUserParticipant }
        set { box.fields.currentUserParticipant = newValue }
    }
    /// The root record of a hierarchy share; `nil` for a zone-wide share.
    public var hierarchicalRootRecordID: RecordID? {
        get { box.fields.hierarchicalRootRecordID }
        set { box.fields.hierarchicalRootRecordID = newValue }
    }
    /// Changes with every change of the share or its participants; pass it back (`ifChangeTag`) to
    /// make a change only if nobody else changed the share since (else ``EventLog/LedgerError/Code/serverRecordChanged``).
    public var recordChangeTag: String {
        get { box.fields.recordChangeTag }
        set { box.fields.recordChangeTag = newValue }
    }
    /// When the share was created.
    public var creationDate: Date {
        get { box.fields.creationDate }
        set { box.fields.creationDate = newValue }
    }
    /// Whether people who have the URL but no invitation may ask to join (CloudKit's
    /// `CKShare.allowsAccessRequests`). Off by default; while off, a request gets the answer of an
    /// unknown URL. Change it with `Container.setAllowsAccessRequests(_:for:ifChangeTag:)`.
    public var allowsAccessRequests: Bool {
        get { box.fields.allowsAccessRequests }
        set { box.fields.allowsAccessRequests = newValue }
    }
    /// The pending access requests (CloudKit's `CKShare.requesters`), in user record name order, each
    /// with the requester's name components and email address (or, without one, phone number).
    /// Only the owner and accepted administrators see them; for anyone else the list is empty.
    public var requesters: [AccessRequester] {
        get { box.fields.requesters }
        set { box.fields.requesters = newValue }
    }
    /// The identities blocked from the share (CloudKit's `CKShare.blockedIdentities`), in user record
    /// name order. Only the owner and accepted administrators see them; for anyone else the list is empty.
    public var blockedIdentities: [BlockedIdentity] {
        get { box.fields.blockedIdentities }
        set { box.fields.blockedIdentities = newValue }
    }
    /// The one-time URLs of the participants still in the share, with their participant ids, in
    /// participant id order (the owner and accepted administrators only). An array, not a dictionary,
    /// so that equal shares print alike.
    package var oneTimeURLs: [OneTimeURL] {
        get { box.fields.oneTimeURLs }
        set { box.fields.oneTimeURLs = newValue }
    }

    /// A one-time URL participant's id and URL.
    package struct OneTimeURL: Sendable, Hashable {
        package var participantID: String
        package var url: URL

        /// Makes the value from its fields.
        package init(participantID: String, url: URL) {
            self.participantID = participantID
            self.url = url
        }
    }

    /// The one-time URL of a one-time URL participant (CloudKit's `CKShare.oneTimeURL(for:)`): send it
    /// to the one person the invitation is for; the first signed-in user who accepts through it
    /// becomes that participant. The URL stays the same, tied to that participant, while the
    /// participant is in the share; after acceptance it works like the share's URL for the share's
    /// owner and participants (anyone else gets the answer of an unknown URL). `nil` for another
    /// participant, once the participant was removed or left (or the share deleted), or for a viewer
    /// who is not the owner or an accepted administrator.
    public func oneTimeURL(for participantID: String) -> URL? {
        oneTimeURLs.first { $0.participantID == participantID }?.url
    }

    /// A user who asked to join the share (CloudKit's `CKShare.AccessRequester`).
    public struct AccessRequester: Sendable, Hashable {
        /// Who asked: their user record id, the name components they registered with (if any), and
        /// as ``UserIdentity/lookupInfo`` a way to reach them, the email address they registered with
        /// or, without one, their phone number (their user record id when they gave neither). A
        /// forgotten requester has ``UserIdentity/personalDataErased`` set, no name and the user
        /// record id as lookup info.
        public var userIdentity: UserIdentity
        /// How to invite them: their user record id (pass it to `Container.addParticipant(_:permission:role:to:ifChangeTag:)`,
        /// or approve them with `Container.approveRequesters(_:permission:for:)`).
        public var participantLookupInfo: LookupInfo

        /// Makes a requester value.
        public init(userIdentity: UserIdentity, participantLookupInfo: LookupInfo) {
            self.userIdentity = userIdentity
            self.participantLookupInfo = participantLookupInfo
        }
    }

    /// A user blocked from the share (CloudKit's `CKShare.BlockedIdentity`): they cannot request
    /// access, fetch or accept the share until unblocked.
    public struct BlockedIdentity: Sendable, Hashable {
        /// Who is blocked.
        public var userIdentity: UserIdentity

        /// Makes a blocked identity value.
        public init(userIdentity: UserIdentity) { self.userIdentity = userIdentity }
    }

    /// CloudKit's record name of a zone-wide share (`CKRecordNameZoneWideShare`).
    public static let zoneWideShareRecordName = "cloudkit.zoneshare"
    /// CloudKit's record type of a share (`CKRecordTypeShare`).
    public static let recordType = "cloudkit.share"

    /// Whether this share covers a whole zone rather than a hierarchy.
    public var isZoneWide: Bool { recordID.recordName == Share.zoneWideShareRecordName }

    /// A participant of a share (CloudKit's `CKShare.Participant`).
    public struct Participant: Sendable, Hashable {
        /// The stored fields, in one copy-on-write box, as a ``Share``'s: a participant holds an
        /// identity (with its name components, lookup info and record id) and a dozen references,
        /// and an answer passes each participant on several times (its row, the share's list, the
        /// owner, the viewer's own entry, the metadata): every copy was a retain of each reference.
        private var box: CopyOnWrite<ParticipantFields>

        /// A participant's stored fields (see the properties of the same names).
        private struct ParticipantFields: Sendable, Hashable {
            var participantID: String
            var userIdentity: UserIdentity
            var role: Role
            var permission: Permission
            var acceptanceStatus: AcceptanceStatus
            var dateAddedToShare: Date?
            var isApprovedRequester: Bool
            var isOneTimeURLParticipant = false
        }

        /// Unique within the share; stays the same when the participant is invited again.
        public var participantID: String {
            get { box.fields.participantID }
            set { box.fields.participantID = newValue }
        }
        /// Who the participant is.
        public var userIdentity: UserIdentity {
            get { box.fields.userIdentity }
            set { box.fields.userIdentity = newValue }
        }
        /// The participant's role.
        public var role: Role {
            get { box.fields.role }
            set { box.fields.role = newValue }
        }
        /// What the participant may do with the shared records.
        public var permission: Permission {
            get { box.fields.permission }
            set { box.fields.permission = newValue }
        }
        /// Where the participant stands with the invitation.
        public var acceptanceStatus: AcceptanceStatus {
            get { box.fields.acceptanceStatus }
            set { box.fields.acceptanceStatus = newValue }
        }
        /// When the participant was added to the share (the time of the event that last invited them).
        public var dateAddedToShare: Date? {
            get { box.fields.dateAddedToShare }
            set { box.fields.dateAddedToShare = newValue }
        }
        /// Whether the participant joined by the approval of their access request (CloudKit's
        /// `CKShare.Participant.isApprovedRequester`).
        public var isApprovedRequester: Bool {
            get { box.fields.isApprovedRequester }
            set { box.fields.isApprovedRequester = newValue }
        }
        /// Whether this value is a new one-time URL participant (``oneTimeURLParticipant()``), to add
        /// with `Container.addParticipant(_:to:ifChangeTag:)`.
        public internal(set) var isOneTimeURLParticipant: Bool {
            get { box.fields.isOneTimeURLParticipant }
            set { box.fields.isOneTimeURLParticipant = newValue }
        }

        /// A participant reached by a one-time URL rather than an email address, phone number or
        /// account (CloudKit's `CKShare.Participant.oneTimeURLParticipant()`): role privateUser,
        /// permission readOnly (change them before adding it). Add it with
        /// `Container.addParticipant(_:to:ifChangeTag:)`, then take its URL from the returned share
        /// with ``Share/oneTimeURL(for:)``.
        public static func oneTimeURLParticipant() -> Participant {
            var participant = Participant(
                participantID: "", userIdentity: UserIdentity(userRecordID: nil, lookupInfo: nil, nameComponents: nil, hasiCloudAccount: false),
                role: .privateUser, permission: .readOnly, acceptanceStatus: .unknown, dateAddedToShare: nil)
            participant.isOneTimeURLParticipant = true
            return participant
        }

        /// Makes a participant value.
        public init(
            participantID: String, userIdentity: UserIdentity, role: Role, permission: Permission,
            acceptanceStatus: AcceptanceStatus, dateAddedToShare: Date?, isApprovedRequester: Bool = false
        ) {
            box = CopyOnWrite(
                ParticipantFields(
                    participantID: participantID, userIdentity: userIdentity, role: role, permission: permission,
                    acceptanceStatus: acceptanceStatus, dateAddedToShare: dateAddedToShare, isApprovedRequester: isApprovedRequester))
        }

        /// The deprecated participant type (CloudKit's `CKShare.ParticipantType`), derived from ``role``
        /// as CloudKit does: an administrator shows as a private user.
        public var type: ParticipantType {
            switch role {
            case .owner: return .owner
            case .administrator, .privateUser: return .privateUser
            case .publicUser: return .publicUser
            case .unknown: return .unknown
            }
        }

        /// A participant's role (CloudKit's `CKShare.ParticipantRole`, same raw values).
        public enum Role: Int, Sendable, Hashable, Codable, CaseIterable, CustomStringConvertible {
            /// Unknown.
            case unknown = 0
            /// The creator of the share.
            case owner = 1
            /// May add and remove participants and change their permissions.
            case administrator = 2
            /// Invited explicitly.
            case privateUser = 3
            /// Joined a public share through its URL.
            case publicUser = 4

            /// The role's name.
            public var description: String {
                switch self {
                case .unknown: return "unknown"
                case .owner: return "owner"
                case .administrator: return "administrator"
                case .privateUser: return "privateUser"
                case .publicUser: return "publicUser"
                }
            }
        }

        /// What a participant may do (CloudKit's `CKShare.ParticipantPermission`, same raw values).
        public enum Permission: Int, Sendable, Hashable, Codable, CaseIterable, Comparable, CustomStringConvertible {
            /// Unknown.
            case unknown = 0
            /// No access (for ``Share/publicPermission``: the share is private).
            case none = 1
            /// May read the shared records.
            case readOnly = 2
            /// May read and change the shared records (except delete the root).
            case readWrite = 3

            /// Orders by raw value.
            public static func < (lhs: Permission, rhs: Permission) -> Bool { lhs.rawValue < rhs.rawValue }

            /// The permission's name.
            public var description: String {
                switch self {
                case .unknown: return "unknown"
                case .none: return "none"
                case .readOnly: return "readOnly"
                case .readWrite: return "readWrite"
                }
            }
        }

        /// Where a participant stands (CloudKit's `CKShare.ParticipantAcceptanceStatus`, same raw values).
        public enum AcceptanceStatus: Int, Sendable, Hashable, Codable, CaseIterable, CustomStringConvertible {
            /// Unknown.
            case unknown = 0
            /// Invited, not accepted yet.
            case pending = 1
            /// Accepted: the shared records are in the participant's shared database.
            case accepted = 2
            /// Removed, or left.
            case removed = 3

            /// The status's name.
            public var description: String {
                switch self {
                case .unknown: return "unknown"
                case .pending: return "pending"
                case .accepted: return "accepted"
                case .removed: return "removed"
                }
            }
        }

        /// The deprecated participant type (CloudKit's `CKShare.ParticipantType`, same raw values).
        public enum ParticipantType: Int, Sendable, Hashable, Codable, CaseIterable {
            /// Unknown.
            case unknown = 0
            /// The owner.
            case owner = 1
            /// An invited user (administrators included).
            case privateUser = 3
            /// A user who joined a public share.
            case publicUser = 4
        }
    }

    /// What a user learns from a share URL before accepting it (CloudKit's `CKShare.Metadata`). The
    /// participant fields describe the user who fetched it.
    public struct Metadata: Sendable, Hashable {
        /// The stored fields, in one copy-on-write box, as a ``Share``'s: an answer and the
        /// `Result` and task frames it passes through copy the metadata several times, and every
        /// copy was a retain of each of its references (the owner's identity, the root record, ids).
        private var box: CopyOnWrite<MetadataFields>

        /// A metadata's stored fields (see the properties of the same names).
        private struct MetadataFields: Sendable, Equatable {
            var share: Share
            var containerIdentifier: String
            var ownerIdentity: UserIdentity
            var hierarchicalRootRecordID: RecordID?
            var rootRecord: Record?
            var participantRole: Participant.Role
            var participantStatus: Participant.AcceptanceStatus
            var participantPermission: Participant.Permission
            var oneTimeToken: String?
        }

        /// The share, with the participants the fetching user may see.
        public var share: Share {
            get { box.fields.share }
            set { box.fields.share = newValue }
        }
        /// The container that holds the share: run the accept in this container.
        public var containerIdentifier: String {
            get { box.fields.containerIdentifier }
            set { box.fields.containerIdentifier = newValue }
        }
        /// The owner.
        public var ownerIdentity: UserIdentity {
            get { box.fields.ownerIdentity }
            set { box.fields.ownerIdentity = newValue }
        }
        /// The root record's id for a hierarchy share; `nil` for a zone-wide share.
        public var hierarchicalRootRecordID: RecordID? {
            get { box.fields.hierarchicalRootRecordID }
            set { box.fields.hierarchicalRootRecordID = newValue }
        }
        /// The root record, when it was asked for (`shouldFetchRootRecord`) and the share is a
        /// hierarchy share; limited to the desired keys.
        public var rootRecord: Record? {
            get { box.fields.rootRecord }
            set { box.fields.rootRecord = newValue }
        }
        /// The fetching user's role; ``Participant/Role/publicUser`` for a prospective member of a public share.
        public var participantRole: Participant.Role {
            get { box.fields.participantRole }
            set { box.fields.participantRole = newValue }
        }
        /// The fetching user's status; ``Participant/AcceptanceStatus/pending`` means "accept to join".
        public var participantStatus: Participant.AcceptanceStatus {
            get { box.fields.participantStatus }
            set { box.fields.participantStatus = newValue }
        }
        /// The fetching user's permission.
        public var participantPermission: Participant.Permission {
            get { box.fields.participantPermission }
            set { box.fields.participantPermission = newValue }
        }
        /// The one-time URL's token when the metadata was fetched through an unused one-time URL by a
        /// user who is not a participant yet: accepting this metadata uses that URL up.
        package var oneTimeToken: String? {
            get { box.fields.oneTimeToken }
            set { box.fields.oneTimeToken = newValue }
        }

        /// Hashes the share's token and change tag and the viewer's place in it: enough to tell
        /// metadatas apart (equal ones hash alike), without hashing every participant and the root
        /// record, which made keying the answers of `Container.accept(_:)->[Share.Metadata:Result<Share,LedgerError>]` by metadata costly.
        public func hash(into hasher: inout Hasher) {
            hasher.combine(share.token)
            hasher.combine(share.recordChangeTag)
            hasher.combine(containerIdentifier)
            hasher.combine(participantRole)
            hasher.combine(participantStatus)
            hasher.combine(participantPermission)
        }

        /// Deprecated in CloudKit (iOS 16): the same as ``hierarchicalRootRecordID``.
        public var rootRecordID: RecordID? { hierarchicalRootRecordID }
        /// Deprecated in CloudKit (iOS 12): the type derived from ``participantRole``.
        public var participantType: Participant.ParticipantType {
            switch participantRole {
            case .owner: return .owner
            case .administrator, .privateUser: return .privateUser
            case .publicUser: return .publicUser
            case .unknown: return .unknown
            }
        }

        /// Makes the value from its fields.
        package init(
            share: Share, containerIdentifier: String, ownerIdentity: UserIdentity, hierarchicalRootRecordID: RecordID?,
            rootRecord: Record?, participantRole: Participant.Role, participantStatus: Participant.AcceptanceStatus,
            participantPermission: Participant.Permission, oneTimeToken: String? = nil
        ) {
            box = CopyOnWrite(
                MetadataFields(
                    share: share, containerIdentifier: containerIdentifier, ownerIdentity: ownerIdentity,
                    hierarchicalRootRecordID: hierarchicalRootRecordID, rootRecord: rootRecord, participantRole: participantRole,
                    participantStatus: participantStatus, participantPermission: participantPermission, oneTimeToken: oneTimeToken))
        }
    }

    /// Makes the value from its fields.
    package init(
        recordID: RecordID, containerIdentifier: String, url: URL, token: ShareToken, title: String?,
        publicPermission: Participant.Permission, participants: [Participant], owner: Participant,
        currentUserParticipant: Participant?, hierarchicalRootRecordID: RecordID?, recordChangeTag: String, creationDate: Date,
        allowsAccessRequests: Bool = false, requesters: [AccessRequester] = [], blockedIdentities: [BlockedIdentity] = [],
        oneTimeURLs: [OneTimeURL] = []
    ) {
        box = CopyOnWrite(
            Fields(
                recordID: recordID, containerIdentifier: containerIdentifier, url: url, token: token, title: title, publicPermission: publicPermission, participants: participants, owner: owner, currentUserParticipant: currentUserParticipant, hierarchicalRootRecordID: hierarchicalRootRecordID, recordChangeTag: recordChangeTag, creationDate: creationDate, allowsAccessRequests: allowsAccessRequests, requesters: requesters, blockedIdentities: blockedIdentities, oneTimeURLs: oneTimeURLs))
    }
}

extension Share: CustomReflectable {
    /// The fields, as a struct of them: a share prints and dumps as it did when they were stored inline.
    public var customMirror: Mirror { Mirror(self, children: Mirror(reflecting: box.fields).children, displayStyle: .struct) }
}

extension Share.Metadata: CustomReflectable {
    /// The fields, as a struct of them: a metadata prints and dumps as it did when they were stored
    /// inline.
    public var customMirror: Mirror { Mirror(self, children: Mirror(reflecting: box.fields).children, displayStyle: .struct) }
}

extension Share.Participant: CustomReflectable {
    /// The fields, as a struct of them: a participant prints and dumps as it did when they were
    /// stored inline.
    public var customMirror: Mirror { Mirror(self, children: Mirror(reflecting: box.fields).children, displayStyle: .struct) }
}

/// A record zone in a user's private database (CloudKit's `CKRecordZone`).
public struct RecordZone: Sendable, Hashable {
    /// The zone's id.
    public var zoneID: RecordZoneID
    /// What the zone supports.
    public var capabilities: Capabilities
    /// The zone-wide share of the zone, if it has one.
    public var share: RecordID?

    /// Makes a zone value to save; new custom zones get every capability by default.
    public init(zoneID: RecordZoneID, capabilities: Capabilities = [.fetchChanges, .atomic, .sharing, .zoneWideSharing]) {
        self.zoneID = zoneID
        self.capabilities = capabilities
        self.share = nil
    }

    /// A zone's capabilities (CloudKit's `CKRecordZone.Capabilities`, same bits).
    public struct Capabilities: OptionSet, Sendable, Hashable, Codable {
        /// The bits.
        public let rawValue: UInt32
        /// Makes capabilities from bits.
        public init(rawValue: UInt32) { self.rawValue = rawValue }

        /// Changes can be fetched incrementally.
        public static let fetchChanges = Capabilities(rawValue: 1)
        /// Batches are atomic.
        public static let atomic = Capabilities(rawValue: 2)
        /// Hierarchies in the zone can be shared.
        public static let sharing = Capabilities(rawValue: 4)
        /// The zone as a whole can be shared.
        public static let zoneWideSharing = Capabilities(rawValue: 8)
    }
}
