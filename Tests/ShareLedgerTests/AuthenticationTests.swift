import Foundation
import ShareLedger
import Synchronization
import TestSupport
import Testing

/// CloudKit's answers without an account, for a name the container does not know, and from another
/// container.
@Suite("Authentication and containers")
struct AuthenticationTests {
    @Test("without an account the batch calls and both operations fail as a whole with notAuthenticated, logging nothing")
    func batchCallsFailWhole() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let metadata = try await f.alice.shareMetadata(for: share.url)
        let head = try f.ledger.log.head()
        for user in [nil, "_nobody"] as [String?] {
            let stranger = f.as_(user)
            #expect(await errorCode { try await stranger.shareMetadatas(for: [share.url]) } == .notAuthenticated, "\(user ?? "nil")")
            #expect(await errorCode { try await stranger.accept([metadata]) } == .notAuthenticated, "\(user ?? "nil")")
            #expect(await errorCode { try await stranger.shareMetadata(for: share.url) } == .notAuthenticated)

            let items = Mutex(0)
            let fetched = Mutex<Result<Void, LedgerError>?>(nil)
            let fetch = FetchShareMetadataOperation(shareURLs: [share.url])
            fetch.perShareMetadataResultBlock = { _, _ in items.withLock { $0 += 1 } }
            fetch.fetchShareMetadataResultBlock = { result in fetched.withLock { $0 = result } }
            stranger.add(fetch)
            await fetch.waitUntilFinished()
            #expect(fetched.withLock { $0?.errorCode } == .notAuthenticated)

            let accepted = Mutex<Result<Void, LedgerError>?>(nil)
            let accept = AcceptSharesOperation(shareMetadatas: [metadata])
            accept.perShareResultBlock = { _, _ in items.withLock { $0 += 1 } }
            accept.acceptSharesResultBlock = { result in accepted.withLock { $0 = result } }
            stranger.add(accept)
            await accept.waitUntilFinished()
            #expect(accepted.withLock { $0?.errorCode } == .notAuthenticated)
            #expect(items.withLock { $0 } == 0, "no per-item block runs")
        }
        // A request refused as a whole is not a fetch: nothing is logged.
        #expect(try f.ledger.log.head() == head)
        await f.ledger.close()
    }

    @Test("an account found once is known without a read; a name not found is asked again; containers stay apart")
    func registeredAccountsKept() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let late = f.as_("_late")
        #expect(await errorCode { try late.ownedShares() } == .notAuthenticated)
        #expect(await errorCode { try late.share(for: share.url) } == .notAuthenticated)
        let kept = f.ledger.store.registeredUsersKept
        // Registered after a refusal: the refusal was not kept.
        try await f.ledger.registerUser("_late", in: SharingFixture.container, emailAddress: "late@example.com")
        #expect(try late.ownedShares().isEmpty)
        #expect(f.ledger.store.registeredUsersKept == kept + 1)
        #expect(try f.alice.share(for: share.url).owner.userIdentity.userRecordID?.recordName == "_alice")
        #expect(try f.alice.share(for: share.url).participants.count == 1)
        // Alice is known in her container; in another one she is still nobody.
        let elsewhere = f.ledger.container("iCloud.com.example.other", userRecordName: "_alice")
        #expect(await errorCode { try elsewhere.ownedShares() } == .notAuthenticated)
        #expect(await errorCode { try await elsewhere.shareMetadatas(for: [share.url]) } == .notAuthenticated)
        await f.ledger.close()
    }

    @Test("a well-formed but unregistered user gets notAuthenticated from every query, as docs/semantics.md says")
    func unregisteredUserQueries() async throws {
        let (f, share) = try await SharingFixture.withShare()
        for user in [nil, "_nobody"] as [String?] {
            let who = f.as_(user)
            #expect(await errorCode { try who.sharedDatabaseZones() } == .notAuthenticated, "\(user ?? "nil")")
            #expect(await errorCode { try who.recordZones() } == .notAuthenticated)
            #expect(await errorCode { try who.ownedShares() } == .notAuthenticated)
            #expect(await errorCode { try who.participatingShares() } == .notAuthenticated)
            #expect(await errorCode { try who.record(for: SharingFixture.recordID("list")) } == .notAuthenticated)
            #expect(await errorCode { try who.share(for: share.url) } == .notAuthenticated)
        }
        // Alice registered in this container only: in another one she is nobody.
        let elsewhere = f.ledger.container("iCloud.com.example.other", userRecordName: "_alice")
        #expect(await errorCode { try elsewhere.ownedShares() } == .notAuthenticated)
        #expect(try f.alice.ownedShares().count == 1)
        await f.ledger.close()
    }

    @Test("a private share with invitations to unclaimed addresses answers unknownItem from another container, like any private share")
    func otherContainerLearnsNothing() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: LookupInfo(emailAddress: "nobody-yet@example.com"), permission: .readOnly)
        // In its own container a stranger is told to verify.
        #expect(await errorCode { try await f.carol.shareMetadata(for: share.url) } == .participantMayNeedVerification)
        let other = "iCloud.com.example.other"
        try await f.ledger.registerUser("_carol", in: other, emailAddress: "carol@example.com")
        let carol = f.ledger.container(other, userRecordName: "_carol")
        let unknown = URL(string: "https://share.localhost/share/0ZZZZZZZZZZZZZZZZZZZZZZZZZ")!
        #expect(await errorCode { try await carol.shareMetadata(for: share.url) } == .unknownItem)
        #expect(
            await errorCode {
                try await carol.requestParticipantVerification(for: share.url, lookupInfo: LookupInfo(emailAddress: "nobody-yet@example.com"))
            } == .unknownItem)
        // The same message as an unknown URL.
        let shown = await errorMessage { try await carol.shareMetadata(for: share.url) }
        #expect(shown == (await errorMessage { try await carol.shareMetadata(for: unknown) }))
        await f.ledger.close()
    }
}

/// The message a throwing call ends with, or nil when it succeeds.
private func errorMessage<T>(_ body: () async throws -> T) async -> String? {
    do {
        _ = try await body()
        return nil
    } catch let error as LedgerError {
        return error.message
    } catch {
        return "\(error)"
    }
}
