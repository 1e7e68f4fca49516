import Foundation
import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

@Suite("Sharing: shares, metadata, accept")
struct SharingTests {
    @Test("the owner's share: URL with a token, owner participant, owner-relative metadata")
    func ownerMetadata() async throws {
        let (f, share) = try await SharingFixture.withShare()
        #expect(ShareURL.token(in: share.url) == share.token)
        #expect(share.url.fragment == "Groceries")
        #expect(share.owner.role == .owner)
        #expect(share.owner.acceptanceStatus == .accepted)
        #expect(share.hierarchicalRootRecordID == SharingFixture.recordID("list").withOwner("_alice"))
        #expect(!share.isZoneWide)

        let metadata = try await f.alice.shareMetadata(for: share.url)
        #expect(metadata.participantRole == .owner)
        #expect(metadata.participantStatus == .accepted)
        #expect(metadata.participantPermission == .readWrite)
        #expect(metadata.containerIdentifier == SharingFixture.container)
        #expect(metadata.ownerIdentity.userRecordID?.recordName == "_alice")
        #expect(metadata.rootRecord == nil)
        #expect(metadata.hierarchicalRootRecordID?.recordName == "list")
        await f.ledger.close()
    }

    @Test("invite by email, fetch as invitee (pending), accept, residual zone appears after the task runs")
    func inviteFetchAccept() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let updated = try await f.alice.addParticipant(LookupInfo(emailAddress: "BOB@example.com"), permission: .readOnly, to: share.url)
        let bobEntry = try #require(updated.participants.first { $0.userIdentity.userRecordID?.recordName == "_bob" })
        #expect(bobEntry.acceptanceStatus == .pending)
        #expect(bobEntry.userIdentity.hasiCloudAccount)

        let metadata = try await f.bob.shareMetadata(for: share.url)
        #expect(metadata.participantRole == .privateUser)
        #expect(metadata.participantStatus == .pending)
        #expect(metadata.participantPermission == .readOnly)
        #expect(metadata.share.currentUserParticipant?.participantID == bobEntry.participantID)

        let accepted = try await f.bob.accept(metadata)
        #expect(accepted.currentUserParticipant?.acceptanceStatus == .accepted)
        var stats = try f.ledger.statistics()
        #expect(stats.shares == 1)
        #expect(stats.participants == 1)
        #expect(stats.acceptedParticipants == 1)
        #expect(stats.pendingResidualTasks == 1)
        #expect(try f.bob.sharedDatabaseZones().isEmpty)

        #expect(try await f.ledger.completeResidualTasks() == 1)
        #expect(try f.bob.sharedDatabaseZones() == [RecordZoneID(zoneName: "Notes", ownerName: "_alice")])
        stats = try f.ledger.statistics()
        #expect(stats.pendingResidualTasks == 0)
        #expect(stats.participantZones == 1)

        // Accepting again: success, nothing new scheduled.
        let again = try await f.bob.shareMetadata(for: share.url)
        #expect(again.participantStatus == .accepted)
        _ = try await f.bob.accept(again)
        #expect(try f.ledger.statistics().pendingResidualTasks == 0)

        // The participant reads the shared records.
        let item = try f.bob.record(for: RecordID(recordName: "item", zoneID: RecordZoneID(zoneName: "Notes", ownerName: "_alice")))
        #expect(item["name"] == .string("milk"))
        await f.ledger.close()
    }

    @Test("a non-participant of a private share learns nothing; verification of an unmatched invitation")
    func verification() async throws {
        let (f, share) = try await SharingFixture.withShare()
        // No pending invitation without an account: indistinguishable from an unknown URL.
        #expect(await errorCode { try await f.carol.shareMetadata(for: share.url) } == .unknownItem)
        let unknown = ShareURL.make(host: "share.localhost", token: ShareToken.generate())!
        #expect(await errorCode { try await f.carol.shareMetadata(for: unknown) } == .unknownItem)

        // An invitation to an email no account has.
        let withDave = try await f.alice.addParticipant(LookupInfo(emailAddress: "dave@elsewhere.org"), permission: .readWrite, to: share.url)
        let dave = try #require(withDave.participants.first { $0.userIdentity.lookupInfo?.emailAddress == "dave@elsewhere.org" })
        #expect(!dave.userIdentity.hasiCloudAccount)
        #expect(await errorCode { try await f.carol.shareMetadata(for: share.url) } == .participantMayNeedVerification)
        #expect(await errorCode { try await f.carol.accept(try await f.alice.shareMetadata(for: share.url)) } == .permissionFailure)

        // Carol proves she received the invitation to dave@elsewhere.org.
        #expect(
            await errorCode {
                try await f.carol.requestParticipantVerification(for: share.url, lookupInfo: LookupInfo(emailAddress: "x@y.z"))
            } == .unknownItem)
        let verification = try await f.carol.requestParticipantVerification(
            for: share.url, lookupInfo: LookupInfo(emailAddress: "Dave@Elsewhere.org"))
        #expect(verification.participantID == dave.participantID)
        #expect(verification.code.count == 26)
        #expect(await errorCode { try await f.carol.verifyParticipant(for: share.url, code: "WRONG") } == .permissionFailure)
        #expect(await errorCode { try await f.bob.verifyParticipant(for: share.url, code: verification.code) } == .permissionFailure)
        _ = try await f.carol.verifyParticipant(for: share.url, code: verification.code)

        let metadata = try await f.carol.shareMetadata(for: share.url)
        #expect(metadata.participantStatus == .pending)
        #expect(metadata.participantPermission == .readWrite)
        _ = try await f.carol.accept(metadata)
        #expect(try f.carol.participatingShares(status: [.accepted]).count == 1)
        // The claim cannot be replayed: with no invitation left to verify, a stranger gets the answer
        // of an unknown URL.
        #expect(await errorCode { try await f.bob.verifyParticipant(for: share.url, code: verification.code) } == .unknownItem)
        await f.ledger.close()
    }

    @Test("public share: prospective public user, join on accept, dropped when the share goes private")
    func publicShare() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let invited = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly, to: share.url)
        // Participants can be invited only while the share is private.
        _ = try await f.alice.setPublicPermission(.readWrite, for: share.url)
        #expect(
            await errorCode { try await f.alice.addParticipant(LookupInfo(emailAddress: "carol@example.com"), permission: .readOnly, to: share.url) }
                == .invalidArguments)
        // Changing the public permission dropped Bob's pending invitation.
        let afterChange = try f.alice.share(for: share.url)
        #expect(afterChange.participants.first { $0.participantID != afterChange.owner.participantID }?.acceptanceStatus == .removed)
        #expect(invited.recordChangeTag != afterChange.recordChangeTag)

        let metadata = try await f.carol.shareMetadata(for: share.url)
        #expect(metadata.participantRole == .publicUser)
        #expect(metadata.participantStatus == .pending)
        #expect(metadata.participantPermission == .readWrite)
        let joined = try await f.carol.accept(metadata)
        #expect(joined.currentUserParticipant?.role == .publicUser)
        #expect(joined.currentUserParticipant?.acceptanceStatus == .accepted)
        try await f.ledger.completeResidualTasks()
        #expect(try f.carol.sharedDatabaseZones().count == 1)

        _ = try await f.alice.setPublicPermission(.none, for: share.url)
        #expect(await errorCode { try await f.carol.shareMetadata(for: share.url) } == .unknownItem)
        try await f.ledger.completeResidualTasks()
        #expect(try f.carol.sharedDatabaseZones().isEmpty)
        #expect(try f.ledger.statistics().acceptedParticipants == 0)
        await f.ledger.close()
    }

    @Test("one record, one share: every exclusivity rule and its error")
    func exclusivity() async throws {
        let f = try await SharingFixture()
        try await f.makeHierarchy()
        let zone = SharingFixture.zone
        #expect(await errorCode { try await f.alice.share(rootRecord: SharingFixture.recordID("list")) } == .alreadyShared)
        #expect(await errorCode { try await f.alice.share(rootRecord: SharingFixture.recordID("item")) } == .alreadyShared)
        _ = try await f.alice.save(Record(recordType: "List", recordID: SharingFixture.recordID("top")))
        // "top" would become the parent of the shared "list": a share below a share.
        let list = try f.alice.record(for: SharingFixture.recordID("list"))
        let other = try await f.alice.share(rootRecord: SharingFixture.recordID("top"))
        var moved = list
        moved.parent = SharingFixture.recordID("top")
        #expect(await errorCode { try await f.alice.save(moved) } == .alreadyShared)
        #expect(await errorCode { try await f.alice.share(recordZoneID: zone) } == .invalidArguments)

        // A zone-wide share in a fresh zone.
        let zone2 = RecordZoneID(zoneName: "Trips")
        _ = try await f.alice.save(RecordZone(zoneID: zone2))
        _ = try await f.alice.save(Record(recordType: "Trip", recordID: RecordID(recordName: "t", zoneID: zone2)))
        let zoneShare = try await f.alice.share(recordZoneID: zone2)
        #expect(zoneShare.isZoneWide)
        #expect(zoneShare.recordID.recordName == "cloudkit.zoneshare")
        #expect(await errorCode { try await f.alice.share(recordZoneID: zone2) } == .serverRecordChanged)
        #expect(
            await errorCode { try await f.alice.share(rootRecord: RecordID(recordName: "t", zoneID: zone2)) } == .serverRejectedRequest)
        // Zone-wide metadata has no root, whatever is asked.
        let zoneMetadata = try await f.alice.shareMetadatas(for: [zoneShare.url], shouldFetchRootRecord: true)[zoneShare.url]!.get()
        #expect(zoneMetadata.hierarchicalRootRecordID == nil)
        #expect(zoneMetadata.rootRecord == nil)
        _ = other
        await f.ledger.close()
    }

    @Test("the URL is stable across deleting and re-sharing the same root; deleting the root deletes the share")
    func stableURL() async throws {
        let (f, share) = try await SharingFixture.withShare()
        try await f.alice.deleteShare(share.url)
        #expect(await errorCode { try await f.alice.shareMetadata(for: share.url) } == .unknownItem)
        let again = try await f.alice.share(rootRecord: SharingFixture.recordID("list"))
        #expect(again.url.absoluteString.hasPrefix(share.url.absoluteString.components(separatedBy: "#")[0]))
        #expect(again.token == share.token)
        // The same URL, but never the same change tag: a tag kept from the deleted share is stale.
        #expect(again.recordChangeTag != share.recordChangeTag)
        #expect(await errorCode { try await f.alice.setTitle("x", for: again.url, ifChangeTag: share.recordChangeTag) } == .serverRecordChanged)
        _ = try await f.alice.setTitle("x", for: again.url, ifChangeTag: again.recordChangeTag)
        try await f.alice.deleteRecord(withID: SharingFixture.recordID("list"))
        #expect(await errorCode { try await f.alice.shareMetadata(for: share.url) } == .unknownItem)
        #expect(try f.ledger.statistics().shares == 0)
        await f.ledger.close()
    }

    @Test("root record on request, limited to the desired keys")
    func rootRecord() async throws {
        let (f, share) = try await SharingFixture.withShare()
        _ = try await f.alice.save(
            {
                var r = try! f.alice.record(for: SharingFixture.recordID("list"))
                r["color"] = .string("green")
                return r
            }())
        let all = try await f.alice.shareMetadatas(for: [share.url], shouldFetchRootRecord: true)[share.url]!.get()
        #expect(all.rootRecord?.fields.keys.sorted() == ["color", "title"])
        let some = try await f.alice.shareMetadatas(for: [share.url], shouldFetchRootRecord: true, rootRecordDesiredKeys: ["title"])[share.url]!.get()
        #expect(some.rootRecord?.fields.keys.sorted() == ["title"])
        let none = try await f.alice.shareMetadatas(for: [share.url], shouldFetchRootRecord: true, rootRecordDesiredKeys: [])[share.url]!.get()
        #expect(none.rootRecord?.fields.isEmpty == true)
        #expect(none.rootRecord?.recordID.recordName == "list")
        await f.ledger.close()
    }

    @Test("batch fetch: per-URL results, >400 URLs refused, no account, and every fetch is logged")
    func batchFetch() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let bogus = URL(string: "https://share.localhost/share/not-a-token")!
        let before = try f.ledger.statistics().events
        let results = try await f.bob.shareMetadatas(for: [share.url, bogus, share.url])
        #expect(results.count == 2)
        #expect(results[bogus]?.errorCode == .unknownItem)
        #expect(try f.ledger.statistics().events == before + 2)

        let many = (0..<401).map { URL(string: "https://share.localhost/share/0\(String(repeating: "A", count: 21))\(1000 + $0)")! }
        #expect(await errorCode { try await f.bob.shareMetadatas(for: many) } == .limitExceeded)
        #expect(try f.ledger.statistics().events == before + 2)

        #expect(await errorCode { try await f.as_(nil).shareMetadata(for: share.url) } == .notAuthenticated)
        #expect(await errorCode { try await f.as_("_nobody").shareMetadata(for: share.url) } == .notAuthenticated)
        // Without an account the request fails as a whole, as in CloudKit: it is not a fetch, nothing is logged.
        #expect(try f.ledger.statistics().events == before + 2)
        #expect(try await f.bob.shareMetadatas(for: []).isEmpty)
        await f.ledger.close()
    }

    @Test("batch fetch by token: the results, the limit and the logged events of the fetch by URL")
    func batchFetchByToken() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let unknown = ShareToken.generate()
        let unknownURL = try #require(ShareURL.make(host: f.ledger.configuration.shareURLHost, token: unknown))
        let start = try f.ledger.log.head().position
        let byURL = try await f.alice.shareMetadatas(for: [share.url, unknownURL, share.url], shouldFetchRootRecord: true)
        let middle = try f.ledger.log.head().position
        let byToken = try await f.alice.shareMetadatas(forTokens: [share.token, unknown, share.token], shouldFetchRootRecord: true)
        #expect(byToken.count == 2)
        #expect(try byToken[share.token]?.get() == byURL[share.url]?.get())
        #expect(byToken[unknown]?.errorCode == .unknownItem)
        #expect(byURL[unknownURL]?.errorCode == .unknownItem)
        // The same events, payloads included: each fetch is logged as the fetch of its URL.
        let urlEvents = try f.ledger.log.events(after: start, limit: .max).filter { $0.position <= middle }
        let tokenEvents = try f.ledger.log.events(after: middle, limit: .max)
        #expect(urlEvents.count == 2)
        #expect(tokenEvents.map(\.eventType) == urlEvents.map(\.eventType))
        #expect(tokenEvents.map(\.payload) == urlEvents.map(\.payload))

        let many = (0..<401).map { _ in ShareToken.generate() }
        #expect(await errorCode { try await f.bob.shareMetadatas(forTokens: many) } == .limitExceeded)
        #expect(await errorCode { try await f.as_(nil).shareMetadatas(forTokens: [share.token]) } == .notAuthenticated)
        #expect(try f.ledger.log.head().position == tokenEvents.last?.position)
        #expect(try await f.bob.shareMetadatas(forTokens: []).isEmpty)
        await f.ledger.close()
    }

    @Test("accept: owner no-op, not invited, removed, deleted, wrong container")
    func acceptErrors() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let ownerMetadata = try await f.alice.shareMetadata(for: share.url)
        let events = try f.ledger.statistics().events
        _ = try await f.alice.accept(ownerMetadata)
        #expect(try f.ledger.statistics().events == events)

        #expect(await errorCode { try await f.carol.accept(ownerMetadata) } == .permissionFailure)

        let withBob = try await f.alice.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_bob")), permission: .readWrite, to: share.url)
        let bobID = try #require(withBob.participants.first { $0.userIdentity.userRecordID?.recordName == "_bob" }?.participantID)
        let bobMetadata = try await f.bob.shareMetadata(for: share.url)
        _ = try await f.alice.removeParticipant(bobID, from: share.url)
        #expect(await errorCode { try await f.bob.accept(bobMetadata) } == .permissionFailure)

        await f.ledger.registerUserIgnoringErrors("_bob", in: "iCloud.com.example.other")
        let elsewhere = f.ledger.container("iCloud.com.example.other", userRecordName: "_bob")
        #expect(await errorCode { try await elsewhere.accept(bobMetadata) } == .badContainer)

        try await f.alice.deleteShare(share.url)
        #expect(await errorCode { try await f.alice.accept(ownerMetadata) } == .unknownItem)
        await f.ledger.close()
    }

    @Test("participant management: who may do what, the 100-participant limit, leaving")
    func management() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let withBob = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly, to: share.url)
        let bobID = try #require(withBob.participants.first { $0.userIdentity.userRecordID?.recordName == "_bob" }?.participantID)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        // A read-only private user may not invite, remove or change the share.
        #expect(await errorCode { try await f.bob.addParticipant(LookupInfo(emailAddress: "carol@example.com"), permission: .readOnly, to: share.url) } == .permissionFailure)
        #expect(await errorCode { try await f.bob.setPublicPermission(.readOnly, for: share.url) } == .permissionFailure)
        #expect(await errorCode { try await f.bob.deleteShare(share.url) } == .permissionFailure)
        // Nor write the shared records.
        let itemID = RecordID(recordName: "item", zoneID: RecordZoneID(zoneName: "Notes", ownerName: "_alice"))
        var item = try f.bob.record(for: itemID)
        item["name"] = .string("oat milk")
        #expect(await errorCode { try await f.bob.save(item) } == .permissionFailure)
        // As an administrator Bob may invite; only the owner may change the public permission.
        let promoted = try await f.alice.setPermission(.readWrite, role: .administrator, forParticipant: bobID, in: share.url)
        #expect(promoted.participants.first { $0.participantID == bobID }?.role == .administrator)
        _ = try await f.bob.addParticipant(LookupInfo(emailAddress: "carol@example.com"), permission: .readOnly, to: share.url)
        #expect(await errorCode { try await f.bob.setPublicPermission(.readOnly, for: share.url) } == .permissionFailure)
        #expect(await errorCode { try await f.bob.removeParticipant(share.owner.participantID, from: share.url) } == .permissionFailure)
        // Read-write lets Bob change records, but not delete the root.
        item = try f.bob.record(for: itemID)
        item["name"] = .string("oat milk")
        _ = try await f.bob.save(item)
        #expect(await errorCode { try await f.bob.deleteRecord(withID: RecordID(recordName: "list", zoneID: itemID.zoneID)) } == .permissionFailure)
        // A stale change tag.
        #expect(await errorCode { try await f.alice.setTitle("x", for: share.url, ifChangeTag: withBob.recordChangeTag) } == .serverRecordChanged)

        // Leaving: access ends at once.
        try await f.bob.leaveShare(share.url)
        #expect(await errorCode { try f.bob.record(for: itemID) } == .unknownItem)
        #expect(await errorCode { try await f.alice.leaveShare(share.url) } == .invalidArguments)

        // 100 participants at most, the owner included (carol is the second).
        for index in 0..<98 {
            _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "guest\(index)@example.org"), permission: .readOnly, to: share.url)
        }
        #expect(
            await errorCode { try await f.alice.addParticipant(LookupInfo(emailAddress: "one-too-many@example.org"), permission: .readOnly, to: share.url) }
                == .tooManyParticipants)
        await f.ledger.close()
    }

    @Test("records: change tags, missing parent, zones, bad input changes nothing")
    func records() async throws {
        let f = try await SharingFixture()
        try await f.makeHierarchy()
        let before = try f.ledger.statistics()
        var list = try f.alice.record(for: SharingFixture.recordID("list"))
        var stale = list
        list["title"] = .string("Food")
        list = try await f.alice.save(list)
        stale["title"] = .string("Drinks")
        #expect(await errorCode { try await f.alice.save(stale) } == .serverRecordChanged)
        #expect(await errorCode { try await f.alice.save(Record(recordType: "List", recordID: SharingFixture.recordID("list"))) } == .serverRecordChanged)
        #expect(
            await errorCode { try await f.alice.save(Record(recordType: "Item", recordID: SharingFixture.recordID("orphan"), parent: SharingFixture.recordID("missing"))) }
                == .referenceViolation)
        #expect(
            await errorCode { try await f.alice.save(Record(recordType: "Item", recordID: RecordID(recordName: "x", zoneID: RecordZoneID(zoneName: "Nope")))) }
                == .zoneNotFound)
        #expect(
            await errorCode { try await f.alice.save(Record(recordType: "Blob", recordID: SharingFixture.recordID("big"), fields: ["data": .bytes([UInt8](repeating: 1, count: 1_000_001))])) }
                == .limitExceeded)
        #expect(await errorCode { try await f.bob.save(RecordZone(zoneID: RecordZoneID(zoneName: "Z", ownerName: "_alice"))) } == .badDatabase)
        var cycle = try f.alice.record(for: SharingFixture.recordID("list"))
        cycle.parent = SharingFixture.recordID("item")
        #expect(await errorCode { try await f.alice.save(cycle) } == .invalidArguments)
        let after = try f.ledger.statistics()
        #expect(after.events == before.events + 1)
        #expect(after.records == before.records)
        await f.ledger.close()
    }
}


@Suite("Sharing: identities across containers and time")
struct SharingIdentityTests {
    @Test("user record names are per container: the same name elsewhere is nobody the share knows")
    func namesakeElsewhere() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly)
        #expect(try await f.bob.shareMetadata(for: share.url).participantStatus == .pending)
        try await f.ledger.registerUser("_bob", in: "iCloud.com.example.other")
        let namesake = f.ledger.container("iCloud.com.example.other", userRecordName: "_bob")
        #expect(await errorCode { try await namesake.shareMetadatas(for: [share.url], shouldFetchRootRecord: true)[share.url]!.get() } == .unknownItem)
        // On a public share the namesake is a prospective public user, who sees only the owner.
        _ = try await f.alice.setPublicPermission(.readOnly, for: share.url)
        let metadata = try await namesake.shareMetadata(for: share.url)
        #expect(metadata.participantRole == .publicUser)
        #expect(metadata.participantStatus == .pending)
        #expect(metadata.share.participants.map(\.role) == [.owner])
        await f.ledger.close()
    }

    @Test("an invitation sent before the invitee registered binds to the account when invited again")
    func inviteBeforeRegistration() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: LookupInfo(emailAddress: "erin@example.com"), permission: .readOnly)
        try await f.ledger.registerUser("_erin", in: SharingFixture.container, emailAddress: "erin@example.com")
        let erin = f.as_("_erin")
        #expect(await errorCode { try await erin.shareMetadata(for: share.url) } == .participantMayNeedVerification)
        // Invited again by account: the same participant, now with the account.
        let bound = try await f.alice.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_erin")), permission: .readWrite, to: share.url)
        #expect(bound.participants.count == 2)
        let entry = try #require(bound.participants.first { $0.role != .owner })
        #expect(entry.userIdentity.userRecordID?.recordName == "_erin")
        #expect(entry.permission == .readWrite)
        let metadata = try await erin.shareMetadata(for: share.url)
        #expect(metadata.participantStatus == .pending)
        // No unmatched invitation is left: a stranger learns nothing.
        #expect(await errorCode { try await f.carol.shareMetadata(for: share.url) } == .unknownItem)
        // The same by email, for an invitation to a phone number.
        _ = try await f.alice.addParticipant(LookupInfo(phoneNumber: "+1 555 0199"), permission: .readOnly, to: share.url)
        try await f.ledger.registerUser("_finn", in: SharingFixture.container, phoneNumber: "+15550199")
        let again = try await f.alice.addParticipant(LookupInfo(phoneNumber: "+1 (555) 0199"), permission: .readOnly, to: share.url)
        #expect(again.participants.count == 3)
        #expect(again.participants.contains { $0.userIdentity.userRecordID?.recordName == "_finn" })
        #expect(try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("rebuilt")).ok)
        await f.ledger.close()
    }
}

extension RecordID {
    func withOwner(_ owner: String) -> RecordID {
        RecordID(recordName: recordName, zoneID: RecordZoneID(zoneName: zoneID.zoneName, ownerName: owner))
    }
}

extension ShareLedger {
    func registerUserIgnoringErrors(_ name: String, in container: String) async {
        _ = try? await registerUser(name, in: container)
    }
}

@Suite("Sharing: review fixes")
struct SharingEdgeTests {
    @Test("public users follow a change of the public permission")
    func publicDowngrade() async throws {
        let (f, share) = try await SharingFixture.withShare()
        _ = try await f.alice.setPublicPermission(.readWrite, for: share.url)
        _ = try await f.carol.accept(try await f.carol.shareMetadata(for: share.url))
        _ = try await f.alice.setPublicPermission(.readOnly, for: share.url)
        let metadata = try await f.carol.shareMetadata(for: share.url)
        #expect(metadata.participantPermission == .readOnly)
        let itemID = RecordID(recordName: "item", zoneID: RecordZoneID(zoneName: "Notes", ownerName: "_alice"))
        var item = try f.carol.record(for: itemID)
        item["name"] = .string("cream")
        #expect(await errorCode { try await f.carol.save(item) } == .permissionFailure)
        await f.ledger.close()
    }

    @Test("names and ids too long for a key are refused cleanly and do not disturb other commands")
    func oversizedNames() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let long = String(repeating: "x", count: 600)
        let stranger = f.as_(long)
        #expect(await errorCode { try await stranger.shareMetadata(for: share.url) } == .notAuthenticated)
        #expect(await errorCode { try await f.alice.removeParticipant(long, from: share.url) } == .unknownItem)
        #expect(await errorCode { try await f.alice.setPermission(.readOnly, forParticipant: long, in: share.url) } == .unknownItem)
        let foreignZone = RecordZoneID(zoneName: long, ownerName: long)
        #expect(await errorCode { try await f.alice.save(Record(recordType: "T", recordID: RecordID(recordName: "r", zoneID: foreignZone))) } == .zoneNotFound)
        #expect(await errorCode { try await f.alice.deleteRecord(withID: RecordID(recordName: long, zoneID: SharingFixture.zone)) } == .unknownItem)
        #expect(await errorCode { try await f.alice.share(rootRecord: RecordID(recordName: long, zoneID: SharingFixture.zone)) } == .unknownItem)
        #expect(await errorCode { try await f.alice.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: long)), permission: .readOnly, to: share.url) } == .unknownItem)
        // Concurrent with a good command, none of these fails it.
        async let good = f.alice.setTitle("Still fine", for: share.url)
        async let bad = errorCode { try await f.alice.removeParticipant(long, from: share.url) }
        #expect(try await good.title == "Still fine")
        #expect(await bad == .unknownItem)
        await f.ledger.close()
    }

    @Test("a read-write participant cannot move a record out of the share")
    func noMovingOut() async throws {
        let (f, share) = try await SharingFixture.withShare()
        _ = try await f.alice.save(Record(recordType: "Secret", recordID: SharingFixture.recordID("secret")))
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readWrite, to: share.url)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        let zone = RecordZoneID(zoneName: "Notes", ownerName: "_alice")
        var item = try f.bob.record(for: RecordID(recordName: "item", zoneID: zone))
        item.parent = nil
        #expect(await errorCode { try await f.bob.save(item) } == .permissionFailure)
        item.parent = RecordID(recordName: "secret", zoneID: zone)
        #expect(await errorCode { try await f.bob.save(item) } == .permissionFailure)
        // A new record under the shared root is fine; under the owner's private record it is not.
        _ = try await f.bob.save(Record(recordType: "Item", recordID: RecordID(recordName: "eggs", zoneID: zone), parent: RecordID(recordName: "list", zoneID: zone)))
        #expect(await errorCode { try await f.bob.save(Record(recordType: "Item", recordID: RecordID(recordName: "peek", zoneID: zone), parent: RecordID(recordName: "secret", zoneID: zone))) } == .unknownItem)
        await f.ledger.close()
    }

    @Test("a pending administrator sees what a pending participant sees")
    func pendingAdministrator() async throws {
        let (f, share) = try await SharingFixture.withShare()
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readWrite, role: .administrator, to: share.url)
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "someone@nowhere.org"), permission: .readOnly, to: share.url)
        let seenByBob = try await f.bob.shareMetadata(for: share.url).share
        #expect(Set(seenByBob.participants.map { $0.userIdentity.userRecordID?.recordName ?? "?" }) == ["_alice", "_bob"])
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        #expect(try f.bob.share(for: share.url).participants.count == 3)
        await f.ledger.close()
    }
}
