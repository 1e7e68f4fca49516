import Foundation
import LMDB
import SharingDomain
import SwiftProtobuf
import Synchronization

extension Container {
    // MARK: - Share metadata

    /// The metadata of one share URL, relative to this user (CloudKit's `shareMetadata(for:)`).
    ///
    /// - Throws: `LedgerError.Code.unknownItem` for an unknown or deleted share, and for a private
    ///   share the user is not in; `LedgerError.Code.participantMayNeedVerification` when the user is
    ///   not in a private share that has invitations to emails or phones with no account;
    ///   `LedgerError.Code.notAuthenticated` without an account.
    public func shareMetadata(for url: URL) async throws(LedgerError) -> Share.Metadata {
        try await Container.onlyResult("shareMetadata") { (record) async throws(LedgerError) in
            try await fetchMetadata(
                [url], shouldFetchRootRecord: false, desiredKeys: nil, chunkSize: 1, isCancelled: { Task.isCancelled }
            ) { _, outcome in record(outcome) }
        }
    }

    /// The one result of a batch call made for one item: `run` hands it to `record`. Kept as it
    /// comes, not in the dictionary the batch calls return, keyed by the item: hashing a URL hashes
    /// its text, and a metadata value its whole share.
    static func onlyResult<Value: Sendable>(
        _ call: String, _ run: (_ record: (Result<Value, LedgerError>) -> Void) async throws(LedgerError) -> Void
    ) async throws(LedgerError) -> Value {
        let result = Mutex<Result<Value, LedgerError>?>(nil)
        try await run { outcome in result.withLock { $0 = outcome } }
        guard let outcome = result.withLock({ $0 }) else { throw LedgerError.unexpectedOutput(call) }
        return try outcome.get()
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
        // One item is distinct as it is (hashing a metadata value hashes its whole share).
        let distinct = items.count < 2 ? items : items.filter { seen.insert($0).inserted }
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
}

extension Container {
    // MARK: - Accepting

    /// Accepts a share (CloudKit's `accept(_:)`): an invited participant's status becomes accepted;
    /// on a public share the user joins as a public user. Returns once the acceptance is committed;
    /// the zone appears in the user's shared database shortly after, when the residual task runs.
    ///
    /// - Throws: `LedgerError.Code.permissionFailure` without an invitation to a private share (or
    ///   after removal), `LedgerError.Code.unknownItem` for a deleted share,
    ///   `LedgerError.Code.badContainer` when the metadata is of another container.
    public func accept(_ metadata: Share.Metadata) async throws(LedgerError) -> Share {
        try await Container.onlyResult("accept") { (record) async throws(LedgerError) in
            try await acceptShares([metadata], chunkSize: 1, isCancelled: { Task.isCancelled }) { _, outcome in record(outcome) }
        }
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
}
