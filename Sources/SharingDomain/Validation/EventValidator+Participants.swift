import EventLog
import Foundation

/// Checking the events about participants: invitations, changes, verification, acceptance, lookups.
extension EventValidator {
    func checkParticipantAdded(
        _ e: Shareledger_Events_V1_ParticipantAdded, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        let actor = d.actor
        try d.requireSignedIn(txn)
        let share = try d.liveShare(txn, e.token)
        let previous = try m.participant(txn, e.token, e.participantID)
        let active = previous.map { $0.status != .statusRemoved } ?? false
        if e.role == .publicUser {
            // Joining a public share by its URL (accept).
            guard e.userRecordName == actor, Decider.isPublic(share.publicPermission), e.permission == share.publicPermission
            else { throw Self.refuse("a public user joins a public share as themselves, with its public permission") }
            if let own = try d.activeEntry(txn, share, e.token) {
                throw Self.refuse("the actor is participant \(own.id) of the share already")
            }
            if let entry = try m.participant(txn, of: actor, in: share, token: e.token), entry.id != e.participantID {
                throw Self.refuse("the actor rejoins with participant id \(entry.id)")
            }
        } else {
            try d.requireManager(txn, share, e.token)
            guard share.publicPermission == .none else {
                throw Self.refuse("participants are invited only to a private share")
            }
            try Decider.checkInvitedRole(e.role)
            try Decider.checkInvitedPermission(e.permission)
            guard e.userRecordName != share.ownerName, previous?.role != .owner else {
                throw Self.refuse("the owner is a participant already")
            }
            if !e.userRecordName.isEmpty, try m.user(txn, d.container, e.userRecordName) == nil {
                throw Self.refuse("there is no user \(e.userRecordName) in the container")
            }
            if let previous, active {
                // Only an invitation not tied to an account is invited again, to bind it to one.
                guard previous.status == .statusPending, previous.userRecordName.isEmpty, !e.userRecordName.isEmpty else {
                    throw Self.refuse("participant \(e.participantID) is in the share already")
                }
            }
        }
        if !e.userRecordName.isEmpty, try m.hasAccessEntry(txn, e.token, .blocked, user: e.userRecordName) {
            throw Self.refuse("user \(e.userRecordName) is blocked from the share")
        }
        try checkSealedLookup(e.sealedLookup, sealed: e.hasSealedLookup, e.lookupInfo)
        if !e.oneTimeToken.isEmpty {
            // A one-time URL participant: a new entry, addressed to nobody, with an unused token.
            guard previous == nil, e.userRecordName.isEmpty, e.lookupInfo.lookupInfo == nil, !e.hasSealedLookup,
                !e.approvedRequester,
                e.role != .publicUser
            else { throw Self.refuse("a one-time URL participant is a new invitation to nobody in particular") }
            try d.checkNewOneTimeToken(txn, e.oneTimeToken)
        }
        if e.approvedRequester {
            guard e.role != .publicUser, !e.userRecordName.isEmpty,
                try m.hasAccessEntry(txn, e.token, .request, user: e.userRecordName)
            else { throw Self.refuse("it approves an access request that user \(e.userRecordName) has not made") }
        }
        if !active, share.activeParticipantCount >= Decider.Limits.maxParticipants {
            throw LedgerError(.tooManyParticipants, "the share has \(share.activeParticipantCount) participants already")
        }
    }

    func checkParticipantUpdated(
        _ e: Shareledger_Events_V1_ParticipantUpdated, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        try d.requireSignedIn(txn)
        let share = try d.liveShare(txn, e.token)
        let target = try activeTarget(txn, e.token, e.participantID)
        if target.role == .publicUser {
            // Public users follow the share's public permission when the owner changes it.
            try d.requireManager(txn, share, e.token, ownerOnly: true)
            guard e.role == .publicUser, e.permission == share.publicPermission else {
                throw Self.refuse("a public user's permission is the share's public permission")
            }
        } else {
            try d.requireManager(txn, share, e.token)
            try Decider.checkInvitedRole(e.role)
            try Decider.checkInvitedPermission(e.permission)
        }
    }

    func checkParticipantRemoved(
        _ e: Shareledger_Events_V1_ParticipantRemoved, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        try d.requireSignedIn(txn)
        let share = try d.liveShare(txn, e.token)
        let target = try activeTarget(txn, e.token, e.participantID)
        switch e.reason {
        case .removed:
            try d.requireManager(txn, share, e.token)
        case .left:
            guard try d.activeEntry(txn, share, e.token)?.id == e.participantID else {
                throw Self.refuse("only the participant themselves leaves")
            }
        case .blocked:
            // Blocking removes the participant; the IdentityBlocked follows in the same command.
            try d.requireManager(txn, share, e.token)
            try d.checkBlockable(txn, share, user: target.userRecordName)
        case .publicPermissionChanged:
            try d.requireManager(txn, share, e.token, ownerOnly: true)
            guard target.status == .statusPending || (target.role == .publicUser && share.publicPermission == .none) else {
                throw Self.refuse("a change of public permission drops only pending participants and, back to none, public users")
            }
        case .UNRECOGNIZED(let value):
            throw Self.refuse("its reason \(value) is unknown")
        }
    }

    func checkVerificationRequested(
        _ e: Shareledger_Events_V1_VerificationRequested, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        _ = try claimable(txn, d, token: e.token, user: e.userRecordName)
        try requireUnmatchedPending(txn, e.token, e.participantID)
    }

    func checkParticipantVerified(
        _ e: Shareledger_Events_V1_ParticipantVerified, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        let actor = d.actor
        _ = try claimable(txn, d, token: e.token, user: e.userRecordName)
        try requireUnmatchedPending(txn, e.token, e.participantID)
        let key = ReadModels.verificationKey(e.token, e.participantID, user: actor)
        guard let request = try m.message(VerificationState.self, txn, m.verifications, key),
            request.expiresAtMicros > d.now
        else { throw Self.refuse("the user has no unexpired verification request for participant \(e.participantID)") }
    }

    func checkShareAccepted(
        _ e: Shareledger_Events_V1_ShareAccepted, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        let actor = d.actor
        try d.requireSignedIn(txn)
        guard e.userRecordName == actor else { throw Self.refuse("a user accepts a share only as themselves") }
        let share = try d.liveShare(txn, e.token)
        try d.refuseBlocked(txn, e.token)
        // The actor's own pending entry: invited (by account, or an invitation they verified), or
        // just joined a public share.
        // Or an unused one-time URL participant, taken by a user who is not in the share yet.
        if try d.activeEntry(txn, share, e.token) == nil, let oneTime = try m.participant(txn, e.token, e.participantID),
            !oneTime.oneTimeToken.isEmpty, try d.oneTimeParticipant(txn, oneTime.oneTimeToken)?.id == e.participantID
        {
            return
        }
        guard let entry = try m.participant(txn, of: actor, in: share, token: e.token), entry.id == e.participantID,
            entry.state.status == .statusPending, entry.state.role != .owner
        else {
            throw LedgerError(
                .permissionFailure, "user \(actor) is not a pending participant (\(e.participantID)) of share \(e.token)")
        }
    }

    func checkShareParticipantFetched(
        _ e: Shareledger_Events_V1_ShareParticipantFetched, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        // A lookup changes no read model either; one that succeeded was made by a signed-in user and
        // found an account of the container, or none.
        try checkSealedLookup(e.sealedLookup, sealed: e.hasSealedLookup, e.lookupInfo)
        guard e.errorCode == 0 else { return }
        try d.requireSignedIn(txn)
        if !e.userRecordName.isEmpty, try m.user(txn, d.container, e.userRecordName) == nil {
            throw Self.refuse("the lookup names user \(e.userRecordName), who is not registered in the container")
        }
    }
}
