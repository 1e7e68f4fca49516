import EventLog
import Foundation
import SwiftProtobuf

/// Access requests and blocked identities (CloudKit's `CKShare.allowsAccessRequests`, `requesters`,
/// `denyRequesters(_:)`, `blockRequesters(_:)`, `unblockIdentities(_:)`, `blockedIdentities` and
/// `CKShareRequestAccessOperation`).
///
/// Privacy: a request to a share that does not allow access requests, or by a blocked identity, gets
/// exactly the answer of an unknown URL (``Decider/shareNotFound``), and is not logged, as a request
/// for an unknown URL is not.
extension Decider {
    /// The most pending access requests one share keeps; past it, a request is refused with
    /// `limitExceeded` until the owner or an administrator answers some.
    package static let maxPendingAccessRequests = 200

    /// The actor is blocked from share `token`: the answer of an unknown URL, which tells them nothing.
    package func refuseBlocked(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String) throws {
        if try models.hasAccessEntry(txn, token, .blocked, user: actor) {
            throw LedgerError(.unknownItem, Decider.shareNotFound)
        }
    }

    package func setAllowsAccessRequests(_ txn: borrowing some ReadModelStore & ~Copyable, token: String, allowed: Bool, tag: String?)
        throws -> Decision
    {
        try requireSignedIn(txn)
        let share = try liveShare(txn, token)
        try requireManager(txn, share, token)
        try checkTag(share, tag)
        guard share.allowsAccessRequests != allowed else { return .output(shareOutput(token)) }
        var e = Shareledger_Events_V1_AccessRequestsAllowedChanged()
        e.token = token
        e.allowed = allowed
        return .output([event(Streams.share(token), .accessRequestsAllowedChanged(e))], shareOutput(token))
    }

    /// A signed-in user asks to join the share at `tokenText`. Unknown URL, a share that does not allow
    /// access requests, a blocked caller, a share of another container: all the same `unknownItem`.
    /// A pending invitee gets `participantAlreadyInvited`; an accepted participant, the owner, or a caller
    /// who asked already succeeds with nothing new.
    package func requestAccess(_ txn: borrowing some ReadModelStore & ~Copyable, tokenText: String) throws -> Decision {
        guard signedIn, try models.userExists(txn, container, actor) else {
            throw LedgerError(.notAuthenticated, "requesting access needs a signed-in user; register the user and act as them")
        }
        let share = try liveShare(txn, tokenText)
        if let entry = try activeEntry(txn, share, tokenText) {
            // CloudKit's participantAlreadyInvited (37): accept the invitation you have instead.
            if entry.state.status == .statusPending && entry.state.role != .owner {
                throw LedgerError(
                    .participantAlreadyInvited, "you are invited to this share already: fetch its metadata and accept "
                        + "that invitation instead of asking to join")
            }
            return .output(.none)
        }
        guard share.allowsAccessRequests else { throw LedgerError(.unknownItem, Decider.shareNotFound) }
        try refuseBlocked(txn, tokenText)
        if try models.hasAccessEntry(txn, tokenText, .request, user: actor) { return .output(.none) }
        let pending = try models.scan(
            txn, models.access, prefix: Array(tokenText.utf8) + [ReadModels.AccessKind.request.rawValue],
            limit: Decider.maxPendingAccessRequests)
        guard pending.count < Decider.maxPendingAccessRequests else {
            throw LedgerError(
                .limitExceeded, "the share has \(Decider.maxPendingAccessRequests) pending access requests, the most it "
                    + "keeps; ask again after its owner has answered some")
        }
        var e = Shareledger_Events_V1_AccessRequested()
        e.token = tokenText
        e.userRecordName = actor
        return .output([event(Streams.share(tokenText), .accessRequested(e))], .none)
    }

    /// The user's pending request, or `unknownItem` (never requested, withdrawn by an invitation or a
    /// block, denied, or approved already).
    package func requirePendingRequest(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String, user: String) throws {
        guard try models.hasAccessEntry(txn, token, .request, user: user) else {
            throw LedgerError(
                .unknownItem, "user \(user) has no pending access request to this share (it was answered already, or "
                    + "never made); fetch the share for its current requesters, or invite the user with addParticipant")
        }
    }

    /// Approves a pending request: invites the requester by account, as CloudKit's owner does by adding
    /// the requester's participant; the invitation is marked `approved_requester`.
    package func approveRequester(
        _ txn: borrowing some ReadModelStore & ~Copyable, token: String, user: String, permission: Share.Participant.Permission,
        newID: String
    ) throws -> Decision {
        try requireSignedIn(txn)
        let share = try liveShare(txn, token)
        try requireManager(txn, share, token)
        try requirePendingRequest(txn, token, user: user)
        return try addParticipant(
            txn, token: token, lookup: LookupInfo(userRecordID: RecordID(userRecordName: user)), role: .privateUser,
            permission: permission, newID: newID, tag: nil)
    }

    package func denyRequester(_ txn: borrowing some ReadModelStore & ~Copyable, token: String, user: String) throws -> Decision {
        try requireSignedIn(txn)
        let share = try liveShare(txn, token)
        try requireManager(txn, share, token)
        try requirePendingRequest(txn, token, user: user)
        var e = Shareledger_Events_V1_AccessRequestDenied()
        e.token = token
        e.userRecordName = user
        return .output([event(Streams.share(token), .accessRequestDenied(e))], shareOutput(token))
    }

    /// Blocks a user of the container: drops their request, removes them if they are a participant,
    /// and refuses their later requests, fetches and joins. Blocking a blocked identity changes nothing.
    package func blockIdentity(_ txn: borrowing some ReadModelStore & ~Copyable, token: String, user: String) throws -> Decision {
        try requireSignedIn(txn)
        let share = try liveShare(txn, token)
        try requireManager(txn, share, token)
        try checkBlockable(txn, share, user: user)
        if try models.hasAccessEntry(txn, token, .blocked, user: user) { return .output(shareOutput(token)) }
        var events: [PendingEvent] = []
        if let entry = try models.participant(txn, of: user, in: share, token: token), entry.state.status != .statusRemoved {
            var removed = Shareledger_Events_V1_ParticipantRemoved()
            removed.token = token
            removed.participantID = entry.id
            removed.reason = .blocked
            events.append(event(Streams.share(token), .participantRemoved(removed)))
        }
        var e = Shareledger_Events_V1_IdentityBlocked()
        e.token = token
        e.userRecordName = user
        events.append(event(Streams.share(token), .identityBlocked(e)))
        return .output(events, shareOutput(token))
    }

    /// Who may be blocked: a registered user of the share's container other than its owner. Shared
    /// with the ``EventValidator``.
    package func checkBlockable(_ txn: borrowing some ReadModelStore & ~Copyable, _ share: ShareState, user: String) throws {
        guard try models.userExists(txn, container, user) else {
            throw LedgerError(
                .unknownItem, "no user with that user record name is registered in container \(container); only accounts "
                    + "can be blocked")
        }
        guard user != share.ownerName else {
            throw LedgerError(.invalidArguments, "the owner of a share cannot be blocked from it")
        }
    }

    package func unblockIdentity(_ txn: borrowing some ReadModelStore & ~Copyable, token: String, user: String) throws -> Decision {
        try requireSignedIn(txn)
        let share = try liveShare(txn, token)
        try requireManager(txn, share, token)
        guard try models.hasAccessEntry(txn, token, .blocked, user: user) else {
            throw LedgerError(
                .unknownItem, "user \(user) is not blocked from this share; fetch the share for its blocked identities")
        }
        var e = Shareledger_Events_V1_IdentityUnblocked()
        e.token = token
        e.userRecordName = user
        return .output([event(Streams.share(token), .identityUnblocked(e))], shareOutput(token))
    }
}
