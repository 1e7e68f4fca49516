import EventLog
import Foundation

/// Checking the events about access requests and blocked identities.
extension EventValidator {
    func checkAccessRequested(
        _ e: Shareledger_Events_V1_AccessRequested, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        let actor = d.actor
        try d.requireSignedIn(txn)
        guard e.userRecordName == actor else { throw Self.refuse("a user requests access only for themselves") }
        let share = try d.liveShare(txn, e.token)
        guard share.allowsAccessRequests else { throw Self.refuse("the share does not allow access requests") }
        try d.refuseBlocked(txn, e.token)
        guard try d.activeEntry(txn, share, e.token) == nil,
            !(try m.hasAccessEntry(txn, e.token, .request, user: actor))
        else { throw Self.refuse("the user is a participant, or has a pending request, already") }
    }

    func checkAccessRequestDenied(
        _ e: Shareledger_Events_V1_AccessRequestDenied, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        try requireManagerOf(e.token, d, txn)
        try d.requirePendingRequest(txn, e.token, user: e.userRecordName)
    }

    func checkIdentityBlocked(
        _ e: Shareledger_Events_V1_IdentityBlocked, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        let share = try requireManagerOf(e.token, d, txn)
        try d.checkBlockable(txn, share, user: e.userRecordName)
        guard !(try m.hasAccessEntry(txn, e.token, .blocked, user: e.userRecordName)) else {
            throw Self.refuse("user \(e.userRecordName) is blocked already")
        }
        if try d.activeEntryOf(txn, share, e.token, user: e.userRecordName) != nil {
            throw Self.refuse("user \(e.userRecordName) is still a participant (its ParticipantRemoved comes first)")
        }
    }

    func checkIdentityUnblocked(
        _ e: Shareledger_Events_V1_IdentityUnblocked, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        try requireManagerOf(e.token, d, txn)
        guard try m.hasAccessEntry(txn, e.token, .blocked, user: e.userRecordName) else {
            throw Self.refuse("user \(e.userRecordName) is not blocked")
        }
    }
}
