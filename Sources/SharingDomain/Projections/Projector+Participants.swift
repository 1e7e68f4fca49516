import EventLog
import Foundation

/// Projecting the events about participants: invitations, changes, verification, acceptance, lookups.
extension Projector {
    func participantAdded(
        _ e: Shareledger_Events_V1_ParticipantAdded, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable,
        share: ShareState?
    ) throws {
        let m = models
        guard var share else { return }
        let key = ReadModels.participantKey(e.token, e.participantID)
        let previous = try m.message(ParticipantState.self, txn, m.participants, key)
        var state = previous ?? ParticipantState()
        state.userRecordName = e.userRecordName
        state.lookupInfo = e.lookupInfo
        // A sealed invitation keeps its box, and its keyed hash apart from it (as a user row does).
        if e.hasSealedLookup {
            var sealed = e.sealedLookup
            (state.emailHash, state.phoneHash) = (sealed.emailHash, sealed.phoneHash)
            (sealed.emailHash, sealed.phoneHash) = (Data(), Data())
            state.sealedLookup = sealed
        } else {
            state.clearSealedLookup()
            (state.emailHash, state.phoneHash) = (Data(), Data())
        }
        state.forgottenAtMicros = 0
        state.role = e.role
        state.permission = e.permission
        state.status = .statusPending
        state.addedAtMicros = context.recordedAtMicros
        state.approvedRequester = e.approvedRequester
        state.oneTimeToken = e.oneTimeToken
        try m.put(txn, m.participants, key, state)
        try indexInvitation(
            share.container, e.token, e.participantID, from: previous?.address, to: state.address, context, txn)
        if !e.oneTimeToken.isEmpty {
            try m.putRaw(txn, m.oneTimeURLs, Array(e.oneTimeToken.utf8), Array((e.token + e.participantID).utf8))
        }
        if !e.userRecordName.isEmpty {
            // An invitation (or a public join) answers the user's pending access request, if any.
            try m.deleteRow(txn, m.access, ReadModels.accessKey(e.token, .request, user: e.userRecordName))
        }
        if let previous, previous.status == .statusPending, previous.userRecordName.isEmpty {
            // An unmatched invitation invited again: it no longer counts as unmatched (it may again below).
            Projector.decrement(&share.unmatchedPendingCount)
        }
        if !e.userRecordName.isEmpty {
            try m.putRaw(
                txn, m.sharesByUser, ReadModels.key(share.container, e.userRecordName, e.token),
                Array(e.participantID.utf8))
        } else if e.oneTimeToken.isEmpty {
            // (A one-time URL participant is not claimed by verification: it does not count.)
            share.unmatchedPendingCount += 1
        }
        if previous == nil || previous?.status == .statusRemoved {
            share.activeParticipantCount += 1
            try m.add(txn, .participants, 1)
        }
        share.changeTag += 1
        try m.put(txn, m.shares, text: e.token, share)
    }

    func participantUpdated(
        _ e: Shareledger_Events_V1_ParticipantUpdated, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable,
        share: ShareState?
    ) throws {
        let m = models
        let key = ReadModels.participantKey(e.token, e.participantID)
        guard var state = try m.message(ParticipantState.self, txn, m.participants, key) else { return }
        state.role = e.role
        state.permission = e.permission
        try m.put(txn, m.participants, key, state)
        try updateShare(share, token: e.token, txn) { _ in }
    }

    func participantRemoved(
        _ e: Shareledger_Events_V1_ParticipantRemoved, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable,
        share: ShareState?
    ) throws {
        let m = models
        guard var share else { return }
        let key = ReadModels.participantKey(e.token, e.participantID)
        guard var state = try m.message(ParticipantState.self, txn, m.participants, key),
            state.status != .statusRemoved
        else { return }
        if state.status == .statusAccepted {
            try m.add(txn, .acceptedParticipants, -1)
            try scheduleZoneTask(
                .removeZone, share: share, token: e.token, user: state.userRecordName,
                id: Projector.taskID(position: context.position, index: 0), context, txn)
        }
        if state.status == .statusPending && state.userRecordName.isEmpty && state.oneTimeToken.isEmpty {
            Projector.decrement(&share.unmatchedPendingCount)
        }
        if !state.oneTimeToken.isEmpty {
            // Removing an unused one-time URL participant withdraws the URL.
            try txn.delete(m.oneTimeURLs, key: Array(state.oneTimeToken.utf8))
            state.oneTimeToken = ""
        }
        state.status = .statusRemoved
        try m.put(txn, m.participants, key, state)
        Projector.decrement(&share.activeParticipantCount)
        share.changeTag += 1
        try m.put(txn, m.shares, text: e.token, share)
        try m.add(txn, .participants, -1)
        try deleteVerifications(token: e.token, participantID: e.participantID, txn)
    }

    func verificationRequested(
        _ e: Shareledger_Events_V1_VerificationRequested, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        var state = VerificationState()
        state.codeSha256 = e.codeSha256
        state.expiresAtMicros = e.expiresAtMicros
        try m.put(
            txn, m.verifications,
            ReadModels.verificationKey(e.token, e.participantID, user: e.userRecordName), state)
    }

    func participantVerified(
        _ e: Shareledger_Events_V1_ParticipantVerified, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable,
        share: ShareState?
    ) throws {
        let m = models
        guard var share else { return }
        let key = ReadModels.participantKey(e.token, e.participantID)
        guard var state = try m.message(ParticipantState.self, txn, m.participants, key) else { return }
        if state.userRecordName.isEmpty && state.status == .statusPending {
            Projector.decrement(&share.unmatchedPendingCount)
        }
        state.userRecordName = e.userRecordName
        try m.put(txn, m.participants, key, state)
        try m.putRaw(
            txn, m.sharesByUser, ReadModels.key(share.container, e.userRecordName, e.token),
            Array(e.participantID.utf8))
        // The user is in the share now: their pending access request, if any, is answered.
        try m.deleteRow(txn, m.access, ReadModels.accessKey(e.token, .request, user: e.userRecordName))
        share.changeTag += 1
        try m.put(txn, m.shares, text: e.token, share)
        try deleteVerifications(token: e.token, participantID: e.participantID, txn)
    }

    func shareAccepted(
        _ e: Shareledger_Events_V1_ShareAccepted, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable,
        share: ShareState?
    ) throws {
        let m = models
        guard var share else { return }
        let key = ReadModels.participantKey(e.token, e.participantID)
        guard var state = try m.message(ParticipantState.self, txn, m.participants, key) else { return }
        if !state.oneTimeToken.isEmpty {
            // Accepted through its one-time URL: the participant is the accepting user's from now on.
            // The URL stays tied to it while it is in the share (CloudKit's one-time URLs are stable),
            // answering as the share's URL; removal, leaving or the share's deletion withdraws it.
            try m.putRaw(
                txn, m.sharesByUser, ReadModels.key(share.container, e.userRecordName, e.token), Array(e.participantID.utf8))
        }
        state.status = .statusAccepted
        state.userRecordName = e.userRecordName
        try m.put(txn, m.participants, key, state)
        try m.add(txn, .acceptedParticipants, 1)
        try scheduleZoneTask(
            .createZone, share: share, token: e.token, user: e.userRecordName,
            id: Projector.taskID(position: context.position, index: 0), context, txn)
        share.changeTag += 1
        try m.put(txn, m.shares, text: e.token, share)
    }

    /// A lookup changes nothing but the log, except that a lookup sealed to a forgotten address
    /// means the address holds personal data again: it is no longer a forgotten one.
    func shareParticipantFetched(
        _ e: Shareledger_Events_V1_ShareParticipantFetched, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        if let address = e.sealedLookup.address {
            try m.deleteRow(txn, m.addresses, ReadModels.addressKey(context.container, address))
        }
    }
}
