import ByteKeys
import EventLog
import Foundation
import SwiftProtobuf

/// Decides domain steps: checks every rule of CloudKit's sharing model against the read models and
/// returns the events to append, or the error of a refused step. It writes nothing: the writer
/// appends the events and the ``Projector`` applies them.
///
/// Errors it returns are ``LedgerError`` values (the step is refused, nothing is written for it);
/// anything else it throws is a storage failure that aborts the whole transaction.
package struct Decider {
    package let models: ReadModels
    /// The container the command runs in.
    package let container: String
    /// The acting user's record name.
    package let actor: String
    /// Whether the actor is signed in (has an account in the container).
    package let signedIn: Bool
    /// The time of the commit, in microseconds.
    package let now: Int64

    package static let shareNotFound = "Share not found: the URL is unknown, or its share was deleted, or it is not shared with you"
    /// The answer about a record in another user's zone that the caller may not see, whether it
    /// exists or not: the same text either way, so that it tells nothing.
    package static let recordNotShared = "the record does not exist, or is not shared with you"

    // MARK: - Limits

    package enum Limits {
        package static let maxContainerBytes = 128
        package static let maxUserNameBytes = 64
        package static let maxZoneNameBytes = 120
        package static let maxRecordNameBytes = 255
        package static let maxRecordTypeBytes = 255
        package static let maxFieldKeyBytes = 255
        package static let maxTitleBytes = 512
        package static let maxParticipants = 100
        package static let maxLookupBytes = 254
    }

    package static func checkUserName(_ name: String) throws(LedgerError) {
        let bytes = name.utf8
        guard !bytes.isEmpty, bytes.count <= Limits.maxUserNameBytes,
            bytes.allBytes({ b in
                (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F || b == 0x2E
                    || b == 0x2D || b == 0x40 || b == 0x2B
            })
        else {
            throw LedgerError(
                .invalidArguments, "\"\(name.prefix(80))\" is not a valid user record name: use 1 to "
                    + "\(Limits.maxUserNameBytes) characters of A-Z a-z 0-9 _ . - @ +")
        }
    }

    package static func checkName(_ name: String, _ what: String, max: Int) throws(LedgerError) {
        let count = name.utf8.count
        guard count > 0, count <= max, !name.utf8.containsByte(0) else {
            throw LedgerError(
                .invalidArguments, "the \(what) \"\(name.prefix(80))\" is not valid: it must have 1 to \(max) bytes and no NUL")
        }
    }

    package static func checkContainer(_ container: String) throws(LedgerError) {
        try checkName(container, "container identifier", max: Limits.maxContainerBytes)
    }

    // MARK: - Entry point

    package func decide(_ action: DomainAction, _ txn: borrowing some ReadModelStore & ~Copyable) throws -> Decision {
        do {
            switch action {
            case .registerUser(let name, let email, let phone, let names):
                return try registerUser(txn, name: name, email: email, phone: phone, names: names)
            case .saveZone(let id, let capabilities):
                return try saveZone(txn, id, capabilities: capabilities)
            case .deleteZone(let id):
                return try deleteZone(txn, id)
            case .saveRecord(let record):
                return try saveRecord(txn, record)
            case .saveRecordWithPolicy(let record, let policy):
                return try saveRecord(txn, record, policy: policy)
            case .deleteRecord(let id):
                return try deleteRecord(txn, id)
            case .deleteRecordIfUnchanged(let id, let tag):
                return try deleteRecord(txn, id, ifChangeTag: tag)
            case .createShare(let creation):
                return try createShare(txn, creation)
            case .addParticipant(let token, let lookup, let role, let permission, let newID, let tag):
                return try addParticipant(
                    txn, token: token, lookup: lookup, role: role, permission: permission, newID: newID, tag: tag)
            case .updateParticipant(let token, let id, let role, let permission, let tag):
                return try updateParticipant(txn, token: token, id: id, role: role, permission: permission, tag: tag)
            case .removeParticipant(let token, let id, let tag):
                return try removeParticipant(txn, token: token, id: id, tag: tag)
            case .leaveShare(let token):
                return try leaveShare(txn, token: token)
            case .setPublicPermission(let token, let permission, let tag):
                return try setPublicPermission(txn, token: token, permission: permission, tag: tag)
            case .setTitle(let token, let title, let tag):
                return try setTitle(txn, token: token, title: title, tag: tag)
            case .deleteShare(let token, let tag):
                return try deleteShare(txn, token: token, tag: tag)
            case .fetchMetadata(let text, let fetchRoot, let keys):
                return try fetchMetadata(txn, tokenText: text, fetchRoot: fetchRoot, keys: keys)
            case .accept(let token, let metadataContainer, let newID):
                return try accept(txn, token: token, metadataContainer: metadataContainer, newID: newID)
            case .requestVerification(let token, let lookup, let hash, let expires):
                return try requestVerification(txn, token: token, lookup: lookup, hash: hash, expires: expires)
            case .verify(let token, let hash):
                return try verify(txn, token: token, hash: hash)
            case .lookupParticipant(let lookup):
                return try lookupParticipant(txn, lookup)
            case .completeTask(let id):
                return try completeTask(txn, id: id)
            case .setAllowsAccessRequests(let token, let allowed, let tag):
                return try setAllowsAccessRequests(txn, token: token, allowed: allowed, tag: tag)
            case .requestAccess(let text):
                return try requestAccess(txn, tokenText: text)
            case .approveRequester(let token, let user, let permission, let newID):
                return try approveRequester(txn, token: token, user: user, permission: permission, newID: newID)
            case .denyRequester(let token, let user):
                return try denyRequester(txn, token: token, user: user)
            case .blockIdentity(let token, let user):
                return try blockIdentity(txn, token: token, user: user)
            case .unblockIdentity(let token, let user):
                return try unblockIdentity(txn, token: token, user: user)
            case .addOneTimeParticipant(let token, let role, let permission, let newID, let oneTime, let tag):
                return try addOneTimeParticipant(
                    txn, token: token, role: role, permission: permission, newID: newID, oneTimeToken: oneTime, tag: tag)
            case .acceptOneTimeURL(let oneTime, let token, let metadataContainer):
                return try acceptOneTimeURL(txn, oneTimeToken: oneTime, token: token, metadataContainer: metadataContainer)
            case .forgetUser(let name):
                return try forgetUser(txn, name: name)
            case .forgetAddress(let lookup):
                return try forgetAddress(txn, lookup)
            }
        } catch let error as LedgerError {
            return Decision(events: [], outcome: .failed(error))
        }
    }

    // MARK: - Helpers

    package func requireSignedIn(_ txn: borrowing some ReadModelStore & ~Copyable) throws {
        guard signedIn, try models.userExists(txn, container, actor) else {
            throw LedgerError(
                .notAuthenticated, "no signed-in user: register the user in container \(container) and act as that user")
        }
    }

    /// The zone owner a caller means: `__defaultOwner__` is the caller.
    package func owner(of zoneID: RecordZoneID) -> String {
        zoneID.ownerName == RecordZoneID.defaultOwnerName ? actor : zoneID.ownerName
    }

    package func liveShare(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String) throws -> ShareState {
        guard ShareToken(token) != nil, let share = try models.share(txn, token), share.container == container else {
            throw LedgerError(.unknownItem, Decider.shareNotFound)
        }
        return share
    }

    package func checkTag(_ share: ShareState, _ tag: String?) throws {
        if let tag, tag != String(share.changeTag) {
            throw LedgerError(
                .serverRecordChanged, "the share changed since you read it (change tag \(tag), now \(share.changeTag)); "
                    + "fetch it again and redo your change")
        }
    }

    /// The actor's entry in the share, if not removed.
    package func activeEntry(_ txn: borrowing some ReadModelStore & ~Copyable, _ share: ShareState, _ token: String) throws
        -> (id: String, state: ParticipantState)?
    {
        try activeEntryOf(txn, share, token, user: actor)
    }

    /// `user`'s entry in the share, if not removed.
    package func activeEntryOf(_ txn: borrowing some ReadModelStore & ~Copyable, _ share: ShareState, _ token: String, user: String) throws
        -> (id: String, state: ParticipantState)?
    {
        guard let entry = try models.participant(txn, of: user, in: share, token: token),
            entry.state.status != .statusRemoved
        else { return nil }
        return entry
    }

    /// The actor must be the owner or an accepted administrator. Non-participants learn nothing.
    package func requireManager(_ txn: borrowing some ReadModelStore & ~Copyable, _ share: ShareState, _ token: String, ownerOnly: Bool = false)
        throws
    {
        guard let entry = try activeEntry(txn, share, token) else {
            throw LedgerError(.unknownItem, Decider.shareNotFound)
        }
        let isOwner = entry.state.role == .owner
        let isAdmin = entry.state.role == .administrator && entry.state.status == .statusAccepted
        guard isOwner || (!ownerOnly && isAdmin) else {
            throw LedgerError(
                .permissionFailure, ownerOnly
                    ? "only the share's owner may do this"
                    : "only the share's owner or an administrator may change its participants")
        }
    }

    /// A share's title fits the limit (a new share's, or a changed one).
    package static func checkTitle(_ title: String) throws(LedgerError) {
        guard title.utf8.count <= Limits.maxTitleBytes else {
            throw LedgerError(.invalidArguments, "the title is longer than \(Limits.maxTitleBytes) bytes")
        }
    }

    /// An invited participant's role: privateUser or administrator (public users join by URL, the
    /// owner is there from the start).
    package static func checkInvitedRole(_ role: PBRole) throws(LedgerError) {
        guard role == .privateUser || role == .administrator else {
            throw LedgerError(
                .invalidArguments, "an invited participant's role is privateUser or administrator (public users join by URL)")
        }
    }

    /// An invited participant's permission: readOnly or readWrite.
    package static func checkInvitedPermission(_ permission: PBPermission) throws(LedgerError) {
        guard permission == .readOnly || permission == .readWrite else {
            throw LedgerError(.invalidArguments, "an invited participant's permission is readOnly or readWrite")
        }
    }

    /// Whether anyone with the URL may join: only for the two permissions that grant something. An
    /// unknown value in a stored share (a damaged row, a forged import) keeps the share private.
    package static func isPublic(_ permission: PBPermission) -> Bool {
        permission == .readOnly || permission == .readWrite
    }

    package func shareOutput(_ token: String) -> StepAnswer { .share(token: token) }

    package func event(_ stream: String, _ event: DomainEvent) -> PendingEvent { PendingEvent(stream: stream, event: event) }

    /// Makes the value from its fields.
    package init(models: ReadModels, container: String, actor: String, signedIn: Bool, now: Int64) {
        self.models = models
        self.container = container
        self.actor = actor
        self.signedIn = signedIn
        self.now = now
    }
}
