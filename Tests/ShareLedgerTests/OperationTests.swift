import Foundation
import ShareLedger
import Synchronization
import TestSupport
import Testing

/// Ports of the two examples of CloudKit's sharing documentation, run against the ledger, and the
/// operation rules (callbacks per item then completion, partialFailure, cancel, run once).
@Suite("Operations")
struct OperationTests {
    @Test("CloudKit example: fetch share metadata with the root record, caching each URL's metadata")
    func fetchWithRootAndCache() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly)
        let unknown = URL(string: "https://share.localhost/share/0ZZZZZZZZZZZZZZZZZZZZZZZZZ")!

        // As in the documentation: a cache filled by the per-URL block, an error report at the end.
        let cache = Mutex<[URL: Share.Metadata]>([:])
        let order = Mutex<[String]>([])
        let completion = Mutex<Result<Void, LedgerError>?>(nil)
        let operation = FetchShareMetadataOperation(shareURLs: [share.url, unknown])
        operation.shouldFetchRootRecord = true
        operation.perShareMetadataResultBlock = { url, result in
            order.withLock { $0.append("item") }
            if case .success(let metadata) = result { cache.withLock { $0[url] = metadata } }
        }
        operation.perShareMetadataBlock = { _, _, _ in order.withLock { $0.append("legacy-item") } }
        operation.fetchShareMetadataResultBlock = { result in
            order.withLock { $0.append("done") }
            completion.withLock { $0 = result }
        }
        operation.fetchShareMetadataCompletionBlock = { _ in order.withLock { $0.append("legacy-done") } }
        f.bob.add(operation)
        await operation.waitUntilFinished()

        #expect(operation.isFinished)
        #expect(order.withLock { $0 } == ["item", "legacy-item", "item", "legacy-item", "done", "legacy-done"])
        let metadata = try #require(cache.withLock { $0[share.url] })
        #expect(metadata.rootRecord?.recordID.recordName == "list")
        #expect(metadata.participantStatus == .pending)
        let result = try #require(completion.withLock { $0 })
        guard case .failure(let error) = result else {
            Issue.record("expected partialFailure")
            return
        }
        #expect(error.code == .partialFailure)
        #expect(error.partialErrors[unknown.absoluteString]?.code == .unknownItem)
        #expect(error.partialErrors.count == 1)
        await f.ledger.close()
    }

    @Test("CloudKit example: accept share metadatas grouped by container, one operation per container")
    func acceptGroupedByContainer() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly)
        // A second container with its own share for Bob.
        let other = "iCloud.com.example.recipes"
        try await f.ledger.registerUser("_alice", in: other)
        try await f.ledger.registerUser("_bob", in: other)
        let aliceOther = f.ledger.container(other, userRecordName: "_alice")
        _ = try await aliceOther.save(RecordZone(zoneID: RecordZoneID(zoneName: "R")))
        _ = try await aliceOther.save(Record(recordType: "Recipe", recordID: RecordID(recordName: "soup", zoneID: RecordZoneID(zoneName: "R"))))
        let share2 = try await aliceOther.share(rootRecord: RecordID(recordName: "soup", zoneID: RecordZoneID(zoneName: "R")), publicPermission: .readOnly)

        let metadatas = try await f.bob.shareMetadatas(for: [share.url, share2.url]).values.map { try $0.get() }
        // As in the documentation: group by container, add one operation to each container.
        let accepted = Mutex<[String]>([])
        var operations: [AcceptSharesOperation] = []
        for (containerIdentifier, group) in Dictionary(grouping: metadatas, by: \.containerIdentifier) {
            let operation = AcceptSharesOperation(shareMetadatas: group)
            operation.perShareResultBlock = { metadata, result in
                if case .success = result { accepted.withLock { $0.append(metadata.containerIdentifier) } }
            }
            f.ledger.container(containerIdentifier, userRecordName: "_bob").add(operation)
            operations.append(operation)
        }
        for operation in operations { await operation.waitUntilFinished() }
        #expect(accepted.withLock { $0 }.sorted() == [other, SharingFixture.container].sorted())
        #expect(try f.bob.participatingShares(status: [.accepted]).count == 1)
        #expect(try f.ledger.container(other, userRecordName: "_bob").participatingShares(status: [.accepted]).count == 1)

        // The same metadata in the wrong container fails that item, and the completion says so.
        let wrong = AcceptSharesOperation(shareMetadatas: metadatas)
        let completion = Mutex<LedgerError?>(nil)
        wrong.acceptSharesCompletionBlock = { error in completion.withLock { $0 = error } }
        f.bob.add(wrong)
        await wrong.waitUntilFinished()
        let error = try #require(completion.withLock { $0 })
        #expect(error.code == .partialFailure)
        #expect(error.partialErrors[share2.url.absoluteString]?.code == .badContainer)
        #expect(error.partialErrors[share.url.absoluteString] == nil)
        await f.ledger.close()
    }

    @Test("cancel before the run ends every item with operationCancelled; an operation runs once")
    func cancelAndRunOnce() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let events = try f.ledger.statistics().events
        let urls = (0..<40).map { URL(string: share.url.absoluteString.replacingOccurrences(of: "#", with: "?n=\($0)#"))! }
        let codes = Mutex<[LedgerError.Code]>([])
        let completions = Counter()
        let operation = FetchShareMetadataOperation(shareURLs: urls)
        operation.perShareMetadataResultBlock = { _, result in
            if case .failure(let error) = result { codes.withLock { $0.append(error.code) } }
        }
        operation.fetchShareMetadataResultBlock = { _ in completions.increment() }
        operation.cancel()
        f.alice.add(operation)
        await operation.waitUntilFinished()
        #expect(codes.withLock { $0 }.count == 40)
        #expect(codes.withLock { $0 }.allSatisfy { $0 == .operationCancelled })
        #expect(try f.ledger.statistics().events == events)
        f.alice.add(operation)
        try await Task.sleep(for: .milliseconds(50))
        #expect(completions.value == 1)
        await f.ledger.close()
    }

    @Test("cancel during the run: items already done keep their results, the rest are cancelled")
    func cancelDuringRun() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let urls = (0..<64).map { URL(string: share.url.absoluteString.replacingOccurrences(of: "#", with: "?n=\($0)#"))! }
        let successes = Counter()
        let cancelled = Counter()
        let operation = FetchShareMetadataOperation(shareURLs: urls)
        operation.perShareMetadataResultBlock = { _, result in
            switch result {
            case .success:
                successes.increment()
                operation.cancel()
            case .failure(let error):
                if error.code == .operationCancelled { cancelled.increment() }
            }
        }
        f.alice.add(operation)
        await operation.waitUntilFinished()
        // The first chunk (16 URLs, one command) was done when the cancel came; the rest were not sent.
        #expect(successes.value == 16)
        #expect(cancelled.value == 48)
        await f.ledger.close()
    }

    @Test("more than 400 items fail the whole operation with limitExceeded and no per-item calls")
    func tooMany() async throws {
        let f = try await SharingFixture()
        let items = Counter()
        let completion = Mutex<LedgerError?>(nil)
        let operation = FetchShareMetadataOperation(
            shareURLs: (0..<401).map { URL(string: "https://share.localhost/share/x\($0)")! })
        operation.perShareMetadataResultBlock = { _, _ in items.increment() }
        operation.fetchShareMetadataCompletionBlock = { error in completion.withLock { $0 = error } }
        f.alice.add(operation)
        await operation.waitUntilFinished()
        #expect(items.value == 0)
        #expect(completion.withLock { $0 }?.code == .limitExceeded)
        await f.ledger.close()
    }
}
