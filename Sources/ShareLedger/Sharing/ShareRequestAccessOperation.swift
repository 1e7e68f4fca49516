import Foundation
import SharingDomain
import Synchronization

/// Asks to join shares by their URLs (CloudKit's `CKShareRequestAccessOperation`), with the rules of
/// ``Container/requestShareAccess(for:)``: one result per distinct URL, and the answer of an unknown URL for
/// a share that does not allow access requests or has blocked the caller.
///
/// ```swift
/// let operation = ShareRequestAccessOperation(shareURLs: [url])
/// operation.perShareAccessRequestResultBlock = { url, result in ... }
/// operation.shareAccessRequestResultBlock = { result in ... }
/// container.add(operation)
/// ```
///
/// With no URLs it finishes at once with no results.
public final class ShareRequestAccessOperation: LedgerOperation, @unchecked Sendable {
    // @unchecked: the configuration lives in `configuration`, a Mutex.
    private struct Configuration {
        var shareURLs: [URL]?
        var perShareAccessRequestResultBlock: (@Sendable (URL, Result<Void, LedgerError>) -> Void)?
        var shareAccessRequestResultBlock: (@Sendable (Result<Void, LedgerError>) -> Void)?
    }

    private let configuration = Mutex(Configuration())

    /// An operation with no URLs; set ``shareURLs`` before adding it.
    public init() { super.init(label: "ShareRequestAccessOperation") }

    /// An operation that asks to join the shares at `shareURLs`.
    public convenience init(shareURLs: [URL]) {
        self.init()
        self.shareURLs = shareURLs
    }

    /// The share URLs to ask for (at most 400; duplicates are asked for once).
    public var shareURLs: [URL]? {
        get { configuration.withLock { $0.shareURLs } }
        set { configuration.withLock { $0.shareURLs = newValue } }
    }

    /// Called once per distinct URL with its outcome.
    public var perShareAccessRequestResultBlock: (@Sendable (URL, Result<Void, LedgerError>) -> Void)? {
        get { configuration.withLock { $0.perShareAccessRequestResultBlock } }
        set { configuration.withLock { $0.perShareAccessRequestResultBlock = newValue } }
    }

    /// Called once, last: success, or `partialFailure` with the error of each failed URL (keyed by the
    /// URL's text), or the error that failed the whole request (`LedgerError.Code.notAuthenticated`,
    /// `LedgerError.Code.limitExceeded`).
    public var shareAccessRequestResultBlock: (@Sendable (Result<Void, LedgerError>) -> Void)? {
        get { configuration.withLock { $0.shareAccessRequestResultBlock } }
        set { configuration.withLock { $0.shareAccessRequestResultBlock = newValue } }
    }

    override func main(in container: Container) async {
        let config = configuration.withLock { $0 }
        let urls = config.shareURLs ?? []
        await run(
            what: "share URLs", key: { (url: URL) in url.absoluteString },
            perItem: { (url: URL, result: Result<Void, LedgerError>) in config.perShareAccessRequestResultBlock?(url, result) },
            completion: { outcome in config.shareAccessRequestResultBlock?(outcome) }
        ) { report throws(LedgerError) in
            try await container.requestAccess(
                urls, chunkSize: LedgerOperationLimits.chunk, isCancelled: { [self] in self.isCancelled }, perURL: report)
        }
    }
}
