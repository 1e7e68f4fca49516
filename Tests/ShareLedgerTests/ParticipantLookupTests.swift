import Foundation
import ShareLedger
import ShareLedgerAudit
import Synchronization
import TestSupport
import Testing

/// Participant lookup (CloudKit's `shareParticipants(for:)` and `CKFetchShareParticipantsOperation`)
/// and `participantAlreadyInvited`.
@Suite("Participant lookup")
struct ParticipantLookupTests {
    /// The `ShareParticipantFetched` events of the log.
    static func lookups(_ ledger: ShareLedger) throws -> [EventEnvelope] {
        try ledger.log.events(after: .start, limit: .max).filter { $0.eventType == "shareledger.events.v1.ShareParticipantFetched" }
    }

    @Test("lookup infos become participants: with the account that has them, or with no account; failures per item")
    func lookupResults() async throws {
        let f = try await SharingFixture()
        let bobEmail = LookupInfo(emailAddress: "BOB@example.com")
        let bobPhone = LookupInfo(phoneNumber: "+1 (555) 0100")
        let carol = LookupInfo(userRecordID: RecordID(userRecordName: "_carol"))
        let stranger = LookupInfo(emailAddress: "dave@unclaimed.example")
        let strangerPhone = LookupInfo(phoneNumber: "+44 20 7946 0000")
        let nobody = LookupInfo(userRecordID: RecordID(userRecordName: "_nobody"))
        let badEmail = LookupInfo(emailAddress: "secret-not-an-email")
        let badPhone = LookupInfo(phoneNumber: "x1")
        let input = [bobEmail, bobPhone, carol, stranger, strangerPhone, nobody, badEmail, badPhone, bobEmail]
        let results = try await f.alice.shareParticipants(for: input)

        #expect(results.count == 8, "duplicates are looked up once")
        for lookup in [bobEmail, bobPhone] {
            let participant = try #require(try results[lookup]?.get())
            #expect(participant.userIdentity.userRecordID?.recordName == "_bob")
            #expect(participant.userIdentity.hasiCloudAccount)
            #expect(participant.userIdentity.lookupInfo == lookup, "the identity keeps the lookup as given")
            #expect(participant.role == .privateUser)
            #expect(participant.permission == .readOnly)
            #expect(participant.acceptanceStatus == .unknown)
            #expect(participant.participantID.isEmpty)
            #expect(participant.dateAddedToShare == nil)
        }
        #expect(try results[carol]?.get().userIdentity.userRecordID?.recordName == "_carol")
        for lookup in [stranger, strangerPhone] {
            let participant = try #require(try results[lookup]?.get())
            #expect(participant.userIdentity.userRecordID == nil)
            #expect(!participant.userIdentity.hasiCloudAccount)
            #expect(participant.userIdentity.lookupInfo == lookup)
        }
        #expect(results[nobody]?.errorCode == .unknownItem)
        #expect(results[badEmail]?.errorCode == .invalidArguments)
        #expect(results[badPhone]?.errorCode == .invalidArguments)
        // Error messages never repeat what was looked up.
        for lookup in [nobody, badEmail, badPhone] {
            guard case .failure(let error) = results[lookup] else { continue }
            #expect(!error.message.contains("secret"))
            #expect(!error.message.contains("_nobody"))
            #expect(!error.message.contains("x1"))
        }

        // One logged lookup per distinct lookup info, failed or not, in the caller's stream.
        let events = try Self.lookups(f.ledger)
        #expect(events.count == 8)
        #expect(events.allSatisfy { $0.stream == "user/_alice" && $0.actor == "_alice" })
        let history = try LedgerAudit(f.ledger).history(of: .user("_alice", container: SharingFixture.container))
        #expect(history.filter { $0.name == "ShareParticipantFetched" }.count == 8)
        // The user a lookup found has it in their history too; a stranger's address has no history.
        let bobHistory = try LedgerAudit(f.ledger).history(of: .user("_bob", container: SharingFixture.container))
        #expect(bobHistory.filter { $0.name == "ShareParticipantFetched" }.count == 2)
        #expect(try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("audit")).ok)
        await f.ledger.close()
    }

    @Test("the whole request fails without an account or past 400 lookup infos, and logs nothing; none gives none")
    func requestErrors() async throws {
        let f = try await SharingFixture()
        let bob = LookupInfo(emailAddress: "bob@example.com")
        #expect(await errorCode { try await f.as_(nil).shareParticipants(for: [bob]) } == .notAuthenticated)
        #expect(await errorCode { try await f.as_("_unregistered").shareParticipants(for: [bob]) } == .notAuthenticated)
        #expect(await errorCode { try await f.as_("_unregistered").shareParticipant(for: bob) } == .notAuthenticated)
        let many = (0...400).map { LookupInfo(emailAddress: "user\($0)@example.com") }
        #expect(await errorCode { try await f.alice.shareParticipants(for: many) } == .limitExceeded)
        #expect(try await f.alice.shareParticipants(for: []).isEmpty)
        #expect(try Self.lookups(f.ledger).isEmpty)
        // The single-item call throws the item's error.
        let nobody = LookupInfo(userRecordID: RecordID(userRecordName: "_nobody"))
        #expect(await errorCode { try await f.alice.shareParticipant(for: nobody) } == .unknownItem)
        #expect(try await f.alice.shareParticipant(for: bob).userIdentity.userRecordID?.recordName == "_bob")
        await f.ledger.close()
    }

    @Test("a looked-up participant, its role and permission set, is invited with addParticipant(_:to:)")
    func lookupThenInvite() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let bobLookup = LookupInfo(emailAddress: "bob@example.com")
        let strangerLookup = LookupInfo(emailAddress: "dave@unclaimed.example")
        let found = try await f.alice.shareParticipants(for: [bobLookup, strangerLookup])
        var bob = try #require(try found[bobLookup]?.get())
        bob.permission = .readWrite
        bob.role = .administrator
        _ = try await f.alice.addParticipant(bob, to: share.url)
        let stranger = try #require(try found[strangerLookup]?.get())
        let updated = try await f.alice.addParticipant(stranger, to: share.url)

        let invitedBob = try #require(updated.participants.first { $0.userIdentity.userRecordID?.recordName == "_bob" })
        #expect(invitedBob.role == .administrator)
        #expect(invitedBob.permission == .readWrite)
        #expect(invitedBob.acceptanceStatus == .pending)
        let invitedStranger = try #require(updated.participants.first { $0.userIdentity.lookupInfo == strangerLookup })
        #expect(!invitedStranger.userIdentity.hasiCloudAccount)
        #expect(invitedStranger.permission == .readOnly)
        let metadata = try await f.bob.shareMetadata(for: share.url)
        #expect(metadata.participantRole == .administrator)
        #expect(metadata.participantStatus == .pending)

        // A participant value with no way to find the person is refused.
        let anonymous = Share.Participant(
            participantID: "", userIdentity: UserIdentity(userRecordID: nil, lookupInfo: nil, nameComponents: nil, hasiCloudAccount: false),
            role: .privateUser, permission: .readOnly, acceptanceStatus: .unknown, dateAddedToShare: nil)
        #expect(await errorCode { try await f.alice.addParticipant(anonymous, to: share.url) } == .invalidArguments)
        await f.ledger.close()
    }

    @Test("FetchShareParticipantsOperation: a block per lookup, then partialFailure keyed by lookup; run once")
    func operationPartialFailure() async throws {
        let f = try await SharingFixture()
        let bob = LookupInfo(emailAddress: "bob@example.com")
        let stranger = LookupInfo(phoneNumber: "+44 20 7946 0000")
        let nobody = LookupInfo(userRecordID: RecordID(userRecordName: "_nobody"))
        let order = Mutex<[String]>([])
        let fetched = Mutex<[String]>([])
        let completion = Mutex<Result<Void, LedgerError>?>(nil)
        let operation = FetchShareParticipantsOperation(userIdentityLookupInfos: [bob, nobody, stranger, bob])
        operation.perShareParticipantResultBlock = { lookup, result in
            order.withLock { $0.append("\(lookup.description): \(result.errorCode?.name ?? "ok")") }
        }
        operation.perShareParticipantCompletionBlock = { _, participant, error in
            order.withLock { $0.append(participant != nil && error == nil ? "legacy ok" : "legacy failed") }
        }
        operation.shareParticipantFetchedBlock = { participant in
            fetched.withLock { $0.append(participant.userIdentity.userRecordID?.recordName ?? "no account") }
        }
        operation.fetchShareParticipantsResultBlock = { result in
            order.withLock { $0.append("done") }
            completion.withLock { $0 = result }
        }
        operation.fetchShareParticipantsCompletionBlock = { _ in order.withLock { $0.append("legacy done") } }
        f.alice.add(operation)
        await operation.waitUntilFinished()

        #expect(
            order.withLock { $0 } == [
                "\(bob): ok", "legacy ok", "user _nobody: unknownItem", "legacy failed",
                "\(stranger): ok", "legacy ok", "done", "legacy done",
            ])
        #expect(fetched.withLock { $0 } == ["_bob", "no account"])
        guard case .failure(let error) = try #require(completion.withLock { $0 }) else {
            Issue.record("expected partialFailure")
            return
        }
        #expect(error.code == .partialFailure)
        #expect(error.partialErrors.count == 1)
        #expect(error.partialErrors[nobody.description]?.code == .unknownItem)
        #expect(try Self.lookups(f.ledger).count == 3)

        // Adding it again does nothing.
        f.alice.add(operation)
        #expect(try Self.lookups(f.ledger).count == 3)
        await f.ledger.close()
    }

    @Test("the operation: none finishes at once with success; cancelled before the run, nothing is looked up or logged")
    func operationEmptyAndCancelled() async throws {
        let f = try await SharingFixture()
        let empty = FetchShareParticipantsOperation()
        let emptyResult = Mutex<Result<Void, LedgerError>?>(nil)
        let emptyItems = Mutex(0)
        empty.perShareParticipantResultBlock = { _, _ in emptyItems.withLock { $0 += 1 } }
        empty.fetchShareParticipantsResultBlock = { result in emptyResult.withLock { $0 = result } }
        f.alice.add(empty)
        await empty.waitUntilFinished()
        #expect(emptyItems.withLock { $0 } == 0)
        let emptyOutcome = emptyResult.withLock { $0 }
        if case .success = emptyOutcome {} else { Issue.record("expected success, got \(String(describing: emptyOutcome))") }

        let lookups = [LookupInfo(emailAddress: "bob@example.com"), LookupInfo(emailAddress: "carol@example.com")]
        let cancelled = FetchShareParticipantsOperation(userIdentityLookupInfos: lookups)
        let codes = Mutex<[LedgerError.Code]>([])
        let final = Mutex<LedgerError?>(nil)
        cancelled.perShareParticipantResultBlock = { _, result in
            if let code = result.errorCode { codes.withLock { $0.append(code) } }
        }
        cancelled.fetchShareParticipantsCompletionBlock = { error in final.withLock { $0 = error } }
        cancelled.cancel()
        f.alice.add(cancelled)
        await cancelled.waitUntilFinished()
        #expect(codes.withLock { $0 } == [.operationCancelled, .operationCancelled])
        #expect(final.withLock { $0 }?.code == .partialFailure)
        #expect(try Self.lookups(f.ledger).isEmpty)

        // Without an account the whole operation fails, with no per-item block.
        let anonymous = FetchShareParticipantsOperation(userIdentityLookupInfos: lookups)
        let anonymousItems = Mutex(0)
        let anonymousError = Mutex<LedgerError?>(nil)
        anonymous.perShareParticipantResultBlock = { _, _ in anonymousItems.withLock { $0 += 1 } }
        anonymous.fetchShareParticipantsCompletionBlock = { error in anonymousError.withLock { $0 = error } }
        f.as_(nil).add(anonymous)
        await anonymous.waitUntilFinished()
        #expect(anonymousItems.withLock { $0 } == 0)
        #expect(anonymousError.withLock { $0 }?.code == .notAuthenticated)
        await f.ledger.close()
    }

    @Test("participantAlreadyInvited (37): a pending invitee verifying another invitation of the same share")
    func alreadyInvited() async throws {
        let f = try await SharingFixture()
        var share = try await f.makeHierarchy()
        // Bob is invited by account, and an address nobody has is invited too.
        share = try await f.alice.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_bob")), permission: .readOnly, to: share.url)
        share = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob.work@unclaimed.example"), permission: .readWrite, to: share.url)
        let other = LookupInfo(emailAddress: "bob.work@unclaimed.example")

        // Pending: he must accept the invitation he has.
        #expect(LedgerError.Code.participantAlreadyInvited.rawValue == 37)
        #expect(await errorCode { try await f.bob.requestParticipantVerification(for: share.url, lookupInfo: other) } == .participantAlreadyInvited)
        #expect(await errorCode { try await f.bob.verifyParticipant(for: share.url, code: "0000000000000000000000000A") } == .participantAlreadyInvited)
        // Accepted: nothing to verify, as before.
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        #expect(await errorCode { try await f.bob.requestParticipantVerification(for: share.url, lookupInfo: other) } == .invalidArguments)
        // The owner is not "invited".
        #expect(await errorCode { try await f.alice.requestParticipantVerification(for: share.url, lookupInfo: other) } == .invalidArguments)
        // Someone not in the share may still claim the address.
        _ = try await f.carol.requestParticipantVerification(for: share.url, lookupInfo: other)
        await f.ledger.close()
    }
}
