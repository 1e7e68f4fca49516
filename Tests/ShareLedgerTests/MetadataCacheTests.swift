import Foundation
import LMDB
import PropertyBased
import Synchronization
@testable import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// Kept metadata answers (``Container/shareMetadataWithoutLogging(for:)``) are always the answers the
/// read models give at that moment.
@Suite("Metadata cache")
struct MetadataCacheTests {
    /// Every user's answer for every share URL, kept and fresh, as comparable values.
    private static func answers(_ f: SharingFixture, urls: [URL], usingCache: Bool) -> [String] {
        var out: [String] = []
        for user in ReplayPropertyTests.users {
            for url in urls {
                do {
                    let metadata = try f.as_(user).shareMetadataWithoutLogging(for: url, usingCache: usingCache)
                    out.append("\(user) \(url.lastPathComponent): \(metadata.hashValue) \(metadata)")
                } catch {
                    out.append("\(user) \(url.lastPathComponent): \(error.code.name)")
                }
            }
        }
        return out
    }

    @Test("a share's URL follows its title: after a new title, and after the owner is forgotten, no answer shows a URL made before")
    func shareURLFollowsTitle() async throws {
        let f = try await SharingFixture()
        let share = try await f.makeHierarchy(title: "Groceries")
        _ = try await f.alice.addParticipant(
            LookupInfo(userRecordID: RecordID(userRecordName: "_bob")), permission: .readOnly, to: share.url)
        #expect(share.url.fragment == "Groceries")
        #expect(try f.alice.share(for: share.url).url.fragment == "Groceries")
        let renamed = try await f.alice.setTitle("Nora's list", for: share.url)
        #expect(renamed.url.fragment == "Nora_s_list")
        #expect(try f.alice.share(for: share.url).url.fragment == "Nora_s_list")
        #expect(try f.bob.shareMetadataWithoutLogging(for: share.url).share.url.fragment == "Nora_s_list")
        try await f.ledger.forget(user: "_alice", in: SharingFixture.container, requestedBy: "dsr-url")
        let erased = try f.bob.shareMetadataWithoutLogging(for: share.url).share
        #expect(erased.url.fragment == nil && erased.title == nil, "\(erased.url)")
        #expect(ShareURL.token(in: erased.url) == share.token)
        await f.ledger.close()
    }

    @Test("after every random action, each user's kept answer for each share equals a fresh one")
    func keptAnswersAreFresh() async throws {
        let hits = Counts()
        let body: @Sendable ([Int]) async throws -> Void = { numbers in
            let f = try await SharingFixture(seed: UInt64(numbers.count) &+ 7)
            for user in ReplayPropertyTests.users.prefix(3) {
                let zone = RecordZoneID(zoneName: "Z0")
                _ = try await f.as_(user).save(RecordZone(zoneID: zone))
                _ = try await f.as_(user).save(Record(recordType: "Item", recordID: RecordID(recordName: "r0", zoneID: zone)))
                _ = try await f.as_(user).share(rootRecord: RecordID(recordName: "r0", zoneID: zone), publicPermission: user == "_carol" ? .readOnly : .none)
            }
            // Every URL ever seen, so deleted and re-created shares (same URL) are asked about too.
            var urls: Set<URL> = []
            var local: [String: Int] = [:]
            var index = 0
            while index + 2 < numbers.count {
                await ReplayPropertyTests.perform(f, numbers[index], numbers[index + 1], numbers[index + 2], codes: &local)
                index += 3
                for user in ReplayPropertyTests.users.prefix(3) {
                    for share in (try? f.as_(user).ownedShares()) ?? [] { urls.insert(share.url) }
                }
                let sorted = urls.sorted { $0.absoluteString < $1.absoluteString }
                // Asked twice through the cache (the second time mostly from it), then fresh.
                _ = Self.answers(f, urls: sorted, usingCache: true)
                let before = f.ledger.metadataCache?.count ?? 0
                let validatedBefore = f.ledger.shareTags.hits.load(ordering: .relaxed)
                let kept = Self.answers(f, urls: sorted, usingCache: true)
                let validated = f.ledger.shareTags.hits.load(ordering: .relaxed) - validatedBefore
                let fresh = Self.answers(f, urls: sorted, usingCache: false)
                let first = zip(kept, fresh).first { $0 != $1 }
                #expect(kept.count == fresh.count && first == nil, "kept: \(first?.0 ?? "-")\nfresh: \(first?.1 ?? "-")")
                hits.add(["entries": before, "inMemory": validated])
            }
            await f.ledger.close()
        }
        // Fixed sequences first (coverage below rests on them), then random ones.
        for numbers in fixedSequences(count: 8, length: 30...120) { try await body(numbers) }
        await propertyCheck(count: 12, input: Gen.int(in: 0...1_000_000).array(of: 30...120)) { numbers in try await body(numbers) }
        #expect((hits.value["entries"] ?? 0) > 100, "the cache was used: \(hits.value)")
        #expect((hits.value["inMemory"] ?? 0) > 100, "kept answers were validated in memory: \(hits.value)")
    }

    @Test("a kept answer is validated in memory until a commit about its share; maintenance and other processes' commits make every answer read again")
    func inMemoryTags() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly)
        let tags = f.ledger.shareTags
        func inMemory(_ body: () throws -> Share.Metadata) rethrows -> (Share.Metadata, Bool) {
            let before = tags.hits.load(ordering: .relaxed)
            let metadata = try body()
            return (metadata, tags.hits.load(ordering: .relaxed) > before)
        }
        let bob = { try f.bob.shareMetadataWithoutLogging(for: share.url) }

        #expect(try inMemory(bob).1 == false, "the first answer reads")
        let (kept, fromMemory) = try inMemory(bob)
        #expect(fromMemory && kept.participantStatus == .pending)
        #expect(try inMemory { try f.alice.shareMetadataWithoutLogging(for: share.url) }.1, "the tag is the share's, for every viewer")

        // A commit about another share or about no share leaves the tag; one about this share does not.
        try await f.ledger.registerUser("_dave", in: SharingFixture.container)
        #expect(try inMemory(bob).1)
        _ = try await f.alice.setTitle("Errands", for: share.url)
        let (retitled, stale) = try inMemory(bob)
        #expect(!stale && retitled.share.title == "Errands")
        #expect(try inMemory(bob).1)

        // A refused command writes nothing (LMDB commits no transaction): the tags stay usable.
        await #expect(throws: LedgerError.self) { _ = try await f.bob.setTitle("Mine", for: share.url) }
        #expect(try inMemory(bob).1)

        // Maintenance work: every tag is forgotten.
        _ = try await f.ledger.maintain { _ in 0 }
        #expect(tags.count == 0)
        #expect(try inMemory(bob).1 == false)
        #expect(try inMemory(bob).1)

        // Another process accepts for Bob while this one keeps his pending answer.
        let accept = try await runProduct(
            "share-ledger",
            ["accept", share.url.absoluteString, "--as", "_bob", "--container", SharingFixture.container, "--path", f.dir.child("ledger"), "--json"],
            input: Data())
        #expect(accept.status == 0, "\(accept.stdout) \(accept.stderr)")
        let (afterOther, memory) = try inMemory(bob)
        #expect(!memory && afterOther.participantStatus == .accepted, "another process's commit is seen at once")
        // Until this process's writer commits again, every answer reads; after it, the tags start over.
        #expect(try inMemory(bob).1 == false)
        try await f.ledger.registerUser("_erin", in: SharingFixture.container)
        #expect(tags.count == 0)
        #expect(try inMemory(bob).1 == false)
        let (settled, again) = try inMemory(bob)
        #expect(again && settled.participantStatus == .accepted)
        await f.ledger.close()
    }

    @Test("keeping a tag inside a read transaction never waits for the environment's resize lock: no deadlock with a close (or a map resize) waiting for its exclusive side")
    func noDeadlockWithResize() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let token = try #require(ShareURL.token(in: share.url)).text
        let environment = f.ledger.log.store.environment
        let tags = f.ledger.shareTags
        let closed = Counter()
        let readDone = Counter()
        // On threads of their own, so that a deadlock fails this test instead of hanging the run.
        let reader = Thread {
            try? environment.read { txn in
                // Another thread asks for the exclusive side and waits for this transaction to end.
                let closer = Thread {
                    environment.close()
                    closed.increment()
                }
                closer.start()
                // Give it time to queue. (If it has not queued yet, nothing is proved, and nothing fails.)
                usleep(200_000)
                tags.remember(token, tag: 1, snapshot: txn.id)
            }
            readDone.increment()
        }
        reader.start()
        let deadline = ContinuousClock.now + .seconds(30)
        while (closed.value == 0 || readDone.value == 0) && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        guard closed.value == 1 && readDone.value == 1 else {
            // Left open: its threads are stuck.
            Issue.record("deadlock: the read transaction or the close did not finish in 30 s")
            return
        }
        await f.ledger.close()
    }

    @Test("an answer kept from rows that a rebuild then repaired (tag unchanged) is not given again")
    func rebuildRepairsKeptAnswers() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly)
        let token = try #require(ShareURL.token(in: share.url)).text
        let store = f.ledger.log.store
        // Damage the share row's title, leaving its change tag (as a stray write could).
        try store.environment.write { txn in
            var row = try #require(try store.models.share(txn, token))
            row.title = "Damaged"
            row.clearSealedTitle()  // (the title is sealed since crypto-shredding: damage both)
            try store.models.put(txn, store.models.shares, Array(token.utf8), row)
        }
        f.ledger.metadataCache?.removeAll()
        #expect(try f.bob.shareMetadataWithoutLogging(for: share.url).share.title == "Damaged")
        #expect(try f.bob.shareMetadataWithoutLogging(for: share.url).share.title == "Damaged", "kept")
        try await LedgerAudit(f.ledger).rebuildReadModels()
        #expect(try f.bob.shareMetadataWithoutLogging(for: share.url).share.title == "Groceries")
        #expect(try f.bob.shareMetadataWithoutLogging(for: share.url).share.title == "Groceries")
        await f.ledger.close()
    }

    @Test("a participant is kept beside its row while the rows are unchanged, and a forget of its user shows at once in every answer")
    func keptParticipantsFollowForget() async throws {
        let f = try await SharingFixture()
        var dana = PersonNameComponents()
        dana.givenName = "Dana"
        _ = try await f.ledger.registerUser("_dana", in: SharingFixture.container, nameComponents: dana)
        let share = try await f.makeHierarchy()
        _ = try await f.alice.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_dana")), permission: .readOnly, to: share.url)
        let danaContainer = f.as_("_dana")
        _ = try await danaContainer.accept(try await danaContainer.shareMetadata(for: share.url))
        var titles = 0
        func danaAsAliceSeesHer() async throws -> Share.Participant? {
            // A committed change's answer (the rows of the participants unchanged): its presenter
            // keeps participants beside their rows.
            titles += 1
            let answer = try await f.alice.setTitle("List \(titles)", for: share.url)
            return answer.participants.first { $0.userIdentity.userRecordID?.recordName == "_dana" }
        }
        #expect(try await danaAsAliceSeesHer()?.userIdentity.nameComponents?.givenName == "Dana")
        // Dana's user row replaced by an erased one, behind the ledger's back (no event, no new
        // generation): the participant kept beside her unchanged row is what answers show.
        let store = f.ledger.log.store
        try store.environment.write { txn in
            var erased = UserState()
            erased.forgottenAtMicros = 1
            try store.models.put(txn, store.models.users, ReadModels.userKey(SharingFixture.container, "_dana"), erased)
        }
        #expect(try await danaAsAliceSeesHer()?.userIdentity.nameComponents?.givenName == "Dana", "kept beside the row")
        // A forget through the ledger: every answer after it shows her erased.
        try await f.ledger.forget(user: "_dana", in: SharingFixture.container, requestedBy: "kept-participants")
        let after = try #require(try await danaAsAliceSeesHer())
        #expect(after.userIdentity.nameComponents == nil && after.userIdentity.personalDataErased == true, "\(after.userIdentity)")
        await f.ledger.close()
    }

    @Test("capacity 0 turns the cache off; a full cache starts over")
    func capacity() async throws {
        let cache = MetadataCache(capacity: 2)
        let (f, share) = try await SharingFixture.withShare()
        let metadata = try f.alice.shareMetadataWithoutLogging(for: share.url)
        for index in 0..<3 {
            cache.store(MetadataCache.Key(token: "t\(index)", container: "c", viewer: "v"), MetadataCache.Entry(validator: 1, metadata: metadata))
        }
        #expect(cache.count == 1)
        #expect(f.ledger.metadataCache != nil)
        await f.ledger.close()

        var configuration = Fixtures.configuration(f.dir.child("off"))
        configuration.metadataCacheCapacity = 0
        let off = try ShareLedger.open(configuration)
        #expect(off.metadataCache == nil)
        await off.close()
    }

    @Test("a logged fetch's answer reports the standing its decision found only while the share's change tag is the one it found; else it is worked out again")
    func decidedStandingFollowsTheTag() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: LookupInfo(userRecordID: RecordID(userRecordName: "_bob")))
        let token = try Container.token(of: share.url)
        let container = SharingFixture.container
        // A logged fetch's answer is the answer a fresh read gives.
        let logged = try await f.bob.shareMetadata(for: share.url)
        #expect(logged == (try f.bob.shareMetadataWithoutLogging(for: share.url, usingCache: false)))
        #expect(logged.participantStatus == .pending)
        let ledger = f.ledger
        let generation = ledger.shareTags.generation
        func answer(_ decided: MetadataStanding?) throws -> Share.Metadata {
            try ledger.read("test") { txn in
                try Container.metadata(
                    txn, ledger: ledger, token: token, container: container, viewer: "_bob", cache: nil, generation: generation,
                    decided: decided)
            }
        }
        let found = try ledger.read("test") { txn in
            try Decider(models: ledger.models, container: container, actor: "_bob", signedIn: true, now: 0)
                .metadataStanding(txn, tokenText: token)
        }
        // A standing told as decided (here, one no decision gave: accepted) is what the answer reports
        // while the tag is the one it was decided at...
        var told = found
        told.status = .accepted
        #expect(try answer(told).participantStatus == .accepted)
        // ...and is not used once the share changed since.
        told.share.changeTag &-= 1
        #expect(try answer(told).participantStatus == .pending)
        #expect(try answer(nil).participantStatus == .pending)
        await f.ledger.close()
    }
}
