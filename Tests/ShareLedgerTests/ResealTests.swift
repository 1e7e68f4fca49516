import EventLog
import Foundation
@testable import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// Re-encrypting an old ledger into a new one (`LedgerAudit(ShareLedger).importResealingPersonalData(from:)`,
/// `share-ledger import --reseal-personal-data --from OLD`; docs/operations.md, "Personal data written
/// before crypto-shredding").
@Suite("Re-encrypting a ledger with plaintext personal data into a new one")
struct ResealTests {
    static let container = SharingFixture.container
    static let users = ["_alice", "_bob", "_carol"]
    static let emails = ["alice@example.com", "bob@example.com", "carol@example.com", "zelda.marchbanks@example.net"]
    /// Everything personal the old ledger holds in plaintext.
    static let secrets = emails + ["+1 555 0100", "+44 20 7946 0123", "Liddell", "Groceries", "Carol's secret list"]
    /// What of carol's the old ledger keeps in plaintext after she is forgotten there.
    static let carols = ["carol@example.com", "Carol's secret list"]

    /// A ledger written with sealing off, as releases before crypto-shredding wrote every personal
    /// field: registrations with a name, titled shares, invitations and lookups by email and phone,
    /// an accepted participant.
    static func plaintextLedger(_ path: String) async throws -> ShareLedger {
        var configuration = ShareLedger.Configuration(path: path, durability: .unsafeNoSync, clock: SteppingClock())
        configuration.sealsPersonalData = false
        configuration.residualTaskWorker = nil
        configuration.randomSource = SeededRandom(seed: 11)
        let ledger = try ShareLedger.open(configuration)
        var names = PersonNameComponents()
        names.givenName = "Alice"
        names.familyName = "Liddell"
        try await ledger.registerUser("_alice", in: container, emailAddress: emails[0], nameComponents: names)
        try await ledger.registerUser("_bob", in: container, emailAddress: emails[1], phoneNumber: "+1 555 0100")
        try await ledger.registerUser("_carol", in: container, emailAddress: emails[2])
        for (user, title) in [("_alice", "Groceries"), ("_carol", "Carol's secret list")] {
            let owner = ledger.container(container, userRecordName: user)
            let zone = RecordZoneID(zoneName: "Lists")
            _ = try await owner.save(RecordZone(zoneID: zone))
            _ = try await owner.save(Record(recordType: "List", recordID: RecordID(recordName: "list", zoneID: zone)))
            _ = try await owner.share(rootRecord: RecordID(recordName: "list", zoneID: zone), title: title)
        }
        let alice = ledger.container(container, userRecordName: "_alice")
        let url = try #require(try alice.ownedShares().first?.url)
        _ = try await alice.addParticipant(LookupInfo(phoneNumber: "+1 (555) 0100"), permission: .readWrite, to: url)
        _ = try await alice.addParticipant(LookupInfo(emailAddress: emails[3]), permission: .readOnly, to: url)
        _ = try await alice.addParticipant(LookupInfo(emailAddress: emails[2]), permission: .readOnly, to: url)
        _ = try await alice.shareParticipant(for: LookupInfo(phoneNumber: "+44 20 7946 0123"))
        let bob = ledger.container(container, userRecordName: "_bob")
        _ = try await bob.accept(try await bob.shareMetadata(for: url))
        let carol = ledger.container(container, userRecordName: "_carol")
        let carols = try #require(try carol.ownedShares().first?.url)
        _ = try await carol.addParticipant(LookupInfo(emailAddress: emails[0]), permission: .readOnly, to: carols)
        return ledger
    }

    /// A new, empty ledger to re-encrypt into.
    static func newLedger(_ path: String, seed: UInt64) throws -> ShareLedger {
        var configuration = ShareLedger.Configuration(path: path, durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        configuration.randomSource = SeededRandom(seed: seed)
        return try ShareLedger.open(configuration)
    }

    /// What `ledger` answers about every user and share, as each user sees them.
    static func answers(_ ledger: ShareLedger) throws -> [String] {
        var out: [String] = []
        for user in users {
            let container = ledger.container(Self.container, userRecordName: user)
            out.append("\(user): \(try ledger.read("test") { txn in try ledger.presenter.identity(txn, Self.container, user: user) })")
            for share in try container.ownedShares() + container.participatingShares() {
                out.append("\(user) sees \(try container.share(for: share.url))")
            }
            for email in emails { out.append("\(email): \(String(describing: try container.userIdentity(forEmailAddress: email)))") }
        }
        return out
    }

    /// Every event of `ledger`, with its personal fields opened with its key store.
    static func openedEvents(_ ledger: ShareLedger) throws -> [String] {
        var opener = Resealing(source: ledger, target: ledger)
        return try ledger.log.events(after: .start, limit: .max).map { envelope in
            let opened = try opener.open(envelope)
            var event = opened.event
            // A user's erasure names their addresses by keyed hash when sealed: not an opened value.
            if case .personalDataForgotten(var e) = event, !e.userRecordName.isEmpty {
                (e.emailHash, e.phoneHash) = (Data(), Data())
                event = .personalDataForgotten(e)
            }
            return "\(envelope.position) \(envelope.recordedAtMicros) \(envelope.container) \(envelope.actor) \(envelope.commandID) "
                + "\(envelope.stream) \(envelope.streamVersion) \(envelope.eventType) \(event.map { "\($0)" } ?? "\(envelope.payload)")"
        }
    }

    @Test("a plaintext ledger re-encrypted into a new one: no event and no byte holds plaintext, the same answers and opened events at the same positions, a new chain; audit, verify and rebuild clean; a non-empty target is refused")
    func resealPlaintextLedger() async throws {
        let dir = TemporaryDirectory()
        let old = try await Self.plaintextLedger(dir.child("old"))
        let before = try LedgerAudit(old).audit(scratchPath: dir.child("audit-old"))
        #expect(before.ok && before.eventsWithPlaintextPersonalData >= 10)
        #expect(!CryptoShreddingTests.plaintextFound(under: dir.child("old"), needles: CryptoShreddingTests.needles(for: Self.secrets)).isEmpty)

        let new = try Self.newLedger(dir.child("new"), seed: 12)
        let summary = try await LedgerAudit(new).importResealingPersonalData(from: old)
        let oldHead = try old.log.head()
        #expect(summary.events == oldHead.position.rawValue && summary.headPosition == oldHead.position.rawValue)
        #expect(summary.plaintextEventsInSource == UInt64(before.eventsWithPlaintextPersonalData))
        #expect(summary.resealedEvents == summary.plaintextEventsInSource && summary.plaintextEventsLeft == 0 && summary.unopenedBoxes == 0)
        #expect(summary.headHash != oldHead.hash.hex)

        // Nothing in plaintext, in the events or anywhere in the directory.
        let after = try LedgerAudit(new).audit(scratchPath: dir.child("audit-new"))
        #expect(after.ok && after.eventsWithPlaintextPersonalData == 0, "\(after.problems) \(after.projectionDifferences)")
        #expect(try new.log.verifyChain().isValid)
        let found = CryptoShreddingTests.plaintextFound(under: dir.child("new"), needles: CryptoShreddingTests.needles(for: Self.secrets))
        #expect(found.isEmpty, "\(found)")
        // The same answers (opened), the same events once opened, at the same positions.
        #expect(try Self.answers(new) == Self.answers(old))
        #expect(try Self.openedEvents(new) == Self.openedEvents(old))
        // Matching an invitation by email works on the new ledger: zelda registers and is bound.
        try await new.registerUser("_zelda", in: Self.container, emailAddress: "Zelda.Marchbanks@example.net")
        let alice = new.container(Self.container, userRecordName: "_alice")
        let url = try #require(try alice.ownedShares().first?.url)
        let bound = try await alice.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_zelda")), permission: .readOnly, to: url)
        #expect(bound.participants.count == 4 && bound.participants.contains { $0.userIdentity.userRecordID?.recordName == "_zelda" })
        _ = try await LedgerAudit(new).rebuildReadModels()
        #expect(try LedgerAudit(new).audit(scratchPath: dir.child("audit-rebuilt")).ok)

        // A target that is not empty is refused, and left as it was.
        let head = try new.log.head()
        let again = await errorCode { try await LedgerAudit(new).importResealingPersonalData(from: old) }
        #expect(again == .invalidArguments)
        #expect(try new.log.head() == head)
        await new.close()
        await old.close()
    }

    @Test("a user forgotten in the old ledger, whose plaintext it could not erase, is unreadable in the re-encrypted one: registration, title, invitations; the others are not")
    func forgottenStayForgotten() async throws {
        let dir = TemporaryDirectory()
        let old = try await Self.plaintextLedger(dir.child("old"))
        try await old.forget(user: "_carol", in: Self.container, requestedBy: "dsr-1")
        // The old log still holds her plaintext (and its answers her plaintext title and invitation).
        let carols = CryptoShreddingTests.needles(for: Self.carols)
        #expect(!CryptoShreddingTests.plaintextFound(under: dir.child("old"), needles: carols).isEmpty)
        let new = try Self.newLedger(dir.child("new"), seed: 13)
        let summary = try await LedgerAudit(new).importResealingPersonalData(from: old)
        #expect(summary.plaintextEventsLeft == 0)
        #expect(CryptoShreddingTests.plaintextFound(under: dir.child("new"), needles: carols).isEmpty)
        let models = new.models
        let vault = try #require(models.vault)
        #expect(!vault.hasKey(container: Self.container, user: "_carol"))
        #expect(!vault.hasKey(container: Self.container, user: try #require(models.addressHash(Self.container, email: Self.emails[2])).subject))
        #expect(vault.hasKey(container: Self.container, user: "_alice"))
        let carol = new.container(Self.container, userRecordName: "_carol")
        #expect(try carol.ownedShares().first?.title == nil)
        let alice = new.container(Self.container, userRecordName: "_alice")
        let share = try #require(try alice.ownedShares().first)
        #expect(share.title == "Groceries")
        #expect(share.participants.filter { $0.userIdentity.personalDataErased == true }.count == 1)
        #expect(share.participants.contains { $0.userIdentity.lookupInfo?.emailAddress == Self.emails[3] })
        let history = try LedgerAudit(new).history(of: .user("_carol", container: Self.container))
        #expect(history.first { $0.name == "UserRegistered" }?.personalDataErased == true)
        #expect(try LedgerAudit(new).audit(scratchPath: dir.child("audit")).ok)
        // Reopening leaves them so.
        await new.close()
        let reopened = try Self.newLedger(dir.child("new"), seed: 14)
        #expect(reopened.models.vault?.hasKey(container: Self.container, user: "_carol") == false)
        await reopened.close()
        await old.close()
    }

    @Test("share-ledger import --reseal-personal-data --from OLD: the release fixture's plaintext re-encrypted, audit reports no plaintext, verify and scripts/verify_chain.py --events hold; a non-empty target exits 1; forget --email")
    func resealCommand() async throws {
        let dir = TemporaryDirectory()
        let old = try ReleaseFixtureTests.copy(dir)
        let new = dir.child("new")
        #expect(try await runCLI(["import", "--reseal-personal-data", "--path", new]).exited(64) == true, "--from is required")
        let run = try await runCLI(["import", "--reseal-personal-data", "--from", old, "--path", new, "--json"])
        #expect(run.exited(0), "\(run.summary)")
        let summary = try #require(jsonObject(run.stdout))
        #expect((summary["plaintextEventsInSource"] as? Int ?? 0) > 0 && summary["plaintextEventsLeft"] as? Int == 0)
        let audit = try await runCLI(["audit", "--path", new])
        #expect(audit.exited(0) && !audit.stdout.contains("plaintext"), "\(audit.summary)")
        let oldAudit = try await runCLI(["audit", "--path", old])
        #expect(oldAudit.exited(0) && oldAudit.stdout.contains("plaintext"), "\(oldAudit.summary)")
        #expect(try await runCLI(["verify", "--path", new]).exited(0))
        let refused = try await runCLI(["import", "--reseal-personal-data", "--from", old, "--path", new])
        #expect(refused.exited(1) && refused.stderr.contains("not empty"), "\(refused.summary)")
        if let python = await pythonWithLMDB() {
            let script = packageRoot.appendingPathComponent("scripts/verify_chain.py").path
            let checked = try await runProcess(URL(fileURLWithPath: "/usr/bin/env"), [python, script, new, "--events"])
            #expect(checked.status == 0 && checked.stdout.contains(" 0 events in plaintext"), "\(checked.stdout) \(checked.stderr)")
            let before = try await runProcess(URL(fileURLWithPath: "/usr/bin/env"), [python, script, old, "--events"])
            #expect(before.status == 0 && !before.stdout.contains(" 0 events in plaintext"), "\(before.stdout) \(before.stderr)")
        }
        // Forgetting an address nobody registered, from the command line: exit 0 (twice), never printed.
        for _ in 0..<2 {
            let forget = try await runCLI([
                "forget", "--email", "nobody.ever@example.org", "--container", "iCloud.com.example.sim.notes", "--path", new,
            ])
            #expect(forget.exited(0) && !(forget.stdout + forget.stderr).contains("nobody.ever"), "\(forget.summary)")
        }
        #expect(try await runCLI(["forget", "--email", "a@b.c", "--user", "_x", "--container", "c", "--path", new]).exited(64))
    }
}
