import Dispatch
import Foundation
import Logging
import SharingDomain
import Synchronization

/// The base of the operation-style API, for code ported from CloudKit's `CKOperation`s: configure
/// an operation, set its blocks, hand it to ``Container/add(_:)``.
///
/// - Its blocks run on a private serial queue of the operation: one per-item block per distinct
///   input item (duplicates are done once), in input order, then the completion block, once.
/// - ``cancel()`` before or during the run ends the items not yet done with
///   `LedgerError.Code.operationCancelled`.
/// - An operation runs once; adding it again does nothing.
///
/// The async methods of ``Container`` (`shareMetadatas(for:)`, `accept(_:)`) and these operations
/// share one implementation.
public class LedgerOperation: @unchecked Sendable {
    // @unchecked: every stored property is a `Mutex` or immutable; subclasses keep theirs in a Mutex too.
    private struct RunState {
        var started = false
        var cancelled = false
        var finished = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let runState = Mutex(RunState())
    /// The serial queue the blocks run on.
    let callbackQueue: DispatchQueue

    init(label: String) {
        callbackQueue = DispatchQueue(label: "ShareLedger.\(label)")
    }

    /// Stops the operation: items not yet done end with `LedgerError.Code.operationCancelled`.
    public func cancel() {
        runState.withLock { $0.cancelled = true }
    }

    /// Whether ``cancel()`` was called.
    public var isCancelled: Bool { runState.withLock { $0.cancelled } }

    /// Whether the operation ran and its completion block returned.
    public var isFinished: Bool { runState.withLock { $0.finished } }

    /// Returns once the operation has finished (its completion block has run).
    public func waitUntilFinished() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = runState.withLock { state -> Bool in
                if state.finished { return true }
                state.waiters.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }

    /// Marks the start; false when the operation ran before.
    func claimStart() -> Bool {
        runState.withLock { state in
            guard !state.started else { return false }
            state.started = true
            return true
        }
    }

    /// Runs `completion` on the callback queue after every block queued so far, then marks the
    /// operation finished and wakes the waiters.
    func finish(_ completion: @escaping @Sendable () -> Void) {
        callbackQueue.async { [self] in
            completion()
            let waiters = runState.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.finished = true
                defer { state.waiters.removeAll() }
                return state.waiters
            }
            for waiter in waiters { waiter.resume() }
        }
    }

    /// Runs `block` on the callback queue and returns when it has run, so that an item's block runs
    /// before the next items are submitted (a `cancel()` from a block takes effect at once).
    static func deliver(on queue: DispatchQueue, _ block: @escaping @Sendable () -> Void) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            queue.async {
                block()
                continuation.resume()
            }
        }
    }

    /// The operation's work; subclasses override it.
    func main(in container: Container) async {}

    /// The run every operation shares: `items` (the container's implementation, which reports each
    /// distinct item once) runs; each item's result goes to `perItem` on the callback queue before the
    /// next items are submitted; then `completion` gets success, `partialFailure` with the error of
    /// each failed item (keyed by `key`), or the error that failed the whole request.
    func run<Item: Sendable, Value: Sendable>(
        what: String, key: @escaping @Sendable (Item) -> String,
        perItem: @escaping @Sendable (Item, Result<Value, LedgerError>) -> Void,
        completion: @escaping @Sendable (Result<Void, LedgerError>) -> Void,
        items: ((Item, Result<Value, LedgerError>) async -> Void) async throws(LedgerError) -> Void
    ) async {
        let queue = callbackQueue
        let failures = Mutex<[String: LedgerError]>([:])
        let outcome: Result<Void, LedgerError>
        do {
            try await items { item, result in
                if case .failure(let error) = result { failures.withLock { $0[key(item)] = error } }
                await LedgerOperation.deliver(on: queue) { perItem(item, result) }
            }
            outcome = LedgerOperation.overall(failures.withLock { $0 }, what: what)
        } catch {
            outcome = .failure(error)
        }
        finish { completion(outcome) }
    }

    /// The overall result: success, or `partialFailure` with the error of every failed item.
    static func overall(_ failures: [String: LedgerError], what: String) -> Result<Void, LedgerError> {
        guard !failures.isEmpty else { return .success(()) }
        return .failure(
            LedgerError(
                .partialFailure, "\(failures.count) of the \(what) failed; partialErrors has each one's error",
                partialErrors: failures))
    }
}

/// Fetches the metadata of share URLs (CloudKit's `CKFetchShareMetadataOperation`).
///
/// ```swift
/// let operation = FetchShareMetadataOperation(shareURLs: urls)
/// operation.shouldFetchRootRecord = true
/// operation.perShareMetadataResultBlock = { url, result in ... }
/// operation.fetchShareMetadataResultBlock = { result in ... }
/// container.add(operation)
/// ```
public final class FetchShareMetadataOperation: LedgerOperation, @unchecked Sendable {
    // @unchecked: the configuration lives in `configuration`, a Mutex.
    private struct Configuration {
        var shareURLs: [URL]?
        var shouldFetchRootRecord = false
        var rootRecordDesiredKeys: [String]?
        var perShareMetadataResultBlock: (@Sendable (URL, Result<Share.Metadata, LedgerError>) -> Void)?
        var fetchShareMetadataResultBlock: (@Sendable (Result<Void, LedgerError>) -> Void)?
        var perShareMetadataBlock: (@Sendable (URL, Share.Metadata?, LedgerError?) -> Void)?
        var fetchShareMetadataCompletionBlock: (@Sendable (LedgerError?) -> Void)?
    }

    private let configuration = Mutex(Configuration())

    /// An operation with no URLs; set ``shareURLs`` before adding it.
    public init() { super.init(label: "FetchShareMetadataOperation") }

    /// An operation that fetches the metadata of `shareURLs`.
    public convenience init(shareURLs: [URL]) {
        self.init()
        self.shareURLs = shareURLs
    }

    /// The URLs to fetch (at most 400).
    public var shareURLs: [URL]? {
        get { configuration.withLock { $0.shareURLs } }
        set { configuration.withLock { $0.shareURLs = newValue } }
    }

    /// Include the root record of hierarchy shares (default `false`; ignored for zone-wide shares).
    public var shouldFetchRootRecord: Bool {
        get { configuration.withLock { $0.shouldFetchRootRecord } }
        set { configuration.withLock { $0.shouldFetchRootRecord = newValue } }
    }

    /// The root record's fields to include: `nil` (default) for all, `[]` for none.
    public var rootRecordDesiredKeys: [String]? {
        get { configuration.withLock { $0.rootRecordDesiredKeys } }
        set { configuration.withLock { $0.rootRecordDesiredKeys = newValue } }
    }

    /// Called once per URL with its metadata or error.
    public var perShareMetadataResultBlock: (@Sendable (URL, Result<Share.Metadata, LedgerError>) -> Void)? {
        get { configuration.withLock { $0.perShareMetadataResultBlock } }
        set { configuration.withLock { $0.perShareMetadataResultBlock = newValue } }
    }

    /// Called once, last: success, or `partialFailure` with the error of each failed URL (keyed by
    /// the URL's `absoluteString`), or the error that failed the whole request.
    public var fetchShareMetadataResultBlock: (@Sendable (Result<Void, LedgerError>) -> Void)? {
        get { configuration.withLock { $0.fetchShareMetadataResultBlock } }
        set { configuration.withLock { $0.fetchShareMetadataResultBlock = newValue } }
    }

    /// Deprecated in CloudKit: the per-URL block with optionals. Called after ``perShareMetadataResultBlock``.
    public var perShareMetadataBlock: (@Sendable (URL, Share.Metadata?, LedgerError?) -> Void)? {
        get { configuration.withLock { $0.perShareMetadataBlock } }
        set { configuration.withLock { $0.perShareMetadataBlock = newValue } }
    }

    /// Deprecated in CloudKit: the completion with an optional error. Called after ``fetchShareMetadataResultBlock``.
    public var fetchShareMetadataCompletionBlock: (@Sendable (LedgerError?) -> Void)? {
        get { configuration.withLock { $0.fetchShareMetadataCompletionBlock } }
        set { configuration.withLock { $0.fetchShareMetadataCompletionBlock = newValue } }
    }

    override func main(in container: Container) async {
        let config = configuration.withLock { $0 }
        await run(
            what: "share URLs", key: { (url: URL) in url.absoluteString },
            perItem: { (url: URL, result: Result<Share.Metadata, LedgerError>) in
                config.perShareMetadataResultBlock?(url, result)
                config.perShareMetadataBlock?(url, try? result.get(), result.failure)
            },
            completion: { outcome in
                config.fetchShareMetadataResultBlock?(outcome)
                config.fetchShareMetadataCompletionBlock?(outcome.failure)
            }
        ) { report throws(LedgerError) in
            try await container.fetchMetadata(
                config.shareURLs ?? [], shouldFetchRootRecord: config.shouldFetchRootRecord,
                desiredKeys: config.rootRecordDesiredKeys, chunkSize: LedgerOperationLimits.chunk,
                isCancelled: { [self] in self.isCancelled }, perURL: report)
        }
    }
}

/// Accepts shares (CloudKit's `CKAcceptSharesOperation`). Add it to the container of the shares'
/// `Share.Metadata.containerIdentifier`: a metadata of another container fails with
/// `LedgerError.Code.badContainer`.
public final class AcceptSharesOperation: LedgerOperation, @unchecked Sendable {
    // @unchecked: the configuration lives in `configuration`, a Mutex.
    private struct Configuration {
        var shareMetadatas: [Share.Metadata]?
        var perShareResultBlock: (@Sendable (Share.Metadata, Result<Share, LedgerError>) -> Void)?
        var acceptSharesResultBlock: (@Sendable (Result<Void, LedgerError>) -> Void)?
        var perShareCompletionBlock: (@Sendable (Share.Metadata, Share?, LedgerError?) -> Void)?
        var acceptSharesCompletionBlock: (@Sendable (LedgerError?) -> Void)?
    }

    private let configuration = Mutex(Configuration())

    /// An operation with no metadatas; set ``shareMetadatas`` before adding it.
    public init() { super.init(label: "AcceptSharesOperation") }

    /// An operation that accepts the shares of `shareMetadatas`.
    public convenience init(shareMetadatas: [Share.Metadata]) {
        self.init()
        self.shareMetadatas = shareMetadatas
    }

    /// The shares to accept (at most 400).
    public var shareMetadatas: [Share.Metadata]? {
        get { configuration.withLock { $0.shareMetadatas } }
        set { configuration.withLock { $0.shareMetadatas = newValue } }
    }

    /// Called once per metadata with the accepted share or the error.
    public var perShareResultBlock: (@Sendable (Share.Metadata, Result<Share, LedgerError>) -> Void)? {
        get { configuration.withLock { $0.perShareResultBlock } }
        set { configuration.withLock { $0.perShareResultBlock = newValue } }
    }

    /// Called once, last: success, or `partialFailure` with the error of each failed share (keyed by
    /// its URL's `absoluteString`), or the error that failed the whole request.
    public var acceptSharesResultBlock: (@Sendable (Result<Void, LedgerError>) -> Void)? {
        get { configuration.withLock { $0.acceptSharesResultBlock } }
        set { configuration.withLock { $0.acceptSharesResultBlock = newValue } }
    }

    /// Deprecated in CloudKit: the per-share block with optionals. Called after ``perShareResultBlock``.
    public var perShareCompletionBlock: (@Sendable (Share.Metadata, Share?, LedgerError?) -> Void)? {
        get { configuration.withLock { $0.perShareCompletionBlock } }
        set { configuration.withLock { $0.perShareCompletionBlock = newValue } }
    }

    /// Deprecated in CloudKit: the completion with an optional error. Called after ``acceptSharesResultBlock``.
    public var acceptSharesCompletionBlock: (@Sendable (LedgerError?) -> Void)? {
        get { configuration.withLock { $0.acceptSharesCompletionBlock } }
        set { configuration.withLock { $0.acceptSharesCompletionBlock = newValue } }
    }

    override func main(in container: Container) async {
        let config = configuration.withLock { $0 }
        await run(
            what: "shares", key: { (metadata: Share.Metadata) in metadata.share.url.absoluteString },
            perItem: { (metadata: Share.Metadata, result: Result<Share, LedgerError>) in
                config.perShareResultBlock?(metadata, result)
                config.perShareCompletionBlock?(metadata, try? result.get(), result.failure)
            },
            completion: { outcome in
                config.acceptSharesResultBlock?(outcome)
                config.acceptSharesCompletionBlock?(outcome.failure)
            }
        ) { report throws(LedgerError) in
            try await container.acceptShares(
                config.shareMetadatas ?? [], chunkSize: LedgerOperationLimits.chunk,
                isCancelled: { [self] in self.isCancelled }, perShare: report)
        }
    }
}

extension Result {
    /// The error of a failure, nil for a success (for CloudKit's deprecated optional-error blocks).
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

enum LedgerOperationLimits {
    /// Items an operation submits per command, so that a cancel takes effect between chunks.
    static let chunk = 16
}

extension Container {
    /// Runs `operation` (once) in this container, acting as this container's user, and returns at
    /// once; the operation's blocks report its progress. Await ``LedgerOperation/waitUntilFinished()``
    /// to wait for it.
    public func add(_ operation: LedgerOperation) {
        guard operation.claimStart() else {
            ledger.configuration.logger.warning("an operation was added a second time; an operation runs once")
            return
        }
        // Operations run in the background by definition (CloudKit's operation queue): an
        // unstructured task is the operation's own lifetime, ended by its completion block.
        Task { await operation.main(in: self) }
    }
}
