import EventLog
import Foundation
import SwiftProtobuf

/// Participant verification (invitations to an email or phone no account has).
extension Decider {
    // MARK: - Verification

    package func requestVerification(
        _ txn: borrowing some ReadModelStore & ~Copyable, token: String, lookup: LookupInfo, hash: [UInt8], expires: Int64
    ) throws -> Decision {
        try requireSignedIn(txn)
        let wanted = PBLookupInfo(lookup)
        guard !wanted.emailAddress.isEmpty || !wanted.phoneNumber.isEmpty else {
            throw LedgerError(.invalidArguments, "verification proves an email address or a phone number")
        }
        let share = try liveShare(txn, token)
        try refuseBlocked(txn, token)
        try refuseActiveParticipant(txn, share, token)
        try requireVerificationCase(share)
        // By keyed hash for sealed invitations, by plaintext for older ones.
        let address = models.addressMatch(container, email: wanted.emailAddress, phone: wanted.phoneNumber)
        let match = try models.firstParticipant(txn, token, namingAnAddress: { state in
            state.status == .statusPending && state.userRecordName.isEmpty && address.matches(state)
        })
        guard let match else {
            throw LedgerError(
                .unknownItem, "no pending invitation of this share matches \(lookup); verify the email address or phone "
                    + "number the invitation was sent to")
        }
        var e = Shareledger_Events_V1_VerificationRequested()
        e.token = token
        e.participantID = match.id
        e.userRecordName = actor
        e.codeSha256 = Data(hash)
        e.expiresAtMicros = expires
        return .output([event(Streams.share(token), .verificationRequested(e))], .participantID(match.id))
    }

    /// A caller in the share already has nothing to verify: a pending invitee gets
    /// ``LedgerError/Code/participantAlreadyInvited`` (CloudKit's answer to a user who is invited and
    /// must accept the existing invitation first), an accepted participant or the owner
    /// ``LedgerError/Code/invalidArguments``.
    package func refuseActiveParticipant(_ txn: borrowing some ReadModelStore & ~Copyable, _ share: ShareState, _ token: String) throws {
        guard let entry = try activeEntry(txn, share, token) else { return }
        if entry.state.status == .statusPending && entry.state.role != .owner {
            throw LedgerError(
                .participantAlreadyInvited, "you are invited to this share already: fetch its metadata and accept that "
                    + "invitation instead of verifying another")
        }
        throw LedgerError(.invalidArguments, "you are a participant of this share already")
    }

    /// Verification concerns only a share with invitations not tied to an account (the case in which
    /// fetching its metadata answers `participantMayNeedVerification`). For any other share, a caller
    /// who is not a participant gets the answer of an unknown URL, so that verifying tells a stranger
    /// nothing that fetching would not.
    package func requireVerificationCase(_ share: ShareState) throws {
        guard share.container == container, share.unmatchedPendingCount > 0 else {
            throw LedgerError(.unknownItem, Decider.shareNotFound)
        }
    }

    package func verify(_ txn: borrowing some ReadModelStore & ~Copyable, token: String, hash: [UInt8]) throws -> Decision {
        try requireSignedIn(txn)
        let share = try liveShare(txn, token)
        try refuseBlocked(txn, token)
        try refuseActiveParticipant(txn, share, token)
        try requireVerificationCase(share)
        let suffix = [UInt8(0)] + Array(actor.utf8)
        var found: (participantID: String, state: VerificationState)?
        var expired = false
        for entry in try models.scan(txn, models.verifications, prefix: Array(token.utf8)) {
            guard entry.suffix.count > suffix.count, Array(entry.suffix.suffix(suffix.count)) == suffix else { continue }
            let state = try VerificationState(serializedBytes: entry.value)
            guard Array(state.codeSha256) == hash else { continue }
            guard state.expiresAtMicros > now else {
                expired = true
                continue
            }
            found = (String(decoding: entry.suffix.dropLast(suffix.count), as: UTF8.self), state)
        }
        guard let found else {
            throw LedgerError(
                .permissionFailure, expired
                    ? "the verification code has expired; request a new one"
                    : "the verification code is not valid for you and this share; check it or request a new one")
        }
        guard let participant = try models.participant(txn, token, found.participantID),
            participant.status == .statusPending, participant.userRecordName.isEmpty
        else {
            throw LedgerError(.unknownItem, "the invitation was withdrawn or claimed already")
        }
        var e = Shareledger_Events_V1_ParticipantVerified()
        e.token = token
        e.participantID = found.participantID
        e.userRecordName = actor
        return .output([event(Streams.share(token), .participantVerified(e))], shareOutput(token))
    }
}
