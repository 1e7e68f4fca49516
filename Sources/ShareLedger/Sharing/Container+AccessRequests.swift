import Foundation
import SharingDomain
import Synchronization

// Access requests and blocked identities: CloudKit's `CKShare.allowsAccessRequests`, `requesters`,
// `denyRequesters(_:)`, `blockRequesters(_:)`, `unblockIdentities(_:)`, `blockedIdentities`, and the
// requester's side, `CKShareRequestAccessOperation` (``ShareRequestAccessOperation``).
extension Container {
    /// Lets people who have the share's URL but no invitation ask to join, or stops it (CloudKit's
    /// `CKShare.allowsAccessRequests`, saved with the share). Owner or accepted administrator. Turning
    /// it off keeps the pending requests (the owner may still answer them) and hides the share from
    /// new requests.
    ///
    /// - Throws: `LedgerError.Code.permissionFailure` for a participant who is not the owner or an
    ///   administrator, `LedgerError.Code.unknownItem` for anyone else,
    ///   `LedgerError.Code.serverRecordChanged` when `ifChangeTag` is not the share's tag.
    public func setAllowsAccessRequests(_ allowed: Bool, for shareURL: URL, ifChangeTag: String? = nil)
        async throws(LedgerError) -> Share
    {
        try await runShareChange(
            [.setAllowsAccessRequests(token: Container.token(of: shareURL), allowed: allowed, ifChangeTag: ifChangeTag)],
            shareURL, "setAllowsAccessRequests")
    }

    /// Asks to join the shares at `shareURLs` (the async form of CloudKit's
    /// `CKShareRequestAccessOperation(shareURLs:)`): one result per distinct URL.
    ///
    /// A URL whose share does not allow access requests, a share this user is blocked from, and a URL
    /// no share has all answer the same `LedgerError.Code.unknownItem` with the same message, and
    /// none of them is logged: a request tells the caller nothing about a share that does not welcome
    /// it. Asking again while a request is pending, or as an accepted participant or the owner,
    /// succeeds and changes nothing.
    ///
    /// - Returns: Success, or for each URL `LedgerError.Code.unknownItem` (see above),
    ///   `LedgerError.Code.participantAlreadyInvited` (the caller is invited already: accept that
    ///   invitation) or `LedgerError.Code.limitExceeded` (the share holds 200 pending requests).
    /// - Throws: `LedgerError.Code.notAuthenticated` without a registered account and
    ///   `LedgerError.Code.limitExceeded` for more than 400 URLs (for the whole request: nothing is
    ///   requested then).
    public func requestShareAccess(for shareURLs: [URL]) async throws(LedgerError) -> [URL: Result<Void, LedgerError>] {
        let results = Mutex<[URL: Result<Void, LedgerError>]>([:])
        try await requestAccess(shareURLs, chunkSize: Container.maxItemsPerOperation, isCancelled: { Task.isCancelled }) {
            url, result in results.withLock { $0[url] = result }
        }
        return results.withLock { $0 }
    }

    /// The one implementation of requesting access, for the async API and the operation.
    func requestAccess(
        _ shareURLs: [URL], chunkSize: Int, isCancelled: @Sendable () -> Bool,
        perURL: (URL, Result<Void, LedgerError>) async -> Void
    ) async throws(LedgerError) {
        guard !shareURLs.isEmpty else { return }
        try await runChunked(
            shareURLs, what: "share URLs in one access request", chunkSize: chunkSize, isCancelled: isCancelled,
            // A URL that is not a share URL gets the answer of an unknown one (an empty token is never valid).
            step: { url in DomainAction.requestAccess(tokenText: ShareURL.token(in: url)?.text ?? "") },
            value: { output in
                guard case .none = output else { return nil }
                return ()
            },
            perItem: perURL)
    }

    /// Approves pending access requests (owner or accepted administrator): each requester becomes an
    /// invited participant (privateUser, pending until they accept) with `Share.Participant.isApprovedRequester`
    /// set. CloudKit's owner does this by adding the requester's participant; inviting a requester with
    /// ``addParticipant(_:permission:role:to:ifChangeTag:)`` approves their request the same way.
    ///
    /// All or nothing, like saving a changed `CKShare`: if one requester cannot be approved, none is.
    ///
    /// - Throws: `LedgerError.Code.unknownItem` for a requester with no pending request (denied,
    ///   blocked, approved already, or never asked), `LedgerError.Code.invalidArguments` for a public
    ///   share or a permission other than readOnly or readWrite, `LedgerError.Code.tooManyParticipants`
    ///   past 100, `LedgerError.Code.permissionFailure` for a caller who does not manage the share.
    public func approveRequesters(
        _ requesters: [Share.AccessRequester], permission: Share.Participant.Permission = .readOnly, for shareURL: URL
    ) async throws(LedgerError) -> Share {
        let ledger = self.ledger
        return try await runShareChange(requesters.map(\.userIdentity), shareURL, "approveRequesters") { token, user in
            .approveRequester(token: token, user: user, permission: permission, newParticipantID: ledger.newParticipantID())
        }
    }

    /// Denies pending access requests (CloudKit's `denyRequesters(_:)` and saving the share): the
    /// requests are dropped; the users may ask again. All or nothing.
    ///
    /// - Throws: `LedgerError.Code.unknownItem` for a requester with no pending request,
    ///   `LedgerError.Code.permissionFailure` for a caller who does not manage the share.
    public func denyRequesters(_ requesters: [Share.AccessRequester], for shareURL: URL) async throws(LedgerError) -> Share {
        try await runShareChange(requesters.map(\.userIdentity), shareURL, "denyRequesters") { token, user in
            .denyRequester(token: token, user: user)
        }
    }

    /// Blocks the users (CloudKit's `blockRequesters(_:)` and saving the share): their pending
    /// requests are dropped, a participant among them is removed, and until unblocked they get the
    /// answer of an unknown URL when they request access, fetch the share's metadata or accept it.
    /// Any user of the container but the owner can be blocked, requester or not. All or nothing.
    ///
    /// - Throws: `LedgerError.Code.unknownItem` for an identity with no account in the container,
    ///   `LedgerError.Code.invalidArguments` for the owner, `LedgerError.Code.permissionFailure`
    ///   for a caller who does not manage the share.
    public func blockRequesters(_ requesters: [Share.AccessRequester], for shareURL: URL) async throws(LedgerError) -> Share {
        try await blockIdentities(requesters.map(\.userIdentity), for: shareURL)
    }

    /// Blocks users by identity (``blockRequesters(_:for:)`` for identities that are not requesters,
    /// such as participants).
    public func blockIdentities(_ identities: [UserIdentity], for shareURL: URL) async throws(LedgerError) -> Share {
        try await runShareChange(identities, shareURL, "blockRequesters") { token, user in
            .blockIdentity(token: token, user: user)
        }
    }

    /// Unblocks identities (CloudKit's `unblockIdentities(_:)` and saving the share): they may request
    /// access, fetch and join again. All or nothing.
    ///
    /// - Throws: `LedgerError.Code.unknownItem` for an identity that is not blocked,
    ///   `LedgerError.Code.permissionFailure` for a caller who does not manage the share.
    public func unblockIdentities(_ identities: [Share.BlockedIdentity], for shareURL: URL) async throws(LedgerError) -> Share {
        try await runShareChange(identities.map(\.userIdentity), shareURL, "unblockIdentities") { token, user in
            .unblockIdentity(token: token, user: user)
        }
    }

    /// The user record name of an identity (requesters and blocked identities are accounts).
    static func userName(of identity: UserIdentity) throws(LedgerError) -> String {
        guard let name = identity.userRecordID?.recordName ?? identity.lookupInfo?.userRecordID?.recordName else {
            throw LedgerError(
                .invalidArguments, "the identity has no user record id; requesters and blocked identities are accounts "
                    + "(take them from the share's requesters, blockedIdentities or participants)")
        }
        return name
    }

    /// Runs one step per identity (`step(token, user record name)`) on one share as one all-or-nothing
    /// command; see ``runShareChange(_:_:_:)``.
    private func runShareChange(
        _ identities: [UserIdentity], _ shareURL: URL, _ call: String, _ step: (String, String) -> DomainAction
    ) async throws(LedgerError) -> Share {
        let token = try Container.token(of: shareURL)
        var steps: [DomainAction] = []
        for identity in identities { steps.append(step(token, try Container.userName(of: identity))) }
        return try await runShareChange(steps, shareURL, call)
    }

    /// Runs `steps` on one share as one all-or-nothing command and answers the share after it; the
    /// first step that failed (not one that failed only because another did) is the error. No steps:
    /// the share as it is.
    private func runShareChange(_ steps: [DomainAction], _ shareURL: URL, _ call: String) async throws(LedgerError) -> Share {
        guard !steps.isEmpty else { return try share(for: shareURL) }
        let results = try await run(steps, atomic: true)
        let failures = results.compactMap(\.failure)
        if let failure = failures.first(where: { $0.code != .batchRequestFailed }) ?? failures.first { throw failure }
        guard case .success(.share(let share))? = results.last else { throw LedgerError.unexpectedOutput(call) }
        return share
    }
}
