import Foundation
import LMDB
import SharingDomain
import SwiftProtobuf
import Synchronization

/// A container as one user sees it (what `CKContainer` is for the signed-in user): that user's
/// private database (zones, records, the shares they own), the shares shared with them, and the
/// sharing calls — fetching share metadata and accepting shares.
///
/// Every call that changes something is one command of the ledger: its events are appended to the
/// log and its read models updated in the same commit, so a read right after an awaited call sees
/// its effect. A call that fails changes nothing (fetching metadata is the exception: each fetch,
/// failed or not, is recorded in the log for the audit trail).
public struct Container: Sendable {
    let ledger: ShareLedger
    /// The container's identifier, e.g. `iCloud.com.example.notes`.
    public let containerIdentifier: String
    /// The acting user; `nil` for a caller with no account.
    public let userRecordName: String?

    /// CloudKit's limit on the items of one operation.
    public static let maxItemsPerOperation = 400

    // MARK: - Running commands

    /// The acting user, when the handle names one that can exist (a malformed name is no account).
    private var validUser: String? {
        guard let userRecordName, (try? Decider.checkUserName(userRecordName)) != nil else { return nil }
        return userRecordName
    }

    /// Runs `steps` as one command; `atomic` makes it all or nothing (see ``DomainCommand/atomic``).
    func run(_ steps: [DomainAction], atomic: Bool = false) async throws(LedgerError) -> [Result<StepOutput, LedgerError>] {
        try Decider.checkContainer(containerIdentifier)
        let user = validUser
        let metadata = CommandMetadata(container: containerIdentifier, actor: user ?? "(no account)")
        let command = DomainCommand(
            metadata: metadata, signedIn: user != nil, steps: steps,
            bytes: steps.reduce(0) { $0 + $1.approximateBytes }, atomic: atomic)
        let results = try await ledger.submit(command).results
        // The answers are built here, after the commit, in one short read transaction. Metadata a
        // fetch asked for may be a kept answer (``shareMetadataWithoutLogging(for:)``'s).
        let presenter = ledger.presenter
        let container = containerIdentifier
        let ledger = self.ledger
        let generation = ledger.shareTags.generation
        return try ledger.read("reading the results") { txn in
            results.map { result in
                result.flatMap { answer in
                    do {
                        if case .metadata(let token, false, _) = answer {
                            return .success(
                                .metadata(
                                    try Container.metadata(
                                        txn, ledger: ledger, token: token, container: container, viewer: metadata.actor,
                                        cache: ledger.metadataCache, generation: generation)))
                        }
                        return .success(try presenter.present(answer, container: container, viewer: metadata.actor, txn))
                    } catch let error as LedgerError {
                        return .failure(error)
                    } catch {
                        return .failure(LedgerError.wrap(error, while: "reading the result"))
                    }
                }
            }
        }
    }

    func runOne(_ step: DomainAction) async throws(LedgerError) -> StepOutput {
        guard let result = try await run([step]).first else { throw LedgerError.unexpectedOutput("a command") }
        return try result.get()
    }

    func runShare(_ step: DomainAction, _ call: String) async throws(LedgerError) -> Share {
        guard case .share(let share) = try await runOne(step) else { throw LedgerError.unexpectedOutput(call) }
        return share
    }

    /// The token of a share URL, or `unknownItem` (as CloudKit answers for a URL it does not know).
    package static func token(of url: URL) throws(LedgerError) -> String {
        guard let token = ShareURL.token(in: url) else {
            throw LedgerError(.unknownItem, Decider.shareNotFound)
        }
        return token.text
    }

    // MARK: - Zones and records

    /// Creates a zone in the user's private database; saving an existing zone returns it unchanged.
    /// The default zone (`_defaultZone`) is saved like any other, always without capabilities (as in
    /// CloudKit: no atomic batches, no change feed, no sharing).
    ///
    /// - Throws: `LedgerError.Code.badDatabase` for another user's zone,
    ///   `LedgerError.Code.invalidArguments` for a bad name,
    ///   `LedgerError.Code.notAuthenticated` without an account.
    public func save(_ zone: RecordZone) async throws(LedgerError) -> RecordZone {
        guard case .zone(let saved) = try await runOne(.saveZone(zone.zoneID, capabilities: zone.capabilities.rawValue))
        else { throw LedgerError.unexpectedOutput("save(zone)") }
        return saved
    }

    /// Deletes a zone of the user's, with its records and shares (participants lose the zone). The
    /// default zone cannot be deleted (`LedgerError.Code.invalidArguments`).
    public func deleteRecordZone(withID zoneID: RecordZoneID) async throws(LedgerError) {
        _ = try await runOne(.deleteZone(zoneID))
    }

    /// Saves a record: creates it (no change tag) or changes it (with the change tag it was fetched
    /// with). A participant with read-write permission may save records of a share they accepted.
    ///
    /// - Throws: `LedgerError.Code.serverRecordChanged` for a missing or stale change tag,
    ///   `LedgerError.Code.zoneNotFound`, `LedgerError.Code.referenceViolation` for a missing parent,
    ///   `LedgerError.Code.alreadyShared` when the new parent would put a share inside another,
    ///   `LedgerError.Code.permissionFailure` for a participant without read-write permission,
    ///   `LedgerError.Code.limitExceeded` past 1 MB of fields.
    public func save(_ record: Record) async throws(LedgerError) -> Record {
        guard case .record(let saved) = try await runOne(.saveRecord(record)) else {
            throw LedgerError.unexpectedOutput("save(record)")
        }
        return saved
    }

    /// Deletes a record. Deleting the root of a share deletes the share (as in CloudKit). Records
    /// whose parent it was keep their `parent` reference, which then points at nothing.
    public func deleteRecord(withID recordID: RecordID) async throws(LedgerError) {
        _ = try await runOne(.deleteRecord(recordID))
    }

    /// The record, if the user may read it (their own, or in a share they accepted).
    ///
    /// - Throws: `LedgerError.Code.unknownItem` when it does not exist or is not shared with the user.
    public func record(for recordID: RecordID) throws(LedgerError) -> Record {
        let user = try registeredUser()
        let owner = recordID.zoneID.ownerName == RecordZoneID.defaultOwnerName ? user : recordID.zoneID.ownerName
        let container = containerIdentifier
        let ledger = self.ledger
        return try ledger.read("reading record \(recordID.recordName)") { txn in
            let models = ledger.models
            // In another user's zone, a missing zone or record and one not shared with the user get
            // the same answer: it tells nothing about what the owner has.
            let hidden = LedgerError(.unknownItem, "record \(recordID.recordName): \(Decider.recordNotShared)")
            guard let zone = try models.zone(txn, container, owner: owner, zone: recordID.zoneID.zoneName),
                let state = try models.record(txn, zoneID: zone.zoneID, recordID.recordName)
            else {
                throw owner == user ? LedgerError(.unknownItem, "record \(recordID.recordName) does not exist") : hidden
            }
            if owner != user {
                guard try Container.canRead(txn, models, zone: zone, record: recordID.recordName, user: user) else {
                    throw hidden
                }
            }
            let id = RecordID(recordName: recordID.recordName, zoneID: RecordZoneID(zoneName: recordID.zoneID.zoneName, ownerName: owner))
            return try ledger.presenter.record(txn, state, id: id)
        }
    }

    static func canRead(_ txn: borrowing Transaction, _ models: ReadModels, zone: ZoneState, record: String, user: String)
        throws -> Bool
    {
        guard let token = try models.coveringShare(txn, zone: zone, from: record), let share = try models.share(txn, token),
            let entry = try models.participant(txn, of: user, in: share, token: token)
        else { return false }
        return entry.state.status == .statusAccepted
    }

    /// The zones of the user's private database.
    public func recordZones() throws(LedgerError) -> [RecordZone] {
        let user = try registeredUser()
        let container = containerIdentifier
        let ledger = self.ledger
        return try ledger.read("listing zones") { txn in
            try ledger.models.scan(txn, ledger.models.zones, prefix: ReadModels.key(container, user) + [0]).map { entry in
                let state = try entry.value.withUnsafeBytes { try ZoneState.decodeStored($0, database: "rm_zones") }
                let id = RecordZoneID(zoneName: String(decoding: entry.suffix, as: UTF8.self), ownerName: user)
                return ledger.presenter.zone(state, id: id)
            }
        }
    }

    // MARK: - Shares (owner and administrators)

    /// Shares a record and the records below it (their `parent` chains lead to it), like
    /// `CKShare(rootRecord:)` saved with its root. Sharing a root that was shared before gives the
    /// same URL again.
    ///
    /// - Throws: `LedgerError.Code.alreadyShared` when the record, a parent or a child is in a share;
    ///   `LedgerError.Code.serverRejectedRequest` when the zone is shared as a whole;
    ///   `LedgerError.Code.unknownItem` when the root does not exist (save it first);
    ///   `LedgerError.Code.badDatabase` for another user's record.
    public func share(
        rootRecord recordID: RecordID, title: String? = nil, publicPermission: Share.Participant.Permission = .none
    ) async throws(LedgerError) -> Share {
        try await runShare(
            .createShare(
                ShareCreation(
                    zoneID: recordID.zoneID, rootRecordName: recordID.recordName, title: title ?? "",
                    publicPermission: publicPermission, tokenCandidate: ledger.newToken().text,
                    shareRecordName: "Share-" + ledger.newParticipantID(), ownerParticipantID: ledger.newParticipantID())),
            "share(rootRecord:)")
    }

    /// Shares a whole zone, like `CKShare(recordZoneID:)` (record name `cloudkit.zoneshare`).
    ///
    /// - Throws: `LedgerError.Code.serverRecordChanged` when the zone is shared already;
    ///   `LedgerError.Code.invalidArguments` when it holds shared hierarchies.
    public func share(
        recordZoneID zoneID: RecordZoneID, title: String? = nil, publicPermission: Share.Participant.Permission = .none
    ) async throws(LedgerError) -> Share {
        try await runShare(
            .createShare(
                ShareCreation(
                    zoneID: zoneID, rootRecordName: nil, title: title ?? "", publicPermission: publicPermission,
                    tokenCandidate: ledger.newToken().text, shareRecordName: Share.zoneWideShareRecordName,
                    ownerParticipantID: ledger.newParticipantID())),
            "share(recordZoneID:)")
    }

    /// Invites a participant by email, phone or user record id (owner or administrator, private
    /// shares only). An email or phone no account has gives a participant with no account
    /// (`hasiCloudAccount == false`) until someone verifies it. Inviting the same identity again
    /// updates its role and permission (or invites a removed participant again).
    ///
    /// - Parameters:
    ///   - lookupInfo: Who to invite: an email address, a phone number or a user record id.
    ///   - permission: `readOnly` or `readWrite`.
    ///   - role: `privateUser` (the default) or `administrator`.
    ///   - shareURL: The share's URL.
    ///   - ifChangeTag: Make the change only if the share still has this change tag.
    /// - Throws: `LedgerError.Code.tooManyParticipants` past 100, `LedgerError.Code.invalidArguments`
    ///   for a public share, a public-user or owner role, or permission `none`;
    ///   `LedgerError.Code.permissionFailure` for a caller who is not the owner or an administrator.
    public func addParticipant(
        _ lookupInfo: LookupInfo, permission: Share.Participant.Permission, role: Share.Participant.Role = .privateUser,
        to shareURL: URL, ifChangeTag: String? = nil
    ) async throws(LedgerError) -> Share {
        try await runShare(
            .addParticipant(
                token: Container.token(of: shareURL), lookup: lookupInfo, role: role, permission: permission,
                newParticipantID: ledger.newParticipantID(), ifChangeTag: ifChangeTag),
            "addParticipant")
    }

    /// Changes a participant's permission (and role, between privateUser and administrator).
    public func setPermission(
        _ permission: Share.Participant.Permission, role: Share.Participant.Role? = nil, forParticipant participantID: String,
        in shareURL: URL, ifChangeTag: String? = nil
    ) async throws(LedgerError) -> Share {
        try await runShare(
            .updateParticipant(
                token: Container.token(of: shareURL), participantID: participantID, role: role, permission: permission,
                ifChangeTag: ifChangeTag),
            "setPermission")
    }

    /// Removes a participant (owner or administrator). The owner cannot be removed.
    public func removeParticipant(_ participantID: String, from shareURL: URL, ifChangeTag: String? = nil)
        async throws(LedgerError) -> Share
    {
        try await runShare(
            .removeParticipant(token: Container.token(of: shareURL), participantID: participantID, ifChangeTag: ifChangeTag),
            "removeParticipant")
    }

    /// Sets who may join through the URL (owner only). Any change drops pending participants; back
    /// to `none` drops the public users too (as CloudKit does).
    public func setPublicPermission(_ permission: Share.Participant.Permission, for shareURL: URL, ifChangeTag: String? = nil)
        async throws(LedgerError) -> Share
    {
        try await runShare(
            .setPublicPermission(token: Container.token(of: shareURL), permission: permission, ifChangeTag: ifChangeTag),
            "setPublicPermission")
    }

    /// Changes the share's title (owner or administrator).
    public func setTitle(_ title: String, for shareURL: URL, ifChangeTag: String? = nil) async throws(LedgerError) -> Share {
        try await runShare(
            .setTitle(token: Container.token(of: shareURL), title: title, ifChangeTag: ifChangeTag), "setTitle")
    }

    /// Deletes the share (owner only): every participant loses access; the root record stays.
    public func deleteShare(_ shareURL: URL, ifChangeTag: String? = nil) async throws(LedgerError) {
        _ = try await runOne(.deleteShare(token: Container.token(of: shareURL), ifChangeTag: ifChangeTag))
    }

    /// Leaves a share (a participant's "delete the share from my shared database").
    public func leaveShare(_ shareURL: URL) async throws(LedgerError) {
        _ = try await runOne(.leaveShare(token: Container.token(of: shareURL)))
    }

    // MARK: - Share metadata

    /// The metadata of one share URL, relative to this user (CloudKit's `shareMetadata(for:)`).
    ///
    /// - Throws: `LedgerError.Code.unknownItem` for an unknown or deleted share, and for a private
    ///   share the user is not in; `LedgerError.Code.participantMayNeedVerification` when the user is
    ///   not in a private share that has invitations to emails or phones with no account;
    ///   `LedgerError.Code.notAuthenticated` without an account.
    public func shareMetadata(for url: URL) async throws(LedgerError) -> Share.Metadata {
        guard let result = try await shareMetadatas(for: [url])[url] else { throw LedgerError.unexpectedOutput("shareMetadata") }
        return try result.get()
    }

    /// The metadata of several share URLs (CloudKit's `shareMetadatas(for:)` and
    /// `CKFetchShareMetadataOperation`), one result per distinct URL. Each fetch is recorded in the log.
    ///
    /// - Parameters:
    ///   - urls: The share URLs (duplicates are fetched once).
    ///   - shouldFetchRootRecord: Include the root record of hierarchy shares (ignored for zone-wide shares).
    ///   - rootRecordDesiredKeys: The root record's fields to include: `nil` for all, `[]` for none.
    /// - Throws: `LedgerError.Code.limitExceeded` for more than 400 URLs (nothing is fetched).
    public func shareMetadatas(
        for urls: [URL], shouldFetchRootRecord: Bool = false, rootRecordDesiredKeys: [String]? = nil
    ) async throws(LedgerError) -> [URL: Result<Share.Metadata, LedgerError>] {
        let results = Mutex<[URL: Result<Share.Metadata, LedgerError>]>([:])
        try await fetchMetadata(
            urls, shouldFetchRootRecord: shouldFetchRootRecord, desiredKeys: rootRecordDesiredKeys,
            chunkSize: Container.maxItemsPerOperation, isCancelled: { Task.isCancelled }
        ) { url, result in results.withLock { $0[url] = result } }
        return results.withLock { $0 }
    }

    /// The metadata of several shares by their tokens (the last path component of a share URL), one
    /// result per distinct token, each fetch recorded in the log exactly as
    /// ``shareMetadatas(for:shouldFetchRootRecord:rootRecordDesiredKeys:)`` records the fetch of the
    /// token's URL. For a caller that receives tokens, as a server does CloudKit Web Services'
    /// shortGUIDs, and would otherwise build a URL per token for the ledger to parse again.
    ///
    /// - Parameters:
    ///   - tokens: The share tokens (duplicates are fetched once).
    ///   - shouldFetchRootRecord: Include the root record of hierarchy shares (ignored for zone-wide shares).
    ///   - rootRecordDesiredKeys: The root record's fields to include: `nil` for all, `[]` for none.
    /// - Throws: `LedgerError.Code.limitExceeded` for more than 400 tokens (nothing is fetched).
    public func shareMetadatas(
        forTokens tokens: [ShareToken], shouldFetchRootRecord: Bool = false, rootRecordDesiredKeys: [String]? = nil
    ) async throws(LedgerError) -> [ShareToken: Result<Share.Metadata, LedgerError>] {
        var results: [ShareToken: Result<Share.Metadata, LedgerError>] = [:]
        // The same words as the fetch by URL: to a caller it is the same operation.
        try await runChunked(
            tokens, what: "share URLs in one fetch", chunkSize: Container.maxItemsPerOperation, isCancelled: { Task.isCancelled },
            step: { token in
                DomainAction.fetchMetadata(
                    tokenText: token.text, shouldFetchRootRecord: shouldFetchRootRecord, desiredKeys: rootRecordDesiredKeys)
            },
            value: { output in
                guard case .metadata(let metadata) = output else { return nil }
                return metadata
            },
            perItem: { token, result in results[token] = result })
        return results
    }

    /// The one implementation of fetching metadata, for the async API and the operation: distinct
    /// URLs, at most 400, submitted `chunkSize` at a time; `perURL` gets each result in input order.
    /// Once `isCancelled` says so, the URLs not yet submitted end with `operationCancelled`.
    func fetchMetadata(
        _ urls: [URL], shouldFetchRootRecord: Bool, desiredKeys: [String]?, chunkSize: Int,
        isCancelled: @Sendable () -> Bool, perURL: (URL, Result<Share.Metadata, LedgerError>) async -> Void
    ) async throws(LedgerError) {
        try await runChunked(
            urls, what: "share URLs in one fetch", chunkSize: chunkSize, isCancelled: isCancelled,
            step: { url in
                // A URL that is not a share URL (too long, not http(s), no host, no token as the last of
                // two or more path components) is answered as an unknown one, as every other call does.
                // What was asked is still logged, marked so that it is never taken for a token.
                DomainAction.fetchMetadata(
                    tokenText: ShareURL.token(in: url)?.text ?? ("not-a-share-url:" + url.lastPathComponent.prefix(48)),
                    shouldFetchRootRecord: shouldFetchRootRecord, desiredKeys: desiredKeys)
            },
            value: { output in
                guard case .metadata(let metadata) = output else { return nil }
                return metadata
            },
            perItem: perURL)
    }

    /// The one loop behind the batch calls: distinct items, at most 400 (else `limitExceeded` and
    /// nothing done), one command per `chunkSize` items, each item's result to `perItem` in input
    /// order; once `isCancelled` says so, the items not yet submitted end with `operationCancelled`.
    func runChunked<Item: Hashable, Value>(
        _ items: [Item], what: String, chunkSize: Int, isCancelled: @Sendable () -> Bool, step: (Item) -> DomainAction,
        value: (StepOutput) -> Value?, perItem: (Item, Result<Value, LedgerError>) async -> Void
    ) async throws(LedgerError) {
        var seen = Set<Item>()
        let distinct = items.filter { seen.insert($0).inserted }
        guard distinct.count <= Container.maxItemsPerOperation else {
            throw LedgerError(
                .limitExceeded, "\(distinct.count) \(what); the limit is \(Container.maxItemsPerOperation). Split the request")
        }
        // Without an account the whole request fails, as in CloudKit (not each item).
        _ = try registeredUser()
        var start = 0
        while start < distinct.count {
            let chunk = Array(distinct[start..<min(start + max(1, chunkSize), distinct.count)])
            start += chunk.count
            if isCancelled() {
                for item in chunk { await perItem(item, .failure(LedgerError(.operationCancelled, "the operation was cancelled"))) }
                continue
            }
            for (item, result) in zip(chunk, try await run(chunk.map(step))) {
                await perItem(
                    item,
                    result.flatMap { output in
                        value(output).map { .success($0) } ?? .failure(.unexpectedOutput("a batch call"))
                    })
            }
        }
    }

    // MARK: - Accepting

    /// Accepts a share (CloudKit's `accept(_:)`): an invited participant's status becomes accepted;
    /// on a public share the user joins as a public user. Returns once the acceptance is committed;
    /// the zone appears in the user's shared database shortly after, when the residual task runs.
    ///
    /// - Throws: `LedgerError.Code.permissionFailure` without an invitation to a private share (or
    ///   after removal), `LedgerError.Code.unknownItem` for a deleted share,
    ///   `LedgerError.Code.badContainer` when the metadata is of another container.
    public func accept(_ metadata: Share.Metadata) async throws(LedgerError) -> Share {
        guard let result = try await accept([metadata])[metadata] else { throw LedgerError.unexpectedOutput("accept") }
        return try result.get()
    }

    /// Accepts several shares, one result per distinct metadata (CloudKit's `accept(_:)` for many).
    ///
    /// - Throws: `LedgerError.Code.limitExceeded` for more than 400 items (nothing is accepted).
    public func accept(_ metadatas: [Share.Metadata]) async throws(LedgerError) -> [Share.Metadata: Result<Share, LedgerError>] {
        let results = Mutex<[Share.Metadata: Result<Share, LedgerError>]>([:])
        try await acceptShares(metadatas, chunkSize: Container.maxItemsPerOperation, isCancelled: { Task.isCancelled }) {
            metadata, result in results.withLock { $0[metadata] = result }
        }
        return results.withLock { $0 }
    }

    /// The one implementation of accepting, for the async API and the operation (see
    /// ``fetchMetadata(_:shouldFetchRootRecord:desiredKeys:chunkSize:isCancelled:perURL:)``).
    func acceptShares(
        _ metadatas: [Share.Metadata], chunkSize: Int, isCancelled: @Sendable () -> Bool,
        perShare: (Share.Metadata, Result<Share, LedgerError>) async -> Void
    ) async throws(LedgerError) {
        try await runChunked(
            metadatas, what: "shares in one accept", chunkSize: chunkSize, isCancelled: isCancelled,
            step: { metadata in
                if let oneTime = metadata.oneTimeToken {
                    return DomainAction.acceptOneTimeURL(
                        oneTimeToken: oneTime, token: metadata.share.token.text, metadataContainer: metadata.containerIdentifier)
                }
                return DomainAction.accept(
                    token: metadata.share.token.text, metadataContainer: metadata.containerIdentifier,
                    newParticipantID: ledger.newParticipantID())
            },
            value: { output in
                guard case .share(let share) = output else { return nil }
                return share
            },
            perItem: perShare)
    }

    // MARK: - Verification

    /// Starts the proof that an invitation sent to an email or phone is the user's: returns a
    /// one-time code for the host application to deliver to that address. The ledger keeps only its
    /// SHA-256. The code expires after ``verificationLifetime``.
    ///
    /// - Throws: `LedgerError.Code.unknownItem` when no pending invitation with no account matches.
    public func requestParticipantVerification(for shareURL: URL, lookupInfo: LookupInfo) async throws(LedgerError)
        -> ParticipantVerification
    {
        let code = ledger.newVerificationCode()
        let expires = ledger.configuration.clock.nowMicros() + Int64(Container.verificationLifetime * 1_000_000)
        let output = try await runOne(
            .requestVerification(
                token: Container.token(of: shareURL), lookup: lookupInfo, codeSHA256: ShareLedger.sha256(code),
                expiresAtMicros: expires))
        guard case .participantID(let id) = output else { throw LedgerError.unexpectedOutput("requestParticipantVerification") }
        return ParticipantVerification(participantID: id, code: code, expiresAt: Presenter.date(expires))
    }

    /// Completes the proof with the code the user received: the invitation becomes the user's (they
    /// can then fetch the metadata and accept).
    ///
    /// - Throws: `LedgerError.Code.permissionFailure` for a wrong or expired code.
    public func verifyParticipant(for shareURL: URL, code: String) async throws(LedgerError) -> Share {
        try await runShare(
            .verify(token: Container.token(of: shareURL), codeSHA256: ShareLedger.sha256(code.uppercased())),
            "verifyParticipant")
    }

    /// How long a verification code stays valid: 24 hours.
    public static let verificationLifetime: TimeInterval = 24 * 3600

    // MARK: - Queries (no event is appended)

    private func signedInUser() throws(LedgerError) -> String {
        guard let userRecordName = validUser else {
            throw LedgerError(.notAuthenticated, "no signed-in user: act as a registered user")
        }
        return userRecordName
    }

    /// The acting user, who must be registered in this container (`ShareLedger.registerUser`):
    /// a name the container does not know is no account (`notAuthenticated`), as docs/semantics.md says.
    func registeredUser() throws(LedgerError) -> String {
        try Decider.checkContainer(containerIdentifier)
        let user = try signedInUser()
        let ledger = self.ledger
        let container = containerIdentifier
        let registered = try ledger.read("checking the signed-in user") { txn in
            try ledger.models.userExists(txn, container, user)
        }
        guard registered else {
            throw LedgerError(
                .notAuthenticated, "the signed-in user is not registered in container \(container): register the user "
                    + "in this container and act as that user")
        }
        return user
    }

    /// The share at `url` as this user may see it, without recording a fetch: for the owner and the
    /// participants (else `LedgerError.Code.unknownItem`).
    public func share(for url: URL) throws(LedgerError) -> Share {
        let user = try registeredUser()
        let token = try Container.token(of: url)
        let ledger = self.ledger
        let container = containerIdentifier
        return try ledger.read("reading a share") { txn in
            // User record names are per container: in another container the same name is nobody.
            guard let state = try ledger.models.share(txn, token), state.container == container,
                let entry = try ledger.models.participant(txn, of: user, in: state, token: token),
                entry.state.status != .statusRemoved
            else {
                throw LedgerError(.unknownItem, Decider.shareNotFound)
            }
            return try ledger.presenter.share(txn, token: token, state: state, viewer: user)
        }
    }

    /// The metadata of `url` for this user, answered from the read models without recording a fetch
    /// (the same rules as ``shareMetadata(for:)``).
    ///
    /// An answer is kept (``ShareLedger/ShareLedger/Configuration/metadataCacheCapacity``) and given again while the
    /// share's change tag is the same, so a kept answer is always the one the read models give. The
    /// tag is checked in memory when nothing was committed since this process's writer last
    /// committed (no read transaction at all), else in a read transaction.
    public func shareMetadataWithoutLogging(for url: URL) throws(LedgerError) -> Share.Metadata {
        try shareMetadataWithoutLogging(for: url, usingCache: true)
    }

    /// ``shareMetadataWithoutLogging(for:)``, with the cache or (for tests) without it.
    func shareMetadataWithoutLogging(for url: URL, usingCache: Bool) throws(LedgerError) -> Share.Metadata {
        let user = try signedInUser()
        let token = try Container.token(of: url)
        let ledger = self.ledger
        let container = containerIdentifier
        let cache = usingCache ? ledger.metadataCache : nil
        let key = MetadataCache.Key(token: token, container: container, viewer: user)
        let tags = ledger.shareTags
        // A forget by another process drops the kept answers (no read transaction is needed for that).
        try ledger.noticeKeyStoreChanges()
        // Users are never deleted, so a kept answer's viewer still has an account.
        if let cache, let current = tags.currentTag(token), let hit = cache.entry(key),
            hit.validator == current.tag, hit.generation == current.generation
        {
            return hit.metadata
        }
        // Read before the transaction: an answer built from rows a later swap replaced is never used.
        let generation = tags.generation
        return try ledger.read("reading share metadata") { txn in
            try Container.metadata(
                txn, ledger: ledger, token: token, container: container, viewer: user, cache: cache, generation: generation)
        }
    }

    /// The metadata of share `token` for `viewer` in `txn`: a kept answer while the share's change tag
    /// is the one it was built at (and no swap happened since `generation` was read, before `txn`
    /// began), else built (``Presenter/metadata(_:tokenText:container:viewer:fetchRoot:keys:)``) and kept.
    static func metadata(
        _ txn: borrowing Transaction, ledger: ShareLedger, token: String, container: String, viewer: String,
        cache: MetadataCache?, generation: UInt64
    ) throws -> Share.Metadata {
        let key = MetadataCache.Key(token: token, container: container, viewer: viewer)
        let validator = try cache == nil ? nil : ledger.models.shareChangeTag(txn, token: token)
        if let validator { ledger.shareTags.remember(token, tag: validator, snapshot: txn.id) }
        if let cache, let validator, let hit = cache.entry(key), hit.validator == validator, hit.generation == generation {
            return hit.metadata
        }
        let metadata = try ledger.presenter.metadata(
            txn, tokenText: token, container: container, viewer: viewer, fetchRoot: false, keys: nil)
        if let cache, let validator {
            cache.store(key, MetadataCache.Entry(validator: validator, generation: generation, metadata: metadata))
        }
        return metadata
    }

    /// The live shares this user owns in the container, as the owner sees them.
    ///
    /// - Throws: `LedgerError.Code.notAuthenticated` without a registered account.
    public func ownedShares() throws(LedgerError) -> [Share] {
        let user = try registeredUser()
        let container = containerIdentifier
        let ledger = self.ledger
        return try ledger.read("listing shares") { txn in
            try ledger.models.shareTokens(txn, container, owner: user).compactMap { token in
                try ledger.presenter.share(txn, token: token, viewer: user)
            }
        }
    }

    /// The shares this user is a participant of (not the owner), with the given statuses
    /// (by default: accepted and pending). A share the user was removed from or left is never listed:
    /// access ends with the removal, seeing the share's current state included.
    public func participatingShares(
        status: Set<Share.Participant.AcceptanceStatus> = [.accepted, .pending]
    ) throws(LedgerError) -> [Share] {
        let user = try registeredUser()
        let container = containerIdentifier
        let ledger = self.ledger
        return try ledger.read("listing shares") { txn in
            var out: [Share] = []
            for (token, participantID) in try ledger.models.participations(txn, container, user: user) {
                guard let participant = try ledger.models.participant(txn, token, participantID),
                    participant.role != .owner, participant.status != .statusRemoved, status.contains(participant.status.status),
                    let share = try ledger.presenter.share(txn, token: token, viewer: user)
                else { continue }
                out.append(share)
            }
            return out
        }
    }

    /// The zones in this user's shared database: one per owner zone of an accepted share, once the
    /// residual task of the acceptance has run.
    public func sharedDatabaseZones() throws(LedgerError) -> [RecordZoneID] {
        let user = try registeredUser()
        let container = containerIdentifier
        let ledger = self.ledger
        return try ledger.read("listing shared zones") { txn in
            try ledger.models.scan(txn, ledger.models.sharedZones, prefix: ReadModels.key(container, user) + [0]).map { entry in
                let state = try SharedZoneState(serializedBytes: entry.value)
                return RecordZoneID(zoneName: state.zoneName, ownerName: state.ownerName)
            }
        }
    }
}

/// A started participant verification: deliver ``code`` to the invited email or phone.
public struct ParticipantVerification: Sendable, Hashable {
    /// The participant the code proves.
    public var participantID: String
    /// The one-time code (26 characters of Crockford's base32). The ledger stores only its SHA-256.
    public var code: String
    /// When the code stops working.
    public var expiresAt: Date
}
