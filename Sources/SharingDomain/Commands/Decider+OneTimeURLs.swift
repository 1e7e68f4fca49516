import EventLog
import Foundation
import SwiftProtobuf

/// One-time URL participants (CloudKit's `CKShare.Participant.oneTimeURLParticipant()` and
/// `CKShare.oneTimeURL(for:)`): an invitation without an email address, phone number or account,
/// reached by a URL of its own that the first signed-in user to accept through it takes. The URL
/// stays tied to its participant while the participant is in the share; once taken, it answers as
/// the share's URL to the share's owner and participants, and as an unknown URL to anyone else.
extension Decider {
    package func addOneTimeParticipant(
        _ txn: borrowing some ReadModelStore & ~Copyable, token: String, role: Share.Participant.Role,
        permission: Share.Participant.Permission, newID: String, oneTimeToken: String, tag: String?
    ) throws -> Decision {
        let share = try invitableShare(txn, token, tag: tag)
        guard role == .privateUser || role == .administrator, permission == .readOnly || permission == .readWrite else {
            throw LedgerError(
                .invalidArguments, "a one-time URL participant is a privateUser or administrator with readOnly or readWrite permission")
        }
        guard share.activeParticipantCount < Limits.maxParticipants else {
            throw LedgerError(
                .tooManyParticipants, "the share has \(share.activeParticipantCount) participants; the limit is "
                    + "\(Limits.maxParticipants). Remove some first")
        }
        try checkNewOneTimeToken(txn, oneTimeToken)
        var e = Shareledger_Events_V1_ParticipantAdded()
        e.token = token
        e.participantID = newID
        e.role = PBRole(role)
        e.permission = PBPermission(permission)
        e.oneTimeToken = oneTimeToken
        return .output([event(Streams.share(token), .participantAdded(e))], shareOutput(token))
    }

    /// A one-time URL's token must be a token no share and no other one-time URL has. Shared with
    /// the ``EventValidator``.
    package func checkNewOneTimeToken(_ txn: borrowing some ReadModelStore & ~Copyable, _ oneTimeToken: String) throws {
        guard ShareToken(oneTimeToken) != nil, try models.share(txn, oneTimeToken) == nil,
            try models.oneTimeURL(txn, oneTimeToken) == nil
        else { throw LedgerError(.serverRejectedRequest, "the one-time URL's token is in use; try again") }
    }

    /// The unused one-time URL participant a one-time URL's token names: (share token, participant id).
    package func oneTimeParticipant(_ txn: borrowing some ReadModelStore & ~Copyable, _ oneTimeToken: String) throws
        -> (token: String, id: String, state: ParticipantState)?
    {
        guard let (token, id) = try models.oneTimeURL(txn, oneTimeToken),
            let state = try models.participant(txn, token, id), state.status == .statusPending, state.userRecordName.isEmpty,
            state.oneTimeToken == oneTimeToken
        else { return nil }
        return (token, id, state)
    }

    /// Accepts through a one-time URL: the caller becomes its participant. Once taken (or withdrawn),
    /// the URL answers as an unknown one, except to an accepted participant of the share `token` (the
    /// metadata's), for whom accepting again is a success with nothing new. A caller who is a
    /// participant already stays what they are, and the URL stays unused.
    package func acceptOneTimeURL(
        _ txn: borrowing some ReadModelStore & ~Copyable, oneTimeToken: String, token metadataToken: String,
        metadataContainer: String
    ) throws -> Decision {
        try requireSignedIn(txn)
        guard metadataContainer == container else {
            throw LedgerError(
                .badContainer, "this share belongs to container \(metadataContainer); accept it in that container, "
                    + "not in \(container)")
        }
        guard let (token, id, _) = try oneTimeParticipant(txn, oneTimeToken) else {
            // Used up: by this caller (accepting twice succeeds), or by someone else (nothing to tell).
            let share = try liveShare(txn, metadataToken)
            guard try activeEntry(txn, share, metadataToken)?.state.status == .statusAccepted else {
                throw LedgerError(.unknownItem, Decider.shareNotFound)
            }
            return .output(shareOutput(metadataToken))
        }
        let share = try liveShare(txn, token)
        try refuseBlocked(txn, token)
        if try activeEntry(txn, share, token) != nil { return .output(shareOutput(token)) }
        var e = Shareledger_Events_V1_ShareAccepted()
        e.token = token
        e.participantID = id
        e.userRecordName = actor
        return .output([event(Streams.share(token), .shareAccepted(e))], shareOutput(token))
    }
}
