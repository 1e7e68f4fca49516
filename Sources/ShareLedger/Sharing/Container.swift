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
    var validUser: String? {
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
        // Read before the command is decided: a fetch's decided standing is used for its answer only
        // if no swap happened since (see `generation`).
        let generationBefore = ledger.shareTags.generation
        let results = try await ledger.submit(command).results
        // The answers are built here, after the commit, in one short read transaction. Metadata a
        // fetch asked for may be a kept answer (``shareMetadataWithoutLogging(for:)``'s).
        let container = containerIdentifier
        let ledger = self.ledger
        let generation = ledger.shareTags.generation
        let presenter = ledger.store.presenter(answersGeneration: generation)
        return try ledger.read("reading the results") { txn in
            // Each result looked at in place (mapping them copied every answer twice).
            var outputs: [Result<StepOutput, LedgerError>] = []
            outputs.reserveCapacity(results.count)
            for index in results.indices {
                switch results[index] {
                case .failure(let error):
                    outputs.append(.failure(error))
                case .success(let answer):
                    do {
                        if case .metadata(let token, false, _, let decided) = answer {
                            outputs.append(
                                .success(
                                    .metadata(
                                        try Container.metadata(
                                            txn, ledger: ledger, token: token, container: container, viewer: metadata.actor,
                                            cache: ledger.metadataCache, generation: generation,
                                            decided: generationBefore == generation ? decided : nil))))
                        } else {
                            outputs.append(.success(try presenter.present(answer, container: container, viewer: metadata.actor, txn)))
                        }
                    } catch let error as LedgerError {
                        outputs.append(.failure(error))
                    } catch {
                        outputs.append(.failure(LedgerError.wrap(error, while: "reading the result")))
                    }
                }
            }
            return outputs
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

    // MARK: - Queries (no event is appended)

    func signedInUser() throws(LedgerError) -> String {
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
        let container = containerIdentifier
        guard try ledger.store.isRegistered(user, in: container) else {
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

    /// ``shareMetadataWithoutLogging(for:)``, with the cache or (for tests) without anything kept.
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
                txn, ledger: ledger, token: token, container: container, viewer: user, cache: cache, generation: generation,
                keepingNothing: !usingCache)
        }
    }

    /// The metadata of share `token` for `viewer` in `txn`: a kept answer while the share's change tag
    /// is the one it was built at (and no swap happened since `generation` was read, before `txn`
    /// began), else built (``Presenter/metadata(_:tokenText:container:viewer:fetchRoot:keys:known:)``) and kept.
    /// `decided`: the standing a logged fetch's decision found, reported while the share's change tag
    /// is still the one it found (the same test a kept answer passes; the caller passes it only when
    /// no swap happened since the decision). With `keepingNothing` (tests' fresh answers), nothing
    /// kept or decided is used at all.
    static func metadata(
        _ txn: borrowing Transaction, ledger: ShareLedger, token: String, container: String, viewer: String,
        cache: MetadataCache?, generation: UInt64, keepingNothing: Bool = false, decided: MetadataStanding? = nil
    ) throws -> Share.Metadata {
        let key = MetadataCache.Key(token: token, container: container, viewer: viewer)
        let validator = try cache == nil && decided == nil ? nil : ledger.models.shareChangeTag(txn, token: token)
        if cache != nil, let validator { ledger.shareTags.remember(token, tag: validator, snapshot: txn.id) }
        if let cache, let validator, let hit = cache.entry(key), hit.validator == validator, hit.generation == generation {
            return hit.metadata
        }
        let presenter = keepingNothing ? ledger.store.presenterKeepingNothing : ledger.store.presenter(answersGeneration: generation)
        let known = keepingNothing ? nil : decided.flatMap { $0.share.changeTag == validator ? $0 : nil }
        let metadata = try presenter.metadata(
            txn, tokenText: token, container: container, viewer: viewer, fetchRoot: false, keys: nil, known: known)
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
