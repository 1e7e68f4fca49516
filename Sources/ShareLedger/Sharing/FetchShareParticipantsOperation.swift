import Foundation
import SharingDomain
import Synchronization

/// Looks up the people to invite (CloudKit's `CKFetchShareParticipantsOperation`): each lookup info
/// becomes a participant to pass to ``Container/addParticipant(_:to:ifChangeTag:)``, with the rules
/// of ``Container/shareParticipants(for:)``.
///
/// ```swift
/// let operation = FetchShareParticipantsOperation(userIdentityLookupInfos: [
///     LookupInfo(emailAddress: "bob@example.com"), LookupInfo(phoneNumber: "+1 555 0100"),
/// ])
/// operation.perShareParticipantResultBlock = { lookupInfo, result in ... }
/// operation.fetchShareParticipantsResultBlock = { result in ... }
/// container.add(operation)
/// ```
///
/// With no lookup infos it finishes at once with no results, as CloudKit's does.
public final class FetchShareParticipantsOperation: LedgerOperation, @unchecked Sendable {
    // @unchecked: the configuration lives in `configuration`, a Mutex.
    private struct Configuration {
        var userIdentityLookupInfos: [LookupInfo]?
        var perShareParticipantResultBlock: (@Sendable (LookupInfo, Result<Share.Participant, LedgerError>) -> Void)?
        var fetchShareParticipantsResultBlock: (@Sendable (Result<Void, LedgerError>) -> Void)?
        var perShareParticipantCompletionBlock: (@Sendable (LookupInfo, Share.Participant?, LedgerError?) -> Void)?
        var shareParticipantFetchedBlock: (@Sendable (Share.Participant) -> Void)?
        var fetchShareParticipantsCompletionBlock: (@Sendable (LedgerError?) -> Void)?
    }

    private let configuration = Mutex(Configuration())

    /// An operation with no lookup infos; set ``userIdentityLookupInfos`` before adding it.
    public init() { super.init(label: "FetchShareParticipantsOperation") }

    /// An operation that looks up `userIdentityLookupInfos`.
    public convenience init(userIdentityLookupInfos: [LookupInfo]) {
        self.init()
        self.userIdentityLookupInfos = userIdentityLookupInfos
    }

    /// The people to look up (at most 400; duplicates are looked up once).
    public var userIdentityLookupInfos: [LookupInfo]? {
        get { configuration.withLock { $0.userIdentityLookupInfos } }
        set { configuration.withLock { $0.userIdentityLookupInfos = newValue } }
    }

    /// Called once per distinct lookup info with its participant or error.
    public var perShareParticipantResultBlock: (@Sendable (LookupInfo, Result<Share.Participant, LedgerError>) -> Void)? {
        get { configuration.withLock { $0.perShareParticipantResultBlock } }
        set { configuration.withLock { $0.perShareParticipantResultBlock = newValue } }
    }

    /// Called once, last: success, or `partialFailure` with the error of each failed lookup (keyed by
    /// the lookup info's `description`: `user _name`, or for an email address or phone number only a
    /// placeholder such as `<email #3f2a91c0d4e1>`, so that the error carries no personal data; look an
    /// error up with `partialErrors[lookup.description]` in the same process), or the error that failed the
    /// whole request (`LedgerError.Code.notAuthenticated`, `LedgerError.Code.limitExceeded`).
    public var fetchShareParticipantsResultBlock: (@Sendable (Result<Void, LedgerError>) -> Void)? {
        get { configuration.withLock { $0.fetchShareParticipantsResultBlock } }
        set { configuration.withLock { $0.fetchShareParticipantsResultBlock = newValue } }
    }

    /// Deprecated in CloudKit: the per-lookup block with optionals. Called after ``perShareParticipantResultBlock``.
    public var perShareParticipantCompletionBlock: (@Sendable (LookupInfo, Share.Participant?, LedgerError?) -> Void)? {
        get { configuration.withLock { $0.perShareParticipantCompletionBlock } }
        set { configuration.withLock { $0.perShareParticipantCompletionBlock = newValue } }
    }

    /// Deprecated in CloudKit: called with each participant found (not for failed lookups). Called after
    /// ``perShareParticipantCompletionBlock``.
    public var shareParticipantFetchedBlock: (@Sendable (Share.Participant) -> Void)? {
        get { configuration.withLock { $0.shareParticipantFetchedBlock } }
        set { configuration.withLock { $0.shareParticipantFetchedBlock = newValue } }
    }

    /// Deprecated in CloudKit: the completion with an optional error. Called after ``fetchShareParticipantsResultBlock``.
    public var fetchShareParticipantsCompletionBlock: (@Sendable (LedgerError?) -> Void)? {
        get { configuration.withLock { $0.fetchShareParticipantsCompletionBlock } }
        set { configuration.withLock { $0.fetchShareParticipantsCompletionBlock = newValue } }
    }

    override func main(in container: Container) async {
        let config = configuration.withLock { $0 }
        let lookups = config.userIdentityLookupInfos ?? []
        await run(
            what: "lookup infos", key: { (lookup: LookupInfo) in lookup.description },
            perItem: { (lookup: LookupInfo, result: Result<Share.Participant, LedgerError>) in
                config.perShareParticipantResultBlock?(lookup, result)
                config.perShareParticipantCompletionBlock?(lookup, try? result.get(), result.failure)
                if case .success(let participant) = result { config.shareParticipantFetchedBlock?(participant) }
            },
            completion: { outcome in
                config.fetchShareParticipantsResultBlock?(outcome)
                config.fetchShareParticipantsCompletionBlock?(outcome.failure)
            }
        ) { report throws(LedgerError) in
            try await container.fetchParticipants(
                lookups, chunkSize: LedgerOperationLimits.chunk, isCancelled: { [self] in self.isCancelled },
                perLookup: report)
        }
    }
}
