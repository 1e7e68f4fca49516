import EventLog
import Foundation
import SwiftProtobuf

/// Share metadata and accepting a share.
extension Decider {
    // MARK: - Metadata

    /// What the caller is to the share: the role, status and permission the metadata reports.
    package enum Standing {
        case participant(role: PBRole, status: PBStatus, permission: PBPermission)
        case prospectivePublicUser(PBPermission)

        /// The role, status and permission the metadata reports.
        package var reported: (PBRole, PBStatus, PBPermission) {
            switch self {
            case .participant(let role, let status, let permission): return (role, status, permission)
            case .prospectivePublicUser(let permission): return (.publicUser, .statusPending, permission)
            }
        }
    }

    /// How the share looks to the caller, or the error CloudKit gives. `oneTime` is the unused one-time
    /// URL participant the caller presented the URL of, if they came by one; `membersOnly` says the
    /// caller came by a used one-time URL, which answers as the share's URL to the share's owner and
    /// participants and as an unknown URL to anyone else.
    package func standing(
        _ txn: borrowing some ReadModelStore & ~Copyable, _ share: ShareState, token: String, oneTime: ParticipantState? = nil,
        membersOnly: Bool = false
    ) throws -> Standing {
        // User record names are per container (as in CloudKit): the caller is a participant only when
        // fetching in the share's own container. From another container, the same name is nobody
        // the share knows.
        let sameContainer = share.container == container
        // A blocked identity learns nothing: the answer of an unknown URL.
        if sameContainer { try refuseBlocked(txn, token) }
        if sameContainer, let entry = try models.participant(txn, of: actor, in: share, token: token),
            entry.state.status != .statusRemoved
        {
            return .participant(role: entry.state.role, status: entry.state.status, permission: entry.state.permission)
        }
        // A one-time URL was handed to one person: whoever else holds it learns nothing, even of a public share.
        if membersOnly { throw LedgerError(.unknownItem, Decider.shareNotFound) }
        if let oneTime {
            // The holder of a one-time URL is offered that invitation, in the share's own container only.
            guard sameContainer else { throw LedgerError(.unknownItem, Decider.shareNotFound) }
            return .participant(role: oneTime.role, status: .statusPending, permission: oneTime.permission)
        }
        if Decider.isPublic(share.publicPermission) {
            return .prospectivePublicUser(share.publicPermission)
        }
        // Verification is offered only in the share's own container, where an invitation can be claimed.
        if sameContainer, share.unmatchedPendingCount > 0 {
            throw LedgerError(
                .participantMayNeedVerification, "you are not a participant of this share yet, but it has invitations "
                    + "to email addresses or phone numbers not tied to an account: if one was sent to you, verify it "
                    + "(requestParticipantVerification) and fetch again")
        }
        throw LedgerError(.unknownItem, Decider.shareNotFound)
    }

    /// Decides a logged fetch: the event records who asked, for what, and what the metadata said of
    /// them (or the error); the metadata itself is built after the commit
    /// (``StepAnswer/metadata(token:fetchRoot:keys:)``), so the writer reads only the caller's
    /// account, the share's row and the caller's participant entry.
    package func fetchMetadata(_ txn: borrowing some ReadModelStore & ~Copyable, tokenText: String, fetchRoot: Bool, keys: [String]?) throws
        -> Decision
    {
        var e = Shareledger_Events_V1_ShareMetadataFetched()
        // At most 64 characters of what the caller sent (a string of at most 64 bytes is kept as it is).
        e.token = tokenText.utf8.count <= 64 ? tokenText : String(tokenText.prefix(64))
        let stream = signedIn ? Streams.user(actor) : Streams.anonymous
        func failed(_ error: LedgerError) -> Decision {
            e.errorCode = Int32(error.code.rawValue)
            return Decision(events: [event(stream, .shareMetadataFetched(e))], outcome: .failed(error))
        }
        let share: ShareState
        let standing: Standing
        let found: (share: ShareState, token: String, oneTime: ParticipantState?, membersOnly: Bool)
        do {
            found = try fetchableShare(txn, tokenText: tokenText)
            share = found.share
            // Known from here on, failed or not: the fetch is part of the share's history.
            e.shareContainer = share.container
            standing = try self.standing(txn, share, token: found.token, oneTime: found.oneTime, membersOnly: found.membersOnly)
        } catch let error as LedgerError {
            return failed(error)
        }
        let (role, status, permission) = standing.reported
        if fetchRoot, !share.rootRecordName.isEmpty, try models.record(txn, zoneID: share.zoneID, share.rootRecordName) != nil {
            e.rootRecordFetched = true
        }
        e.participantRole = role
        e.participantStatus = status
        e.participantPermission = permission
        // What ``metadataStanding(_:tokenText:)`` gives in this transaction (a one-time URL's answer
        // also looks at its entry: left to the answer).
        let decided =
            found.oneTime == nil
            ? MetadataStanding(
                share: share, token: found.token, viewer: share.container == container ? actor : nil, role: role.role,
                status: status.status, permission: permission.permission, oneTimeToken: nil) : nil
        return .output(
            [event(stream, .shareMetadataFetched(e))], .metadata(token: tokenText, fetchRoot: fetchRoot, keys: keys, standing: decided))
    }

    /// The share at `tokenText` (a share's token, or a one-time URL's: with its participant while the
    /// URL is unused; `membersOnly` once its participant accepted through it, when it answers as the
    /// share's URL to those in the share only), or the error a fetch of its metadata gives before
    /// looking at the caller's standing: no account, an unknown (or withdrawn) URL.
    private func fetchableShare(_ txn: borrowing some ReadModelStore & ~Copyable, tokenText: String) throws
        -> (share: ShareState, token: String, oneTime: ParticipantState?, membersOnly: Bool)
    {
        guard signedIn, try models.userExists(txn, container, actor) else {
            throw LedgerError(.notAuthenticated, "fetching share metadata needs a signed-in user; register the user and act as them")
        }
        guard ShareToken(tokenText) != nil else { throw LedgerError(.unknownItem, Decider.shareNotFound) }
        if let share = try models.share(txn, tokenText) { return (share, tokenText, nil, false) }
        if let (token, _, participant) = try oneTimeParticipant(txn, tokenText), let share = try models.share(txn, token) {
            return (share, token, participant, false)
        }
        guard let (token, _) = try models.oneTimeURL(txn, tokenText), let share = try models.share(txn, token) else {
            throw LedgerError(.unknownItem, Decider.shareNotFound)
        }
        return (share, token, nil, true)
    }

    /// What the caller may see of the share at `tokenText` in `txn` (the same rules and errors as a
    /// fetch, nothing logged): the standing the metadata reports. The facade's presenter builds the
    /// metadata from it, for the answer of a logged fetch (after its commit) and for
    /// `Container.shareMetadataWithoutLogging(for:)`.
    package func metadataStanding(_ txn: borrowing some ReadModelStore & ~Copyable, tokenText: String) throws -> MetadataStanding {
        let (share, token, oneTime, membersOnly) = try fetchableShare(txn, tokenText: tokenText)
        let (role, status, permission) = try self.standing(
            txn, share, token: token, oneTime: oneTime, membersOnly: membersOnly).reported
        return MetadataStanding(
            share: share, token: token, viewer: share.container == container ? actor : nil, role: role.role,
            status: status.status, permission: permission.permission,
            oneTimeToken: oneTime == nil ? nil : try activeEntry(txn, share, token) == nil ? tokenText : nil)
    }

    // MARK: - Accepting

    package func accept(_ txn: borrowing some ReadModelStore & ~Copyable, token: String, metadataContainer: String, newID: String) throws
        -> Decision
    {
        try requireSignedIn(txn)
        guard metadataContainer == container else {
            throw LedgerError(
                .badContainer, "this share belongs to container \(metadataContainer); accept it in that container, "
                    + "not in \(container)")
        }
        let share = try liveShare(txn, token)
        try refuseBlocked(txn, token)
        let entry = try models.participant(txn, of: actor, in: share, token: token)
        if let entry, entry.state.role == .owner || entry.state.status == .statusAccepted {
            // The owner, or accepted already: success, nothing new.
            return .output(shareOutput(token))
        }
        let isPublic = Decider.isPublic(share.publicPermission)
        if let entry, entry.state.status == .statusPending {
            var e = Shareledger_Events_V1_ShareAccepted()
            e.token = token
            e.participantID = entry.id
            e.userRecordName = actor
            return .output([event(Streams.share(token), .shareAccepted(e))], shareOutput(token))
        }
        guard isPublic else {
            if entry?.state.status == .statusRemoved {
                throw LedgerError(.permissionFailure, "you were removed from this share; the owner must invite you again")
            }
            throw LedgerError(
                .permissionFailure, "you have no invitation to this share (if one went to your email or phone, "
                    + "verify it first)")
        }
        guard share.activeParticipantCount < Limits.maxParticipants else {
            throw LedgerError(.tooManyParticipants, "the share has reached \(Limits.maxParticipants) participants")
        }
        // A public share: join as a public user (again, with the same participant id, after a removal).
        var added = Shareledger_Events_V1_ParticipantAdded()
        added.token = token
        added.participantID = entry?.id ?? newID
        added.userRecordName = actor
        added.lookupInfo.userRecordName = actor
        added.role = .publicUser
        added.permission = share.publicPermission
        var accepted = Shareledger_Events_V1_ShareAccepted()
        accepted.token = token
        accepted.participantID = added.participantID
        accepted.userRecordName = actor
        return .output(
            [event(Streams.share(token), .participantAdded(added)), event(Streams.share(token), .shareAccepted(accepted))],
            shareOutput(token))
    }
}

/// The caller's standing in a share whose metadata it fetches (``Decider/metadataStanding(_:tokenText:)``).
package struct MetadataStanding: Sendable {
    /// The share's row.
    package var share: ShareState
    /// The share's token (a one-time URL's token text names another).
    package var token: String
    /// Who sees the share: the caller in the share's container, nil elsewhere.
    package var viewer: String?
    package var role: Share.Participant.Role
    package var status: Share.Participant.AcceptanceStatus
    package var permission: Share.Participant.Permission
    /// The one-time URL's token, when the caller fetched through one it has not accepted yet.
    package var oneTimeToken: String?
}
