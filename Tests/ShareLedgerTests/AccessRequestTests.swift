import Foundation
@testable import ShareLedger
@testable import ShareLedgerAudit
import Synchronization
import TestSupport
import Testing

/// Access requests and blocked identities (CloudKit's `allowsAccessRequests`, `requesters`,
/// `denyRequesters(_:)`, `blockRequesters(_:)`, `unblockIdentities(_:)`, `blockedIdentities`,
/// `CKShareRequestAccessOperation`) and the provenance field `isApprovedRequester`.
@Suite("Access requests and blocked identities")
struct AccessRequestTests {
    static let unknownURL = URL(string: "https://share.localhost/share/0AAAAAAAAAAAAAAAAAAAAAAAAA")!

    static func eventCount(_ ledger: ShareLedger) throws -> Int { try ledger.log.events(after: .start, limit: .max).count }

    static func eventTypes(_ ledger: ShareLedger) throws -> [String] {
        try ledger.log.events(after: .start, limit: .max).map(\.eventType)
    }

    /// The error of one access request, or nil when it succeeded.
    static func requestError(_ container: Container, _ url: URL) async throws -> LedgerError? {
        let result = try #require(try await container.requestShareAccess(for: [url])[url])
        if case .failure(let error) = result { return error }
        return nil
    }

    @Test("off by default: a request gets exactly the unknown URL's answer and is not logged; so does a blocked identity's")
    func privacy() async throws {
        let (f, share) = try await SharingFixture.withShare()
        #expect(!share.allowsAccessRequests)
        let before = try Self.eventCount(f.ledger)
        let unknown = try #require(try await Self.requestError(f.bob, Self.unknownURL))
        let notAllowed = try #require(try await Self.requestError(f.bob, share.url))
        #expect(unknown.code == .unknownItem)
        #expect(notAllowed.code == unknown.code && notAllowed.message == unknown.message)
        #expect(try Self.eventCount(f.ledger) == before, "refused requests are not logged")

        // Allowed, but bob is blocked: the same answer again, for the request and for the metadata.
        _ = try await f.alice.setAllowsAccessRequests(true, for: share.url)
        _ = try await f.alice.blockIdentities([identityValue("_bob")], for: share.url)
        let blockedCount = try Self.eventCount(f.ledger)
        let blocked = try #require(try await Self.requestError(f.bob, share.url))
        #expect(blocked.code == unknown.code && blocked.message == unknown.message)
        #expect(try Self.eventCount(f.ledger) == blockedCount)
        let blockedFetch = try #require(try await f.bob.shareMetadatas(for: [share.url])[share.url])
        let unknownFetch = try #require(try await f.bob.shareMetadatas(for: [Self.unknownURL])[Self.unknownURL])
        #expect(blockedFetch.errorCode == .unknownItem)
        guard case .failure(let a) = blockedFetch, case .failure(let b) = unknownFetch else {
            Issue.record("both fetches must fail")
            return
        }
        #expect(a.message == b.message)
        // A URL that is not a share URL at all: the same answer too.
        let junk = URL(string: "https://example.com/nothing")!
        let junkError = try #require(try await Self.requestError(f.carol, junk))
        #expect(junkError.code == unknown.code && junkError.message == unknown.message)
        // Without an account: the whole request fails.
        #expect(await errorCode { try await f.as_(nil).requestShareAccess(for: [share.url]) } == .notAuthenticated)
        await f.ledger.close()
    }

    @Test("request, request again, approve: the requester becomes a pending participant marked isApprovedRequester")
    func approve() async throws {
        let f = try await SharingFixture()
        var share = try await f.makeHierarchy()
        share = try await f.alice.setAllowsAccessRequests(true, for: share.url)
        #expect(share.allowsAccessRequests)
        let tagBefore = share.recordChangeTag
        #expect(try await Self.requestError(f.bob, share.url) == nil)
        let afterFirst = try Self.eventCount(f.ledger)
        #expect(try await Self.requestError(f.bob, share.url) == nil, "asking twice succeeds")
        #expect(try Self.eventCount(f.ledger) == afterFirst, "and changes nothing")
        share = try f.alice.share(for: share.url)
        #expect(share.recordChangeTag != tagBefore, "a request is a change of the share")
        #expect(share.requesters.map { $0.userIdentity.userRecordID?.recordName } == ["_bob"])
        #expect(share.requesters.first?.participantLookupInfo == LookupInfo(userRecordID: RecordID(userRecordName: "_bob")))
        // A participant who is not a manager does not see requesters; neither does the requester.
        #expect(await errorCode { try f.bob.share(for: share.url) } == .unknownItem)

        share = try await f.alice.approveRequesters(share.requesters, permission: .readWrite, for: share.url)
        #expect(share.requesters.isEmpty)
        let bob = try #require(share.participants.first { $0.userIdentity.userRecordID?.recordName == "_bob" })
        #expect(bob.isApprovedRequester)
        #expect(bob.acceptanceStatus == .pending && bob.permission == .readWrite && bob.role == .privateUser)
        #expect(bob.dateAddedToShare != nil && !bob.participantID.isEmpty)
        // Invited now: asking again is CloudKit's participantAlreadyInvited (accept the invitation instead).
        #expect(try await Self.requestError(f.bob, share.url)?.code == .participantAlreadyInvited)
        // Bob accepts as any invitee does; his view shows the same participant id and provenance.
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        let bobView = try f.bob.share(for: share.url)
        #expect(bobView.currentUserParticipant?.participantID == bob.participantID)
        #expect(bobView.currentUserParticipant?.isApprovedRequester == true)
        #expect(bobView.requesters.isEmpty && bobView.blockedIdentities.isEmpty, "only managers see requests and blocks")
        // As a participant, asking again succeeds with nothing new.
        let count = try Self.eventCount(f.ledger)
        #expect(try await Self.requestError(f.bob, share.url) == nil)
        #expect(try Self.eventCount(f.ledger) == count)
        // Approving again: the request is answered already.
        #expect(await errorCode { try await f.alice.approveRequesters([requesterValue("_bob")], for: share.url) } == .unknownItem)
        // Inviting a requester directly approves the request the same way.
        _ = try await f.carol.requestShareAccess(for: [share.url])
        share = try await f.alice.addParticipant(LookupInfo(emailAddress: "carol@example.com"), permission: .readOnly, to: share.url)
        #expect(share.requesters.isEmpty)
        #expect(share.participants.first { $0.userIdentity.userRecordID?.recordName == "_carol" }?.isApprovedRequester == true)
        #expect(try LedgerAudit(f.ledger).verifyReadModels(scratchPath: f.dir.child("rebuilt")).matches)
        await f.ledger.close()
    }

    @Test("requesters come with their name and their email or phone, for the owner and administrators only; a forgotten one shows erased")
    func requestersReachable() async throws {
        let f = try await SharingFixture()
        var names = PersonNameComponents()
        names.givenName = "Dave"
        names.familyName = "Doe"
        try await f.ledger.registerUser("_dave", in: SharingFixture.container, phoneNumber: "+1 555 0199", nameComponents: names)
        try await f.ledger.registerUser("_erin", in: SharingFixture.container)
        var share = try await f.makeHierarchy()
        share = try await f.alice.setAllowsAccessRequests(true, for: share.url)
        share = try await f.alice.addParticipant(
            LookupInfo(userRecordID: RecordID(userRecordName: "_carol")), permission: .readWrite, role: .administrator, to: share.url)
        _ = try await f.carol.accept(try await f.carol.shareMetadata(for: share.url))
        for user in ["_bob", "_dave", "_erin"] {
            #expect(try await Self.requestError(f.as_(user), share.url) == nil)
        }
        for manager in [f.alice, f.carol] {
            let requesters = try manager.share(for: share.url).requesters
            #expect(requesters.map { $0.userIdentity.userRecordID?.recordName } == ["_bob", "_dave", "_erin"])
            let (bob, dave, erin) = (requesters[0].userIdentity, requesters[1].userIdentity, requesters[2].userIdentity)
            // CKShare.h: "CloudKit returns each requester with name components and either an email or phone number."
            #expect(bob.lookupInfo == LookupInfo(emailAddress: "bob@example.com"), "the email when there is one")
            #expect(bob.nameComponents == nil && bob.personalDataErased == nil)
            #expect(dave.lookupInfo == LookupInfo(phoneNumber: "+1 555 0199"), "else the phone number")
            #expect(dave.nameComponents == names)
            #expect(erin.lookupInfo == LookupInfo(userRecordID: RecordID(userRecordName: "_erin")), "neither: the account")
            #expect(erin.nameComponents == nil)
            // The lookup info to approve them with stays the account.
            #expect(requesters.map(\.participantLookupInfo) == ["_bob", "_dave", "_erin"].map { LookupInfo(userRecordID: RecordID(userRecordName: $0)) })
        }
        // A refusal about a requester value that carries an email names no email.
        share = try await f.alice.denyRequesters([try f.alice.share(for: share.url).requesters[0]], for: share.url)
        do {
            _ = try await f.alice.denyRequesters([Share.AccessRequester(
                userIdentity: UserIdentity(
                    userRecordID: RecordID(userRecordName: "_bob"), lookupInfo: LookupInfo(emailAddress: "bob@example.com"),
                    nameComponents: nil, hasiCloudAccount: true),
                participantLookupInfo: LookupInfo(userRecordID: RecordID(userRecordName: "_bob")))], for: share.url)
            Issue.record("denying a request twice must fail")
        } catch {
            #expect(error.code == .unknownItem && !error.message.contains("@"), "\(error.message)")
        }
        // Forgotten: shown erased, with no name and no address; still approvable by account.
        try await f.ledger.forget(user: "_dave", in: SharingFixture.container)
        let dave = try #require(try f.alice.share(for: share.url).requesters.first { $0.userIdentity.userRecordID?.recordName == "_dave" })
        #expect(dave.userIdentity.personalDataErased == true)
        #expect(dave.userIdentity.nameComponents == nil)
        #expect(dave.userIdentity.lookupInfo == LookupInfo(userRecordID: RecordID(userRecordName: "_dave")))
        share = try await f.alice.approveRequesters([dave], for: share.url)
        #expect(share.requesters.map { $0.userIdentity.userRecordID?.recordName } == ["_erin"])
        #expect(try LedgerAudit(f.ledger).verifyReadModels(scratchPath: f.dir.child("rebuilt")).matches)
        await f.ledger.close()
    }

    @Test("deny: the request is dropped; approving or denying it again is unknownItem; the user may ask again")
    func deny() async throws {
        let f = try await SharingFixture()
        let url = try await f.makeHierarchy().url
        _ = try await f.alice.setAllowsAccessRequests(true, for: url)
        _ = try await f.bob.requestShareAccess(for: [url])
        let share = try await f.alice.denyRequesters([requesterValue("_bob")], for: url)
        #expect(share.requesters.isEmpty)
        #expect(!share.participants.contains { $0.userIdentity.userRecordID?.recordName == "_bob" })
        #expect(await errorCode { try await f.alice.approveRequesters([requesterValue("_bob")], for: url) } == .unknownItem)
        #expect(await errorCode { try await f.alice.denyRequesters([requesterValue("_bob")], for: url) } == .unknownItem)
        #expect(try await Self.requestError(f.bob, url) == nil)
        #expect(try f.alice.share(for: url).requesters.count == 1)
        // All or nothing: denying bob (pending) and carol (no request) denies nobody.
        #expect(await errorCode { try await f.alice.denyRequesters([requesterValue("_bob"), requesterValue("_carol")], for: url) } == .unknownItem)
        #expect(try f.alice.share(for: url).requesters.count == 1)
        // Turning requests off keeps the pending ones; new ones get the unknown URL's answer.
        _ = try await f.alice.setAllowsAccessRequests(false, for: url)
        #expect(try f.alice.share(for: url).requesters.count == 1)
        #expect(try await Self.requestError(f.carol, url)?.code == .unknownItem)
        await f.ledger.close()
    }

    @Test("block removes a participant and refuses requests, fetches, accepts and invitations until unblocked")
    func block() async throws {
        let f = try await SharingFixture()
        let url = try await f.makeHierarchy().url
        _ = try await f.alice.setAllowsAccessRequests(true, for: url)
        _ = try await f.alice.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_bob")), permission: .readOnly, to: url)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: url))
        _ = try await f.carol.requestShareAccess(for: [url])

        var share = try await f.alice.blockIdentities([identityValue("_bob")], for: url)
        _ = try await f.alice.blockRequesters(share.requesters, for: url)
        share = try f.alice.share(for: url)
        #expect(share.requesters.isEmpty, "blocking drops the request")
        #expect(Set(share.blockedIdentities.compactMap { $0.userIdentity.userRecordID?.recordName }) == ["_bob", "_carol"])
        #expect(share.participants.first { $0.userIdentity.userRecordID?.recordName == "_bob" }?.acceptanceStatus == .removed)
        let types = try Self.eventTypes(f.ledger)
        let blockedAt = try #require(types.firstIndex(of: "shareledger.events.v1.IdentityBlocked"))
        #expect(types[blockedAt - 1] == "shareledger.events.v1.ParticipantRemoved", "the removal comes first, in the same command")
        // Blocking again changes nothing.
        let count = try Self.eventCount(f.ledger)
        _ = try await f.alice.blockIdentities([identityValue("_bob")], for: url)
        #expect(try Self.eventCount(f.ledger) == count)

        #expect(await errorCode { try await f.bob.shareMetadata(for: url) } == .unknownItem)
        #expect(try await Self.requestError(f.bob, url)?.code == .unknownItem)
        #expect(await errorCode { try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly, to: url) } == .invalidArguments)
        #expect(await errorCode { try await f.alice.blockIdentities([identityValue("_alice")], for: url) } == .invalidArguments)
        #expect(await errorCode { try await f.alice.blockIdentities([identityValue("_nobody")], for: url) } == .unknownItem)
        // Only managers block: a stranger learns nothing.
        #expect(await errorCode { try await f.as_("_carol").unblockIdentities(share.blockedIdentities, for: url) } == .unknownItem)

        share = try await f.alice.unblockIdentities(share.blockedIdentities.filter { $0.userIdentity.userRecordID?.recordName == "_bob" }, for: url)
        #expect(share.blockedIdentities.map { $0.userIdentity.userRecordID?.recordName } == ["_carol"])
        #expect(await errorCode { try await f.alice.unblockIdentities([Share.BlockedIdentity(userIdentity: identityValue("_bob"))], for: url) } == .unknownItem)
        #expect(try await Self.requestError(f.bob, url) == nil, "unblocked, bob may ask again")
        #expect(try LedgerAudit(f.ledger).verifyReadModels(scratchPath: f.dir.child("rebuilt")).matches)
        await f.ledger.close()
    }

    @Test("a blocked user cannot join a public share with metadata fetched before the block")
    func blockedCannotAccept() async throws {
        let f = try await SharingFixture()
        _ = try await f.alice.save(RecordZone(zoneID: SharingFixture.zone))
        _ = try await f.alice.save(Record(recordType: "List", recordID: SharingFixture.recordID("list")))
        let share = try await f.alice.share(rootRecord: SharingFixture.recordID("list"), publicPermission: .readOnly)
        let metadata = try await f.bob.shareMetadata(for: share.url)
        _ = try await f.alice.blockIdentities([identityValue("_bob")], for: share.url)
        #expect(await errorCode { try await f.bob.accept(metadata) } == .unknownItem)
        #expect(await errorCode { try f.bob.shareMetadataWithoutLogging(for: share.url) } == .unknownItem)
        await f.ledger.close()
    }

    @Test("who manages requests: the owner and accepted administrators; others are refused")
    func managers() async throws {
        let f = try await SharingFixture()
        let url = try await f.makeHierarchy().url
        _ = try await f.alice.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_carol")), permission: .readWrite, role: .administrator, to: url)
        // Pending administrator: not yet a manager.
        #expect(await errorCode { try await f.carol.setAllowsAccessRequests(true, for: url) } == .permissionFailure)
        _ = try await f.carol.accept(try await f.carol.shareMetadata(for: url))
        _ = try await f.carol.setAllowsAccessRequests(true, for: url)
        _ = try await f.bob.requestShareAccess(for: [url])
        let share = try f.carol.share(for: url)
        #expect(share.requesters.count == 1)
        _ = try await f.carol.approveRequesters(share.requesters, for: url)
        #expect(try f.alice.share(for: url).participants.contains { $0.userIdentity.userRecordID?.recordName == "_bob" && $0.isApprovedRequester })
        // Bob, a pending participant, manages nothing.
        #expect(await errorCode { try await f.bob.blockIdentities([identityValue("_carol")], for: url) } == .permissionFailure)
        #expect(await errorCode { try await f.alice.setAllowsAccessRequests(false, for: url, ifChangeTag: "1") } == .serverRecordChanged)
        await f.ledger.close()
    }

    @Test("ShareRequestAccessOperation: one result per distinct URL, then partialFailure naming the failed ones")
    func operation() async throws {
        let f = try await SharingFixture()
        let url = try await f.makeHierarchy().url
        _ = try await f.alice.setAllowsAccessRequests(true, for: url)
        let results = Mutex<[URL: Result<Void, LedgerError>]>([:])
        let final = Mutex<Result<Void, LedgerError>?>(nil)
        let operation = ShareRequestAccessOperation(shareURLs: [url, Self.unknownURL, url])
        operation.perShareAccessRequestResultBlock = { url, result in results.withLock { $0[url] = result } }
        operation.shareAccessRequestResultBlock = { result in final.withLock { $0 = result } }
        f.bob.add(operation)
        await operation.waitUntilFinished()
        let got = results.withLock { $0 }
        #expect(got.count == 2)
        #expect(got[url]?.errorCode == nil)
        #expect(got[Self.unknownURL]?.errorCode == .unknownItem)
        let outcome = try #require(final.withLock { $0 })
        #expect(outcome.errorCode == .partialFailure)
        #expect(try f.alice.share(for: url).requesters.count == 1)
        // No URLs: done at once, nothing asked.
        let empty = ShareRequestAccessOperation(shareURLs: [])
        f.bob.add(empty)
        await empty.waitUntilFinished()
        await f.ledger.close()
    }

    @Test("two administrators approve and block the same requester at once: one consistent outcome")
    func approveAndBlockRace() async throws {
        for seed in 1...8 as ClosedRange<UInt64> {
            let f = try await SharingFixture(seed: seed)
            let url = try await f.makeHierarchy().url
            _ = try await f.alice.addParticipant(
                LookupInfo(userRecordID: RecordID(userRecordName: "_carol")), permission: .readWrite, role: .administrator, to: url)
            _ = try await f.carol.accept(try await f.carol.shareMetadata(for: url))
            _ = try await f.alice.setAllowsAccessRequests(true, for: url)
            _ = try await f.bob.requestShareAccess(for: [url])
            // Both through the real writer, concurrently; which one is started first alternates with the
            // seed (the writer may still take them in either order).
            let (alice, carol) = (f.alice, f.carol)
            let approve: @Sendable () async -> LedgerError.Code? = {
                await errorCode { try await alice.approveRequesters([requesterValue("_bob")], for: url) }
            }
            let block: @Sendable () async -> LedgerError.Code? = {
                await errorCode { try await carol.blockRequesters([requesterValue("_bob")], for: url) }
            }
            let approveOutcome: LedgerError.Code?
            let blockOutcome: LedgerError.Code?
            if seed % 2 == 0 {
                async let approved = approve()
                async let blocked = block()
                (approveOutcome, blockOutcome) = await (approved, blocked)
            } else {
                async let blocked = block()
                async let approved = approve()
                (approveOutcome, blockOutcome) = await (approved, blocked)
            }
            #expect(blockOutcome == nil, "blocking always succeeds")
            #expect(approveOutcome == nil || approveOutcome == .unknownItem, "approving finds the request, or finds it gone")
            let share = try f.alice.share(for: url)
            #expect(share.blockedIdentities.map { $0.userIdentity.userRecordID?.recordName } == ["_bob"])
            #expect(share.requesters.isEmpty)
            let bob = share.participants.first { $0.userIdentity.userRecordID?.recordName == "_bob" }
            // Approved first: added, then removed by the block. Blocked first: never added.
            #expect(bob == nil || bob?.acceptanceStatus == .removed)
            #expect((bob != nil) == (approveOutcome == nil))
            #expect(await errorCode { try await f.bob.shareMetadata(for: url) } == .unknownItem)
            #expect(try LedgerAudit(f.ledger).verifyReadModels(scratchPath: f.dir.child("rebuilt")).matches)
            await f.ledger.close()
        }
    }

    @Test("access --at replays requests, approvals and blocks: the state at each past position")
    func accessAtPastPositions() async throws {
        let f = try await SharingFixture()
        let url = try await f.makeHierarchy().url
        _ = try await f.alice.setAllowsAccessRequests(true, for: url)
        _ = try await f.bob.requestShareAccess(for: [url])
        _ = try await f.carol.requestShareAccess(for: [url])
        let requested = try f.ledger.log.head().position
        _ = try await f.alice.approveRequesters([requesterValue("_bob")], for: url)
        _ = try await f.alice.blockRequesters([requesterValue("_carol")], for: url)
        let then = try LedgerAudit(f.ledger).access(to: url, at: .position(requested))
        #expect(then.allowsAccessRequests && then.requesters == ["_bob", "_carol"] && then.blockedIdentities.isEmpty)
        #expect(!then.participants.contains { $0.userRecordName == "_bob" })
        let now = try LedgerAudit(f.ledger).access(to: url, at: .position(try f.ledger.log.head().position))
        #expect(now.requesters.isEmpty && now.blockedIdentities == ["_carol"])
        #expect(now.participants.first { $0.userRecordName == "_bob" }?.isApprovedRequester == true)
        await f.ledger.close()
    }

    @Test("export and import carry the new events: the imported ledger audits clean and shows the same share")
    func exportImport() async throws {
        let f = try await SharingFixture()
        let url = try await f.makeHierarchy().url
        _ = try await f.alice.setAllowsAccessRequests(true, for: url)
        _ = try await f.bob.requestShareAccess(for: [url])
        _ = try await f.carol.requestShareAccess(for: [url])
        _ = try await f.alice.approveRequesters([requesterValue("_bob")], for: url)
        _ = try await f.alice.blockRequesters([requesterValue("_carol")], for: url)
        let before = try f.alice.share(for: url)
        let ndjson = f.dir.child("export.ndjson")
        try exportToFile(f.ledger, ndjson)
        await f.ledger.close()

        // The personal data in the export is sealed: the new ledger reads it with the same key store.
        let imported = try await importWithKeys(ndjson, keysFrom: f.dir.child("ledger"), into: f.dir.child("imported"))
        #expect(try LedgerAudit(imported).audit(scratchPath: f.dir.child("audit")).ok)
        let after = try imported.container(SharingFixture.container, userRecordName: "_alice").share(for: url)
        #expect(after.requesters == before.requesters && after.blockedIdentities == before.blockedIdentities)
        #expect(after.allowsAccessRequests && after.participants.map(\.isApprovedRequester) == before.participants.map(\.isApprovedRequester))
        await imported.close()
    }
}
