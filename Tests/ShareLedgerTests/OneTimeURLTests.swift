import Foundation
@testable import ShareLedger
@testable import ShareLedgerAudit
import TestSupport
import Testing

/// One-time URL participants (CloudKit's `CKShare.Participant.oneTimeURLParticipant()` and
/// `CKShare.oneTimeURL(for:)`).
@Suite("One-time URLs")
struct OneTimeURLTests {
    static let unknownURL = URL(string: "https://share.localhost/share/0AAAAAAAAAAAAAAAAAAAAAAAAA")!

    /// Alice's share with one one-time URL participant (readWrite): the share, the participant id, the URL.
    static func invite(_ f: SharingFixture) async throws -> (Share, String, URL) {
        let share = try await f.makeHierarchy()
        var participant = Share.Participant.oneTimeURLParticipant()
        participant.permission = .readWrite
        let updated = try await f.alice.addParticipant(participant, to: share.url)
        let added = try #require(updated.participants.first { $0.userIdentity.userRecordID == nil })
        let url = try #require(updated.oneTimeURL(for: added.participantID))
        return (updated, added.participantID, url)
    }

    @Test("an invitation to nobody in particular: the URL is bound to it, accepts once, and then tells others nothing")
    func acceptOnce() async throws {
        let f = try await SharingFixture()
        let (share, id, url) = try await Self.invite(f)
        #expect(url != share.url && url.host == share.url.host)
        let invited = try #require(share.participants.first { $0.participantID == id })
        #expect(invited.acceptanceStatus == .pending && invited.permission == .readWrite && !invited.userIdentity.hasiCloudAccount)
        #expect(invited.userIdentity.lookupInfo == nil, "no email address, phone number or account")
        // A stranger with the share's own URL learns nothing (no participantMayNeedVerification either).
        #expect(await errorCode { try await f.carol.shareMetadata(for: share.url) } == .unknownItem)

        let metadata = try await f.bob.shareMetadata(for: url)
        #expect(metadata.participantStatus == .pending && metadata.participantRole == .privateUser)
        #expect(metadata.participantPermission == .readWrite && metadata.share.url == share.url)
        let accepted = try await f.bob.accept(metadata)
        #expect(accepted.currentUserParticipant?.participantID == id)
        #expect(accepted.currentUserParticipant?.acceptanceStatus == .accepted)
        let now = try f.alice.share(for: share.url)
        #expect(now.oneTimeURL(for: id) == url, "the URL stays tied to its participant")
        #expect(now.participants.first { $0.participantID == id }?.userIdentity.userRecordID?.recordName == "_bob")

        // Carol presents the used URL: the unknown URL's answer, exactly; accepting Bob's metadata too.
        let used = try #require(try await f.carol.shareMetadatas(for: [url])[url])
        let unknown = try #require(try await f.carol.shareMetadatas(for: [Self.unknownURL])[Self.unknownURL])
        guard case .failure(let a) = used, case .failure(let b) = unknown else {
            Issue.record("both fetches must fail")
            return
        }
        #expect(a.code == .unknownItem && a.code == b.code && a.message == b.message)
        #expect(await errorCode { try await f.carol.accept(metadata) } == .unknownItem)
        // Bob again: he is the participant now; his accept again changes nothing.
        #expect(try await f.bob.accept(metadata).currentUserParticipant?.participantID == id)
        #expect(try LedgerAudit(f.ledger).verifyReadModels(scratchPath: f.dir.child("rebuilt")).matches)
        await f.ledger.close()
    }

    @Test("after acceptance the URL stays the participant's, and works like the share's URL for its participant and the owner")
    func stableAfterAcceptance() async throws {
        let f = try await SharingFixture()
        let (share, id, url) = try await Self.invite(f)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: url))
        // The owner's oneTimeURL(for:) gives the same URL after acceptance (CKShare.h: "stable, and tied
        // to the associated participantIDs as long as the participant is part of the share").
        #expect(try f.alice.share(for: share.url).oneTimeURL(for: id) == url)
        // "After share acceptance, the one-time URL becomes functionally equivalent to the regular URL."
        let bobThrough = try await f.bob.shareMetadata(for: url)
        let bobRegular = try await f.bob.shareMetadata(for: share.url)
        #expect(bobThrough.participantStatus == .accepted && bobThrough.participantRole == .privateUser)
        #expect(bobThrough.participantPermission == .readWrite && bobThrough.share.url == share.url)
        #expect(bobThrough.share.currentUserParticipant?.participantID == id)
        #expect(bobThrough == bobRegular, "the same metadata as through the share's URL")
        #expect(try f.bob.shareMetadataWithoutLogging(for: url) == bobRegular)
        let aliceThrough = try await f.alice.shareMetadata(for: url)
        #expect(aliceThrough.participantRole == .owner && aliceThrough.participantStatus == .accepted)
        #expect(aliceThrough == (try await f.alice.shareMetadata(for: share.url)))
        // Accepting through it again: success, nothing new.
        let count = try f.ledger.log.events(after: .start, limit: .max).count
        #expect(try await f.bob.accept(bobThrough).currentUserParticipant?.participantID == id)
        #expect(try await f.alice.accept(aliceThrough).owner.userIdentity.userRecordID?.recordName == "_alice")
        #expect(try f.ledger.log.events(after: .start, limit: .max).count == count)
        // A stranger who presents it still learns nothing: exactly the unknown URL's answer.
        let stranger = try #require(try await f.carol.shareMetadatas(for: [url])[url])
        let unknown = try #require(try await f.carol.shareMetadatas(for: [Self.unknownURL])[Self.unknownURL])
        guard case .failure(let a) = stranger, case .failure(let b) = unknown else {
            Issue.record("both fetches must fail")
            return
        }
        #expect(a.code == .unknownItem && a.message == b.message)
        #expect(await errorCode { try f.carol.shareMetadataWithoutLogging(for: url) } == .unknownItem)
        // Fetches through it are part of the share's history.
        let history = try LedgerAudit(f.ledger).history(of: .share(share.url))
        #expect(history.filter { $0.envelope.eventType.hasSuffix("ShareMetadataFetched") }.count >= 4)
        #expect(try LedgerAudit(f.ledger).verifyReadModels(scratchPath: f.dir.child("rebuilt")).matches)
        #expect(try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("audit")).ok)

        // Once the participant leaves, the URL is gone: nil for the owner, unknown to everyone.
        try await f.bob.leaveShare(share.url)
        #expect(try f.alice.share(for: share.url).oneTimeURL(for: id) == nil)
        #expect(await errorCode { try await f.bob.shareMetadata(for: url) } == .unknownItem)
        #expect(await errorCode { try await f.alice.shareMetadata(for: url) } == .unknownItem)
        #expect(try LedgerAudit(f.ledger).verifyReadModels(scratchPath: f.dir.child("rebuilt-left")).matches)
        await f.ledger.close()
    }

    @Test("an accepted one-time participant removed by the owner: the URL is gone for everyone")
    func removedAfterAcceptance() async throws {
        let f = try await SharingFixture()
        let (share, id, url) = try await Self.invite(f)
        _ = try await f.carol.accept(try await f.carol.shareMetadata(for: url))
        #expect(try f.alice.share(for: share.url).oneTimeURL(for: id) == url)
        #expect(try await f.carol.shareMetadata(for: url).participantStatus == .accepted)
        _ = try await f.alice.removeParticipant(id, from: share.url)
        #expect(try f.alice.share(for: share.url).oneTimeURL(for: id) == nil)
        #expect(await errorCode { try await f.carol.shareMetadata(for: url) } == .unknownItem)
        #expect(await errorCode { try await f.alice.shareMetadata(for: url) } == .unknownItem)
        // The owner may add another one-time participant: a new URL.
        let again = try await f.alice.addParticipant(.oneTimeURLParticipant(), to: share.url)
        let newURLs = again.participants.compactMap { again.oneTimeURL(for: $0.participantID) }
        #expect(newURLs.count == 1 && newURLs.first != url)
        #expect(try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("audit")).ok)
        await f.ledger.close()
    }

    @Test("the URL comes from the injected random source: the same seed gives the same URL")
    func deterministic() async throws {
        var urls: [URL] = []
        for _ in 0..<2 {
            let f = try await SharingFixture(seed: 7)
            urls.append(try await Self.invite(f).2)
            await f.ledger.close()
        }
        #expect(urls[0] == urls[1])
    }

    @Test("removing an unused one-time participant withdraws its URL; only managers see URLs; not on public shares")
    func withdrawn() async throws {
        let f = try await SharingFixture()
        let (share, id, url) = try await Self.invite(f)
        _ = try await f.alice.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_carol")), permission: .readOnly, to: share.url)
        _ = try await f.carol.accept(try await f.carol.shareMetadata(for: share.url))
        #expect(try f.carol.share(for: share.url).oneTimeURL(for: id) == nil, "a participant who does not manage sees no URL")
        _ = try await f.alice.removeParticipant(id, from: share.url)
        #expect(await errorCode { try await f.bob.shareMetadata(for: url) } == .unknownItem)
        _ = try await f.alice.setPublicPermission(.readOnly, for: share.url)
        #expect(await errorCode { try await f.alice.addParticipant(.oneTimeURLParticipant(), to: share.url) } == .invalidArguments)
        #expect(await errorCode { try await f.carol.addParticipant(.oneTimeURLParticipant(), to: share.url) } == .permissionFailure)
        #expect(try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("audit")).ok)
        await f.ledger.close()
    }
}
