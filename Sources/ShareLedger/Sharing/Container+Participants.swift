import Foundation
import SharingDomain
import Synchronization

// Participant lookup: CloudKit's `CKContainer.shareParticipants(for:)` and
// `CKFetchShareParticipantsOperation` (``FetchShareParticipantsOperation``), and inviting the
// participant a lookup found.
extension Container {
    /// Looks up the people to invite (CloudKit's `shareParticipants(for:)`): one result per distinct
    /// lookup info, each a participant that is in no share yet (role privateUser, permission
    /// readOnly, status unknown, empty participant id) to adjust and pass to
    /// ``addParticipant(_:to:ifChangeTag:)``.
    ///
    /// An email address or phone number that an account of this container has gives a participant
    /// whose identity names that account (`hasiCloudAccount == true`, `userRecordID` and name set); one
    /// that no account has still gives a participant, with `hasiCloudAccount == false` and no
    /// `userRecordID`, as CloudKit does: invite it, and the invitee proves the address with
    /// ``requestParticipantVerification(for:lookupInfo:)``. The identity's `lookupInfo` is the lookup
    /// as given.
    ///
    /// Each lookup, failed or not, is recorded in the log (`ShareParticipantFetched`): it tells the
    /// caller whether an address belongs to an account.
    ///
    /// - Parameter lookupInfos: Emails, phone numbers or user record ids (duplicates are looked up once).
    /// - Returns: The participant or the error of each distinct lookup info: `LedgerError.Code.unknownItem`
    ///   for a user record id no user of this container has, `LedgerError.Code.invalidArguments` for an
    ///   email address or phone number that is not one.
    /// - Throws: `LedgerError.Code.notAuthenticated` without a registered account and
    ///   `LedgerError.Code.limitExceeded` for more than 400 lookup infos (for the whole request:
    ///   nothing is looked up or logged then).
    public func shareParticipants(for lookupInfos: [LookupInfo]) async throws(LedgerError)
        -> [LookupInfo: Result<Share.Participant, LedgerError>]
    {
        let results = Mutex<[LookupInfo: Result<Share.Participant, LedgerError>]>([:])
        try await fetchParticipants(
            lookupInfos, chunkSize: Container.maxItemsPerOperation, isCancelled: { Task.isCancelled }
        ) { lookup, result in results.withLock { $0[lookup] = result } }
        return results.withLock { $0 }
    }

    /// Looks up one person to invite (``shareParticipants(for:)`` for one lookup info; CloudKit's
    /// `fetchShareParticipant(withLookupInfo:)`).
    ///
    /// - Throws: the lookup's error (`LedgerError.Code.unknownItem`, `LedgerError.Code.invalidArguments`)
    ///   or the request's (`LedgerError.Code.notAuthenticated`).
    public func shareParticipant(for lookupInfo: LookupInfo) async throws(LedgerError) -> Share.Participant {
        guard let result = try await shareParticipants(for: [lookupInfo])[lookupInfo] else {
            throw LedgerError.unexpectedOutput("shareParticipant")
        }
        return try result.get()
    }

    /// The one implementation of participant lookup, for the async API and the operation: distinct
    /// lookup infos, at most 400, submitted `chunkSize` at a time; `perLookup` gets each result in
    /// input order. Once `isCancelled` says so, the lookups not yet submitted end with
    /// `operationCancelled` (and are not logged). No lookup infos: no results at once, as in CloudKit.
    func fetchParticipants(
        _ lookupInfos: [LookupInfo], chunkSize: Int, isCancelled: @Sendable () -> Bool,
        perLookup: (LookupInfo, Result<Share.Participant, LedgerError>) async -> Void
    ) async throws(LedgerError) {
        guard !lookupInfos.isEmpty else { return }
        try await runChunked(
            lookupInfos, what: "lookup infos in one participant lookup", chunkSize: chunkSize, isCancelled: isCancelled,
            step: { DomainAction.lookupParticipant($0) },
            value: { output in
                guard case .participant(let participant) = output else { return nil }
                return participant
            },
            perItem: perLookup)
    }

    /// Invites the participant a lookup found (``shareParticipants(for:)``), with the role and
    /// permission set on it: CloudKit's `share.addParticipant(_:)` and saving the share, in one call.
    /// It is ``addParticipant(_:permission:role:to:ifChangeTag:)`` with the participant's lookup info
    /// (or, without one, its user record id).
    ///
    /// - Throws: `LedgerError.Code.invalidArguments` for a participant with neither a lookup info nor
    ///   a user record id; otherwise what ``addParticipant(_:permission:role:to:ifChangeTag:)`` throws.
    public func addParticipant(_ participant: Share.Participant, to shareURL: URL, ifChangeTag: String? = nil)
        async throws(LedgerError) -> Share
    {
        if participant.isOneTimeURLParticipant {
            return try await runShare(
                .addOneTimeParticipant(
                    token: Container.token(of: shareURL), role: participant.role, permission: participant.permission,
                    newParticipantID: ledger.newParticipantID(), oneTimeToken: ledger.newToken().text, ifChangeTag: ifChangeTag),
                "addParticipant")
        }
        let identity = participant.userIdentity
        guard let lookup = identity.lookupInfo ?? identity.userRecordID.map({ LookupInfo(userRecordID: $0) }) else {
            throw LedgerError(
                .invalidArguments, "the participant has no lookup info or user record id: get participants to invite "
                    + "from shareParticipants(for:)")
        }
        return try await addParticipant(
            lookup, permission: participant.permission, role: participant.role, to: shareURL, ifChangeTag: ifChangeTag)
    }
}
