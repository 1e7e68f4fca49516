import Foundation
@testable import ShareLedger
import TestSupport
import Testing

/// The error a call ends with, whole (code, message, partial errors, underlying text), or nil.
func ledgerError(_ body: () async throws -> Void) async -> LedgerError? {
    do {
        try await body()
        return nil
    } catch let error as LedgerError {
        return error
    } catch {
        return LedgerError(LedgerError.Code(rawValue: -1), "not a LedgerError: \(error)")
    }
}

@Suite("Access control")
struct AccessControlTests {
    static let unknownURL = URL(string: "https://share.localhost/share/0ZZZZZZZZZZZZZZZZZZZZZZZZZ")!
    static let notesZone = RecordZoneID(zoneName: "Notes", ownerName: "_alice")
    static func aliceRecord(_ name: String) -> RecordID { RecordID(recordName: name, zoneID: notesZone) }

    /// Every call a caller can make with a share URL, and what the records of the share look like to
    /// them; each answer must be exactly the one for an unknown URL (or an unknown record).
    static func expectLearnsNothing(_ f: SharingFixture, _ who: Container, about share: Share, _ label: String) async throws {
        for call in URLCall.all {
            let real = await ledgerError { try await call.run(who, share.url) }
            let unknown = await ledgerError { try await call.run(who, unknownURL) }
            #expect(real != nil, "\(label): \(call) succeeded")
            #expect(real == unknown, "\(label): \(call) tells the share apart: \(String(describing: real)) vs \(String(describing: unknown))")
        }
        // Fetching (logged) and its batch form.
        let fetched = await ledgerError { _ = try await who.shareMetadata(for: share.url) }
        #expect(fetched == (await ledgerError { _ = try await who.shareMetadata(for: unknownURL) }), "\(label): fetch")
        let batch = try await who.shareMetadatas(for: [share.url, unknownURL])
        #expect(batch[share.url]?.errorCode == .unknownItem, "\(label): batch fetch")
        if case .failure(let a) = batch[share.url], case .failure(let b) = batch[unknownURL] {
            #expect(a == b, "\(label): batch fetch tells the share apart")
        }
        // The shared records: reading, writing and deleting answer as for records that do not exist.
        for (name, missing) in [("list", "no-such-record"), ("item", "no-such-record")] {
            let read = await ledgerError { _ = try who.record(for: aliceRecord(name)) }
            let readMissing = await ledgerError { _ = try who.record(for: aliceRecord(missing)) }
            #expect(read?.code == .unknownItem, "\(label): read \(name)")
            #expect(read?.message.replacingOccurrences(of: name, with: missing) == readMissing?.message, "\(label): read \(name)")
            let delete = await ledgerError { try await who.deleteRecord(withID: aliceRecord(name)) }
            let deleteMissing = await ledgerError { try await who.deleteRecord(withID: aliceRecord(missing)) }
            #expect(delete?.code == .unknownItem || delete?.code == .zoneNotFound, "\(label): delete \(name)")
            #expect(delete == deleteMissing, "\(label): delete \(name)")
            let write = await ledgerError {
                _ = try await who.save(Record(recordType: "Item", recordID: aliceRecord("new"), parent: aliceRecord(name)))
            }
            let writeMissing = await ledgerError {
                _ = try await who.save(Record(recordType: "Item", recordID: aliceRecord("new"), parent: aliceRecord(missing)))
            }
            #expect(write?.code == .unknownItem || write?.code == .zoneNotFound, "\(label): write under \(name)")
            #expect(write == writeMissing, "\(label): write under \(name)")
        }
        #expect(try who.participatingShares(status: Set(Share.Participant.AcceptanceStatus.allCases)).allSatisfy { $0.token != share.token })
    }

    @Test("a non-participant, a removed participant and a leaver learn nothing: every answer equals the unknown URL's")
    func strangersLearnNothing() async throws {
        let (f, share) = try await SharingFixture.withShare()
        try await f.ledger.registerUser("_dave", in: SharingFixture.container)
        try await f.ledger.registerUser("_alice", in: "iCloud.com.example.other")

        // Carol was never invited.
        try await Self.expectLearnsNothing(f, f.carol, about: share, "stranger")
        // Alice herself, from another container, is nobody the share knows.
        try await Self.expectLearnsNothing(f, f.ledger.container("iCloud.com.example.other", userRecordName: "_alice"), about: share, "other container")

        // Bob accepts, then is removed; Dave accepts, then leaves.
        let invited = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readWrite, to: share.url)
        let bobID = try #require(invited.participants.first { $0.userIdentity.userRecordID?.recordName == "_bob" }?.participantID)
        _ = try await f.alice.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_dave")), permission: .readWrite, role: .administrator, to: share.url)
        let dave = f.as_("_dave")
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        _ = try await dave.accept(try await dave.shareMetadata(for: share.url))
        _ = try f.bob.record(for: Self.aliceRecord("item"))
        _ = try dave.record(for: Self.aliceRecord("item"))

        _ = try await f.alice.removeParticipant(bobID, from: share.url)
        try await Self.expectLearnsNothing(f, f.bob, about: share, "removed")
        try await dave.leaveShare(share.url)
        try await Self.expectLearnsNothing(f, dave, about: share, "leaver")
        await f.ledger.close()
    }

    @Test("removal and leaving take effect at once: no read, write, management or accept in the next call")
    func accessEndsAtOnce() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let invited = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readWrite, role: .administrator, to: share.url)
        let bobID = try #require(invited.participants.first { $0.userIdentity.userRecordID?.recordName == "_bob" }?.participantID)
        let metadata = try await f.bob.shareMetadata(for: share.url)
        _ = try await f.bob.accept(metadata)
        // Bob can do everything an accepted read-write administrator may.
        var item = try f.bob.record(for: Self.aliceRecord("item"))
        item["name"] = .string("bread")
        item = try await f.bob.save(item)
        _ = try await f.bob.setTitle("Bob's title", for: share.url)

        _ = try await f.alice.removeParticipant(bobID, from: share.url)
        // The very next calls fail, before any residual task has run.
        #expect(try f.ledger.statistics().pendingResidualTasks > 0)
        #expect(await errorCode { try f.bob.record(for: Self.aliceRecord("item")) } == .unknownItem)
        item["name"] = .string("cake")
        #expect(await errorCode { try await f.bob.save(item) } == .unknownItem)
        #expect(await errorCode { try await f.bob.setTitle("again", for: share.url) } == .unknownItem)
        #expect(await errorCode { try await f.bob.addParticipant(LookupInfo(emailAddress: "carol@example.com"), permission: .readOnly, to: share.url) } == .unknownItem)
        #expect(await errorCode { try f.bob.share(for: share.url) } == .unknownItem)
        #expect(await errorCode { try await f.bob.accept(metadata) } == .permissionFailure)
        #expect(try f.bob.participatingShares().isEmpty)

        // Invited again and accepted, then leaving: the same at once.
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readWrite, to: share.url)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        _ = try f.bob.record(for: Self.aliceRecord("item"))
        try await f.bob.leaveShare(share.url)
        #expect(await errorCode { try f.bob.record(for: Self.aliceRecord("item")) } == .unknownItem)
        #expect(await errorCode { try await f.bob.save(item) } == .unknownItem)
        #expect(await errorCode { try await f.bob.leaveShare(share.url) } == .unknownItem)

        // Deleting the share ends everyone's access at once too.
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "carol@example.com"), permission: .readOnly, to: share.url)
        _ = try await f.carol.accept(try await f.carol.shareMetadata(for: share.url))
        try await f.alice.deleteShare(share.url)
        #expect(await errorCode { try f.carol.record(for: Self.aliceRecord("item")) } == .unknownItem)
        #expect(await errorCode { try await f.carol.shareMetadata(for: share.url) } == .unknownItem)
        await f.ledger.close()
    }

    /// The standings a caller can have in a share.
    enum Standing: String, CaseIterable, Sendable {
        case owner, acceptedAdministrator, pendingAdministrator, readWriteUser, readOnlyUser, publicUser, stranger, removedAdministrator
    }

    @Test("only the owner and accepted administrators manage participants; nobody removes the owner")
    func management() async throws {
        // Management calls per standing: nil = allowed, else the error code.
        let manage: [Standing: LedgerError.Code?] = [
            .owner: nil, .acceptedAdministrator: nil, .pendingAdministrator: .permissionFailure, .readWriteUser: .permissionFailure,
            .readOnlyUser: .permissionFailure, .stranger: .unknownItem, .removedAdministrator: .unknownItem,
        ]
        for (standing, expected) in manage.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            let (f, share) = try await SharingFixture.withShare()
            let (who, target) = try await Self.setUp(f, share, standing)
            let before = try f.ledger.snapshot()
            let calls: [(String, @Sendable () async throws -> Void)] = [
                ("add", { _ = try await who.addParticipant(LookupInfo(emailAddress: "new@example.org"), permission: .readOnly, to: share.url) }),
                ("set permission", { _ = try await who.setPermission(.readWrite, forParticipant: target, in: share.url) }),
                ("remove", { _ = try await who.removeParticipant(target, from: share.url) }),
                ("title", { _ = try await who.setTitle("new title \(standing)", for: share.url) }),
            ]
            for (name, call) in calls {
                let code = await errorCode { try await call() }
                #expect(code == expected, "\(standing) \(name): \(String(describing: code))")
            }
            if expected != nil { #expect(try f.ledger.snapshot() == before, "\(standing) changed the share") }
            // Only the owner changes the public permission or deletes the share.
            let ownerOnly: LedgerError.Code? = standing == .owner ? nil : (expected == .unknownItem ? .unknownItem : .permissionFailure)
            #expect(await errorCode { try await who.setPublicPermission(.readOnly, for: share.url) } == ownerOnly, "\(standing) public permission")
            // Nobody removes the owner or changes the owner's role; the owner cannot leave.
            let removeOwner = await errorCode { try await who.removeParticipant(share.owner.participantID, from: share.url) }
            #expect(removeOwner == (expected == .unknownItem ? .unknownItem : .permissionFailure), "\(standing) removes the owner")
            let changeOwner = await errorCode { try await who.setPermission(.readOnly, forParticipant: share.owner.participantID, in: share.url) }
            #expect(changeOwner != nil, "\(standing) changed the owner")
            #expect(try f.alice.share(for: share.url).owner.acceptanceStatus == .accepted)
            if standing == .owner {
                #expect(await errorCode { try await who.leaveShare(share.url) } == .invalidArguments)
            } else if standing != .publicUser {
                #expect(await errorCode { try await who.deleteShare(share.url) } == (expected == .unknownItem ? .unknownItem : .permissionFailure))
            }
            await f.ledger.close()
        }
    }

    @Test("read-only participants, public read-only users, pending invitees and strangers cannot change shared records")
    func recordWrites() async throws {
        // Per standing: the error of changing a shared record (nil = allowed).
        let expected: [Standing: LedgerError.Code?] = [
            .owner: nil, .acceptedAdministrator: nil, .readWriteUser: nil,
            .readOnlyUser: .permissionFailure, .publicUser: .permissionFailure, .pendingAdministrator: .unknownItem,
            .stranger: .unknownItem, .removedAdministrator: .unknownItem,
        ]
        for (standing, code) in expected.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            let (f, share) = try await SharingFixture.withShare()
            let (who, _) = try await Self.setUp(f, share, standing)
            let before = try f.ledger.snapshot()
            var item = try f.alice.record(for: SharingFixture.recordID("item"))
            item.recordID = Self.aliceRecord("item")
            item["name"] = .string("changed by \(standing)")
            let change = await errorCode { _ = try await who.save(item) }
            #expect(change == code, "\(standing) changes a record: \(String(describing: change))")
            if code != nil {
                let create = await errorCode {
                    _ = try await who.save(Record(recordType: "Item", recordID: Self.aliceRecord("extra"), parent: Self.aliceRecord("list")))
                }
                #expect(create == code, "\(standing) creates a record")
                let delete = await errorCode { try await who.deleteRecord(withID: Self.aliceRecord("item")) }
                #expect(delete == code, "\(standing) deletes a record")
                #expect(try f.ledger.snapshot() == before, "\(standing) changed the ledger")
            }
            await f.ledger.close()
        }
    }

    /// Puts a caller in `standing` on `share` (public users on a public read-only share); returns the
    /// caller and a participant id (a private user's) to manage.
    static func setUp(_ f: SharingFixture, _ share: Share, _ standing: Standing) async throws -> (Container, String) {
        try await f.ledger.registerUser("_dave", in: SharingFixture.container)
        let dave = f.as_("_dave")
        let withCarol = try await f.alice.addParticipant(LookupInfo(emailAddress: "carol@example.com"), permission: .readOnly, to: share.url)
        let carolID = try #require(withCarol.participants.first { $0.userIdentity.userRecordID?.recordName == "_carol" }?.participantID)
        func invite(_ permission: Share.Participant.Permission, _ role: Share.Participant.Role, accept: Bool) async throws -> String {
            let shared = try await f.alice.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_dave")), permission: permission, role: role, to: share.url)
            if accept { _ = try await dave.accept(try await dave.shareMetadata(for: share.url)) }
            return try #require(shared.participants.first { $0.userIdentity.userRecordID?.recordName == "_dave" }?.participantID)
        }
        switch standing {
        case .owner: return (f.alice, carolID)
        case .acceptedAdministrator: _ = try await invite(.readWrite, .administrator, accept: true)
        case .pendingAdministrator: _ = try await invite(.readWrite, .administrator, accept: false)
        case .readWriteUser: _ = try await invite(.readWrite, .privateUser, accept: true)
        case .readOnlyUser: _ = try await invite(.readOnly, .privateUser, accept: true)
        case .stranger: break
        case .removedAdministrator:
            let id = try await invite(.readWrite, .administrator, accept: true)
            _ = try await f.alice.removeParticipant(id, from: share.url)
        case .publicUser:
            // Carol's pending invitation is dropped when the share goes public; Dave joins by URL.
            _ = try await f.alice.setPublicPermission(.readOnly, for: share.url)
            _ = try await dave.accept(try await dave.shareMetadata(for: share.url))
        }
        return (dave, carolID)
    }

    @Test("share tokens come from the system CSPRNG by default: 10,000 ledger-issued-shaped tokens are uniform over the alphabet")
    func tokensAreUniform() throws {
        #expect(ShareLedger.Configuration(path: "/nonexistent").randomSource is SystemRandomSource)
        // Chi-squared over the 25 random places of 10,000 tokens: 250,000 characters in 62 bins. With 61
        // degrees of freedom the statistic averages 61; 150 is beyond p = 1e-9 for a uniform source.
        var counts = [Character: Int]()
        var seen = Set<String>()
        for _ in 0..<10_000 {
            let token = ShareToken.generate()
            seen.insert(token.text)
            for character in token.text.dropFirst() { counts[character, default: 0] += 1 }
        }
        #expect(seen.count == 10_000)
        #expect(counts.count == 62)
        let expected = 250_000.0 / 62
        let chiSquared = counts.values.reduce(0.0) { $0 + (Double($1) - expected) * (Double($1) - expected) / expected }
        #expect(chiSquared < 150, "chi-squared \(chiSquared)")
    }

    @Test("the ledger's own shares get distinct, well-formed tokens from its random source")
    func ledgerTokens() async throws {
        let f = try await SharingFixture()
        _ = try await f.alice.save(RecordZone(zoneID: SharingFixture.zone))
        var tokens = Set<String>()
        for index in 0..<50 {
            let id = SharingFixture.recordID("r\(index)")
            _ = try await f.alice.save(Record(recordType: "T", recordID: id))
            let share = try await f.alice.share(rootRecord: id)
            #expect(ShareToken(share.token.text) == share.token)
            #expect(ShareURL.token(in: share.url) == share.token)
            tokens.insert(share.token.text)
        }
        #expect(tokens.count == 50)
        await f.ledger.close()
    }
}
