import Foundation
import SharingDomain

// User identities for callers outside the process — the HTTP server's `users/caller` and
// `users/lookup/email` (CloudKit's `fetchUserRecordID`/`userIdentity(forUserRecordID:)` and
// `discoverUserIdentity(withEmailAddress:)`). Read-only: no event is appended.
extension Container {
    /// The acting user's identity (user record id and name components), like CloudKit's
    /// `userIdentity(forUserRecordID:)` for the current user.
    ///
    /// - Throws: `LedgerError.Code.notAuthenticated` without a signed-in user, and
    ///   `LedgerError.Code.unknownItem` when the user is not registered in this container.
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

    /// Finds the users of this container who registered with these email addresses or phone numbers
    /// (or have these user record names), like CloudKit's `discoverUserIdentity(withEmailAddress:)`
    /// and Web Services' `users/lookup/email`: the answer for each distinct lookup info is the user's
    /// identity, or `LedgerError.Code.unknownItem` when no user of this container has it.
    ///
    /// Such an answer tells whether an address belongs to an account, so it is what a participant
    /// lookup is (``shareParticipants(for:)``): only a registered user may ask, and each lookup is
    /// recorded in the log (one `ShareParticipantFetched` per distinct lookup info, found or not).
    /// This is what a server answering callers from outside should use;
    /// ``userIdentity(forEmailAddress:)`` records nothing.
    ///
    /// - Returns: The identity or the error of each distinct lookup info: `LedgerError.Code.unknownItem`
    ///   when no user has it, `LedgerError.Code.invalidArguments` for an email address or phone number
    ///   that is not one.
    /// - Throws: `LedgerError.Code.notAuthenticated` when the caller is not a registered user, and
    ///   `LedgerError.Code.limitExceeded` for more than 400 lookup infos (nothing is looked up or
    ///   recorded then).
    public func discoverUserIdentities(for lookupInfos: [LookupInfo]) async throws(LedgerError)
        -> [LookupInfo: Result<UserIdentity, LedgerError>]
    {
        try await shareParticipants(for: lookupInfos).mapValues { result in
            result.flatMap { participant -> Result<UserIdentity, LedgerError> in
                guard participant.userIdentity.hasiCloudAccount else {
                    return .failure(LedgerError(.unknownItem, "no user of this container has this email address or phone number"))
                }
                return .success(participant.userIdentity)
            }
        }
    }

    /// The identity of the user registered in this container with `emailAddress` (compared without
    /// case and surrounding spaces), like CloudKit's `discoverUserIdentity(withEmailAddress:)`; `nil`
    /// when no user has it. Needs a signed-in caller. Records nothing: for callers outside the
    /// process use ``discoverUserIdentities(for:)``, which records each lookup and answers registered
    /// users only.
    ///
    /// - Throws: `LedgerError.Code.notAuthenticated` without a signed-in user.
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
