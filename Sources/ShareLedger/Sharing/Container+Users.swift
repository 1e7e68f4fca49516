import Foundation

// User identities for callers outside the process — the HTTP server's `users/caller` and
// `users/lookup/email` (CloudKit's `fetchUserRecordID`/`userIdentity(forUserRecordID:)` and
// `discoverUserIdentity(withEmailAddress:)`). Read-only: no event is appended.
extension Container {
    /// The acting user's identity (user record id and name components), like CloudKit's
    /// `userIdentity(forUserRecordID:)` for the current user.
    ///
    /// - Throws: ``EventLog/LedgerError/Code/notAuthenticated`` without a signed-in user, and
    ///   ``EventLog/LedgerError/Code/unknownItem`` when the user is not registered in this container.
    public func currentUserIdentity() throws(LedgerError) -> UserIdentity {
        guard let user = userRecordName, (try? Decider.checkUserName(user)) != nil else {
            throw LedgerError(.notAuthenticated, "no signed-in user: act as a registered user")
        }
        let container = containerIdentifier
        let ledger = self.ledger
        return try ledger.read("reading the current user") { txn in
            guard try ledger.models.userExists(txn, container, user) else {
                throw LedgerError(.unknownItem, "the signed-in user is not registered in this container")
            }
            return try ledger.presenter.identity(txn, container, user: user)
        }
    }

    /// The identity of the user registered in this container with `emailAddress` (compared without
    /// case and surrounding spaces), like CloudKit's `discoverUserIdentity(withEmailAddress:)`; `nil`
    /// when no user has it. Needs a signed-in caller.
    ///
    /// - Throws: ``EventLog/LedgerError/Code/notAuthenticated`` without a signed-in user.
    public func userIdentity(forEmailAddress emailAddress: String) throws(LedgerError) -> UserIdentity? {
        guard let user = userRecordName, (try? Decider.checkUserName(user)) != nil else {
            throw LedgerError(.notAuthenticated, "no signed-in user: act as a registered user")
        }
        let container = containerIdentifier
        let ledger = self.ledger
        return try ledger.read("looking up a user") { txn in
            guard let name = try ledger.models.userName(txn, container, email: emailAddress) else { return nil }
            var identity = try ledger.presenter.identity(txn, container, user: name)
            identity.lookupInfo = LookupInfo(emailAddress: emailAddress)
            return identity
        }
    }
}
