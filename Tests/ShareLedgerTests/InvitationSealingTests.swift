import Foundation
@testable import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// Crypto-shredding of invitations and participant lookups (docs/architecture.md, "Personal data:
/// crypto-shredding"): the email or phone an invitation or a lookup went to is sealed under a key of
/// that address and matched by its keyed hash; forgetting a user destroys the keys of the addresses
/// they registered with, and an address nobody registered can be forgotten on its own.
@Suite("Crypto-shredding of invitations and participant lookups")
struct InvitationSealingTests {
    static let container = SharingFixture.container
    static let email = "Zelda.Marchbanks@example.net"
    static let phone = "+44 20 7946 0123"
    /// Someone else, invited by email, never forgotten.
    static let other = "yorick.pennywhistle@example.net"
    static let needles = CryptoShreddingTests.needles(for: [email, phone])

    /// The address's plaintext (any spelling) found in the files under `path`.
    static func scan(_ path: String) -> [String] { CryptoShreddingTests.plaintextFound(under: path, needles: needles) }

    /// A share of bob's (zone "Bob", record "n").
    static func bobsShare(_ f: SharingFixture) async throws -> Share {
        let zone = RecordZoneID(zoneName: "Bob")
        _ = try await f.bob.save(RecordZone(zoneID: zone))
        _ = try await f.bob.save(Record(recordType: "Note", recordID: RecordID(recordName: "n", zoneID: zone)))
        return try await f.bob.share(rootRecord: RecordID(recordName: "n", zoneID: zone), title: "Bob's")
    }

    /// The participant rows of `share`.
    static func rows(_ f: SharingFixture, _ share: Share) throws -> [ParticipantState] {
        try f.ledger.read("test") { txn in try f.ledger.models.participants(txn, share.token.text).map(\.state) }
    }

    @Test("invitations and lookups by email or phone are sealed: no plaintext on disk, yet answers show them, and matching still works (invite by email, register later, bind, accept; verify by phone)")
    func sealedInvitationsStillMatch() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: LookupInfo(emailAddress: Self.email), permission: .readWrite)
        _ = try await f.alice.addParticipant(LookupInfo(phoneNumber: Self.phone), permission: .readOnly, to: share.url)
        let looked = try await f.bob.shareParticipant(for: LookupInfo(emailAddress: Self.email))
        #expect(!looked.userIdentity.hasiCloudAccount && looked.userIdentity.lookupInfo?.emailAddress == Self.email)
        #expect(Self.scan(f.dir.child("ledger")).isEmpty, "\(Self.scan(f.dir.child("ledger")))")
        // The rows hold a box and a keyed hash (layout C3), no plaintext.
        let sealed = try Self.rows(f, share).filter { $0.hasSealedLookup }
        #expect(sealed.count == 2 && sealed.allSatisfy { $0.lookupInfo.emailAddress.isEmpty && $0.address != nil })
        #expect(sealed.allSatisfy { $0.compactBytes().first == 0xC3 })
        // The owner sees the addresses, opened at answer time.
        let seen = try f.alice.share(for: share.url)
        #expect(seen.participants.contains { $0.userIdentity.lookupInfo?.emailAddress == Self.email && $0.userIdentity.personalDataErased == nil })
        #expect(seen.participants.contains { $0.userIdentity.lookupInfo?.phoneNumber == Self.phone })

        // Invited by email, registers later (spelled otherwise), invited again by account: the same
        // invitation, now bound (matched by keyed hash); she accepts.
        try await f.ledger.registerUser("_zelda", in: Self.container, emailAddress: "  zelda.MARCHBANKS@example.net")
        let zelda = f.as_("_zelda")
        #expect(await errorCode { try await zelda.shareMetadata(for: share.url) } == .participantMayNeedVerification)
        let bound = try await f.alice.addParticipant(
            LookupInfo(userRecordID: RecordID(userRecordName: "_zelda")), permission: .readWrite, to: share.url)
        #expect(bound.participants.count == 3)
        let entry = try #require(bound.participants.first { $0.userIdentity.userRecordID?.recordName == "_zelda" })
        #expect(entry.userIdentity.lookupInfo?.emailAddress == Self.email)
        _ = try await zelda.accept(try await zelda.shareMetadata(for: share.url))
        #expect(try zelda.participatingShares(status: [.accepted]).count == 1)

        // Verifying the phone number, written another way, claims the invitation to it.
        let verification = try await f.carol.requestParticipantVerification(
            for: share.url, lookupInfo: LookupInfo(phoneNumber: "+44 (20) 7946-0123"))
        _ = try await f.carol.verifyParticipant(for: share.url, code: verification.code)
        _ = try await f.carol.accept(try await f.carol.shareMetadata(for: share.url))
        #expect(try f.carol.participatingShares(status: [.accepted]).count == 1)

        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok && report.eventsWithPlaintextPersonalData == 0, "\(report.problems) \(report.projectionDifferences)")
        #expect(Self.scan(f.dir.child("ledger")).isEmpty)
        await f.ledger.close()
    }

    @Test("forgetting a user erases the invitations to the addresses they registered with (sent before or after they registered) and bound to them, and their lookups: in answers, history, export and every file; others unaffected; audit, verify, rebuild and import agree")
    func forgetRegisteredInvitee() async throws {
        let (f, share) = try await SharingFixture.withShare()
        // Before she registers: an invitation to her email; and one to someone else.
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: Self.email), permission: .readOnly, to: share.url)
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: Self.other), permission: .readOnly, to: share.url)
        try await f.ledger.registerUser("_zelda", in: Self.container, emailAddress: Self.email, phoneNumber: Self.phone)
        // After: bob invites her by phone (bound to her account at once); carol looks her email up.
        let bobs = try await Self.bobsShare(f)
        let invited = try await f.bob.addParticipant(LookupInfo(phoneNumber: Self.phone), permission: .readOnly, to: bobs.url)
        #expect(invited.participants.contains { $0.userIdentity.userRecordID?.recordName == "_zelda" })
        _ = try await f.carol.shareParticipant(for: LookupInfo(emailAddress: Self.email))

        try await f.ledger.forget(user: "_zelda", in: Self.container, requestedBy: "dsr-7")

        // Answers: the invitation to her email is erased; the other is not; the bound one shows her erased.
        let seen = try f.alice.share(for: share.url)
        let erased = seen.participants.filter { $0.userIdentity.personalDataErased == true }
        #expect(erased.count == 1 && erased.first?.userIdentity.lookupInfo == nil)
        #expect(seen.participants.contains { $0.userIdentity.lookupInfo?.emailAddress == Self.other && $0.userIdentity.personalDataErased == nil })
        let bound = try #require(try f.bob.share(for: bobs.url).participants.first { $0.userIdentity.userRecordID?.recordName == "_zelda" })
        #expect(bound.userIdentity.personalDataErased == true && bound.userIdentity.lookupInfo?.phoneNumber == nil)
        // The rows say so: no box, no hash, when it was forgotten.
        let rows = try Self.rows(f, share) + Self.rows(f, bobs)
        #expect(rows.filter { $0.forgottenAtMicros != 0 }.count == 2)
        #expect(rows.allSatisfy { $0.forgottenAtMicros == 0 || (!$0.hasSealedLookup && $0.address == nil) })
        // Her email matches no invitation any more.
        #expect(
            await errorCode {
                try await f.carol.requestParticipantVerification(for: share.url, lookupInfo: LookupInfo(emailAddress: Self.email))
            } == .unknownItem)
        // History: the sealed events are marked erased.
        let added = try LedgerAudit(f.ledger).history(of: .share(share.url)).filter { $0.name == "ParticipantAdded" }
        #expect(added.map(\.personalDataErased) == [true, false])
        let lookups = try LedgerAudit(f.ledger).history(of: .user("_carol", container: Self.container)).filter { $0.name == "ShareParticipantFetched" }
        #expect(lookups.count == 1 && lookups.allSatisfy(\.personalDataErased))
        // Keys: hers and her addresses' are gone, the other address's is not.
        let models = f.ledger.models
        let vault = try #require(models.vault)
        for subject in ["_zelda", models.addressHash(Self.container, email: Self.email)?.subject, models.addressHash(Self.container, phone: Self.phone)?.subject] {
            #expect(!vault.hasKey(container: Self.container, user: try #require(subject)))
        }
        #expect(vault.hasKey(container: Self.container, user: try #require(models.addressHash(Self.container, email: Self.other)).subject))

        // Audit, verify, a rebuild agree; the rebuild gives the same erased answers.
        #expect(try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch")).ok)
        #expect(try f.ledger.log.verifyChain().isValid)
        _ = try await LedgerAudit(f.ledger).rebuildReadModels()
        #expect(try f.alice.share(for: share.url).participants.filter { $0.userIdentity.personalDataErased == true }.count == 1)
        #expect(try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch2")).ok)

        // Export and every file: no plaintext of her addresses.
        try exportToFile(f.ledger, f.dir.child("export.ndjson"))
        #expect(Self.scan(f.dir.path).isEmpty, "\(Self.scan(f.dir.path))")

        // Imported with the key store into a new ledger: still erased, the other still readable.
        let imported = try await importWithKeys(f.dir.child("export.ndjson"), keysFrom: f.dir.child("ledger"), into: f.dir.child("imported"))
        let there = try imported.container(Self.container, userRecordName: "_alice").share(for: share.url)
        #expect(there.participants.filter { $0.userIdentity.personalDataErased == true }.count == 1)
        #expect(there.participants.contains { $0.userIdentity.lookupInfo?.emailAddress == Self.other })
        #expect(try LedgerAudit(imported).audit(scratchPath: f.dir.child("scratch3")).ok)
        await imported.close()
        #expect(Self.scan(f.dir.path).isEmpty)
        await f.ledger.close()
    }

    @Test("an address nobody registered is forgotten on its own: its invitations and lookups are erased, forgetting again appends nothing, a crash before the key's destruction is finished at the next open, and a later invitation to it is readable again")
    func forgetUnregisteredAddress() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: LookupInfo(phoneNumber: Self.phone), permission: .readOnly)
        _ = try await f.bob.shareParticipant(for: LookupInfo(phoneNumber: Self.phone))
        // Refused: a registered user's address (forget the user), a lookup by account.
        #expect(await errorCode { try await f.ledger.forget(address: LookupInfo(emailAddress: "BOB@example.com"), in: Self.container) } == .invalidArguments)
        #expect(
            await errorCode {
                try await f.ledger.forget(address: LookupInfo(userRecordID: RecordID(userRecordName: "_bob")), in: Self.container)
            } == .invalidArguments)
        let keyFile = f.dir.child("ledger") + "/" + PersonalDataVault.fileName
        let before = try #require(FileManager.default.contents(atPath: keyFile))

        #expect(try await f.ledger.forget(address: LookupInfo(phoneNumber: "+442079460123"), in: Self.container, requestedBy: "dsr-8"))
        let subject = try #require(f.ledger.models.addressHash(Self.container, phone: Self.phone)).subject
        #expect(f.ledger.models.vault?.hasKey(container: Self.container, user: subject) == false)
        let seen = try f.alice.share(for: share.url)
        #expect(seen.participants.contains { $0.userIdentity.personalDataErased == true && $0.userIdentity.lookupInfo == nil })
        #expect(try LedgerAudit(f.ledger).history(of: .user("_bob", container: Self.container)).filter { $0.name == "ShareParticipantFetched" }
            .allSatisfy(\.personalDataErased))
        let forgotten = try #require(try LedgerAudit(f.ledger).history(of: .container(Self.container)).last)
        #expect(forgotten.name == "PersonalDataForgotten" && forgotten.envelope.actor == "dsr-8")
        #expect(forgotten.envelope.stream == "address/" + subject)
        #expect(
            await errorCode {
                try await f.carol.requestParticipantVerification(for: share.url, lookupInfo: LookupInfo(phoneNumber: Self.phone))
            } == .unknownItem)
        // Idempotent: nothing appended.
        let head = try f.ledger.statistics().events
        #expect(try await f.ledger.forget(address: LookupInfo(phoneNumber: Self.phone), in: Self.container) == false)
        #expect(try f.ledger.statistics().events == head)
        #expect(try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch")).ok)
        #expect(Self.scan(f.dir.child("ledger")).isEmpty)

        // A crash between the commit and the key's destruction: the next open destroys the key.
        await f.ledger.close()
        try before.write(to: URL(fileURLWithPath: keyFile))
        var configuration = ShareLedger.Configuration(path: f.dir.child("ledger"), durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        configuration.randomSource = SeededRandom(seed: 3)
        let reopened = try ShareLedger.open(configuration)
        #expect(reopened.models.vault?.hasKey(container: Self.container, user: subject) == false)
        // Invited again after the erasure: readable, and it stays so across an open.
        let alice = reopened.container(Self.container, userRecordName: "_alice")
        _ = try await alice.addParticipant(LookupInfo(phoneNumber: Self.phone), permission: .readWrite, to: share.url)
        #expect(try alice.share(for: share.url).participants.contains { $0.userIdentity.lookupInfo?.phoneNumber == Self.phone })
        await reopened.close()
        let again = try ShareLedger.open(configuration)
        let aliceAgain = again.container(Self.container, userRecordName: "_alice")
        #expect(try aliceAgain.share(for: share.url).participants.contains { $0.userIdentity.lookupInfo?.phoneNumber == Self.phone })
        #expect(try LedgerAudit(again).audit(scratchPath: f.dir.child("scratch2")).ok)
        await again.close()
    }

    @Test("a presented invitation is kept while its row and the keys are unchanged, and shows erased once the address's key is destroyed, the row untouched")
    func keptInvitationsGoWithTheKey() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: LookupInfo(phoneNumber: Self.phone), permission: .readOnly)
        #expect(try f.alice.share(for: share.url).participants.contains { $0.userIdentity.lookupInfo?.phoneNumber == Self.phone })
        #expect(f.ledger.store.participantRows.count > 0, "the answer above kept its participant rows")
        #expect(try f.alice.share(for: share.url).participants.contains { $0.userIdentity.lookupInfo?.phoneNumber == Self.phone })
        // The key goes without any commit touching the invitation's row (as a key store another process cut).
        let subject = try #require(f.ledger.models.addressHash(Self.container, phone: Self.phone)).subject
        #expect(try #require(f.ledger.models.vault).destroy(container: Self.container, user: subject))
        let seen = try f.alice.share(for: share.url)
        #expect(!seen.participants.contains { $0.userIdentity.lookupInfo?.phoneNumber == Self.phone })
        #expect(seen.participants.contains { $0.userIdentity.personalDataErased == true })
        await f.ledger.close()
    }

    @Test("with sealing off (bench --plaintext-personal-data), invitations and lookups are written in plaintext as before, and audit counts them; with sealing on again, a user registered sealed and invited by account is the plaintext invitation to their address")
    func sealingOff() async throws {
        let dir = TemporaryDirectory()
        var configuration = ShareLedger.Configuration(path: dir.child("ledger"), durability: .unsafeNoSync)
        configuration.sealsPersonalData = false
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        try await ledger.registerUser("_alice", in: Self.container)
        let alice = ledger.container(Self.container, userRecordName: "_alice")
        let zone = RecordZoneID(zoneName: "Z")
        _ = try await alice.save(RecordZone(zoneID: zone))
        _ = try await alice.save(Record(recordType: "Item", recordID: RecordID(recordName: "r", zoneID: zone)))
        let share = try await alice.share(rootRecord: RecordID(recordName: "r", zoneID: zone))
        _ = try await alice.addParticipant(LookupInfo(emailAddress: Self.email), permission: .readOnly, to: share.url)
        _ = try await alice.shareParticipant(for: LookupInfo(phoneNumber: Self.phone))
        let events = try ledger.log.events(after: .start, limit: .max).compactMap { envelope in
            try DomainEvent.decode(
                type: envelope.eventType, schemaVersion: envelope.schemaVersion, payload: envelope.payload,
                position: envelope.position.rawValue)
        }
        let added = try #require(events.compactMap { if case .participantAdded(let e) = $0 { e } else { nil } }.first)
        #expect(added.lookupInfo.emailAddress == Self.email && !added.hasSealedLookup)
        let fetched = try #require(events.compactMap { if case .shareParticipantFetched(let e) = $0 { e } else { nil } }.first)
        #expect(fetched.lookupInfo.phoneNumber == Self.phone && !fetched.hasSealedLookup)
        let (rowID, row) = try #require(try ledger.read("test") { txn in
            try ledger.models.participants(txn, share.token.text).first { $0.state.role != .owner }
        })
        #expect(row.compactBytes().first == 0xC1 && row.lookupInfo.emailAddress == Self.email)
        let report = try LedgerAudit(ledger).audit(scratchPath: dir.child("scratch"))
        #expect(report.ok && report.eventsWithPlaintextPersonalData == 2)
        await ledger.close()

        // Sealing on again: a user registered now (a sealed row with keyed hashes) and invited by
        // account is the plaintext invitation to their address (the row's box opened to match it).
        configuration.sealsPersonalData = true
        let reopened = try ShareLedger.open(configuration)
        try await reopened.registerUser("_zelda", in: Self.container, emailAddress: Self.email)
        let bound = try await reopened.container(Self.container, userRecordName: "_alice").addParticipant(
            LookupInfo(userRecordID: RecordID(userRecordName: "_zelda")), permission: .readWrite, to: share.url)
        #expect(bound.participants.count == 2)
        #expect(bound.participants.contains { $0.participantID == rowID && $0.userIdentity.userRecordID?.recordName == "_zelda" })
        await reopened.close()
    }

    @Test("the address index folds from its journal: forgetting an address finds its invitations folded and journaled (a removed participant's too), those of a deleted share drop out, and the rebuild agrees")
    func addressJournalFolds() async throws {
        let f = try await SharingFixture()
        _ = try await f.alice.save(RecordZone(zoneID: SharingFixture.zone))
        var shares: [Share] = []
        for index in 0..<12 {
            _ = try await f.alice.save(Record(recordType: "List", recordID: SharingFixture.recordID("l\(index)")))
            shares.append(try await f.alice.share(rootRecord: SharingFixture.recordID("l\(index)")))
        }
        // The address to forget: invitations early (folded later; one of them removed, whose row keeps
        // the sealed address) and late (journaled; one of them in a share deleted afterwards).
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: Self.email), permission: .readOnly, to: shares[0].url)
        let removed = try await f.alice.addParticipant(LookupInfo(emailAddress: Self.email), permission: .readOnly, to: shares[1].url)
        for (index, share) in shares.enumerated() {
            for n in 0..<95 {
                _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "p\(index)_\(n)@example.org"), permission: .readOnly, to: share.url)
            }
        }
        let removedID = try #require(removed.participants.first { $0.userIdentity.lookupInfo?.emailAddress == Self.email }?.participantID)
        _ = try await f.alice.removeParticipant(removedID, from: shares[1].url)
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: Self.email), permission: .readOnly, to: shares[11].url)
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: Self.email), permission: .readOnly, to: shares[10].url)
        try await f.alice.deleteShare(shares[10].url)
        let models = f.ledger.models
        let (journaled, folded) = try f.ledger.read("test") { txn in
            (try txn.entryCount(models.addressJournal), try txn.entryCount(models.addresses))
        }
        // 1,140 other invitations: one fold happened (the deleted share took its folded entries with it).
        #expect(journaled > 0 && journaled < ReadModels.addressFoldThreshold && folded > ReadModels.addressFoldThreshold / 2)
        let address = try #require(models.addressHash(Self.container, email: Self.email))
        let found = try f.ledger.read("test") { txn in try models.invitations(txn, Self.container, to: address) }
        #expect(Set(found.map(\.token)) == [shares[0].token.text, shares[1].token.text, shares[11].token.text], "\(found)")

        #expect(try await f.ledger.forget(address: LookupInfo(emailAddress: Self.email), in: Self.container))
        for share in [shares[0], shares[1], shares[11]] {
            let erased = try Self.rows(f, share).filter { $0.forgottenAtMicros != 0 }
            #expect(erased.count == 1 && erased[0].address == nil)
        }
        #expect(Self.scan(f.dir.child("ledger")).isEmpty)
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok, "\(report.problems) \(report.projectionDifferences)")
        await f.ledger.close()
    }

}
