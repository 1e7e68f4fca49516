import Foundation
@testable import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// Events the sharing rules could not have produced, with the hash chain intact: import refuses them,
/// audit reports them.
@Suite("Events the rules could not have produced")
struct EventValidatorTests {
    typealias Forge = HostileStoredDataTests

    /// A forged event and what makes it inadmissible.
    struct Case: Sendable, CustomStringConvertible {
        var name: String
        var actor: String
        var event: @Sendable (_ token: String, _ bobID: String) -> DomainEvent
        var type: String
        var reason: String
        var description: String { name }
    }

    /// A ShareAccepted of participant `id` naming `user`.
    static func accepted(_ token: String, _ id: String, user: String) -> DomainEvent {
        var e = Shareledger_Events_V1_ShareAccepted()
        (e.token, e.participantID, e.userRecordName) = (token, id, user)
        return .shareAccepted(e)
    }

    static let cases: [Case] = [
        Case(
            name: "an uninvited user's ShareAccepted (of another's invitation)", actor: "_carol",
            event: { token, bobID in accepted(token, bobID, user: "_carol") },
            type: "ShareAccepted", reason: "user _carol is not a pending participant"),
        // The user named in ShareAccepted, VerificationRequested and ParticipantVerified is the envelope's actor.
        Case(
            name: "a ShareAccepted naming another user than its actor", actor: "_bob",
            event: { token, bobID in accepted(token, bobID, user: "_carol") },
            type: "ShareAccepted", reason: "a user accepts a share only as themselves"),
        Case(
            name: "a VerificationRequested naming another user than its actor", actor: "_carol",
            event: { token, bobID in
                var e = Shareledger_Events_V1_VerificationRequested()
                (e.token, e.participantID, e.userRecordName) = (token, bobID, "_bob")
                e.codeSha256 = Data(repeating: 7, count: 32)
                e.expiresAtMicros = 1
                return .verificationRequested(e)
            }, type: "VerificationRequested", reason: "a user verifies only for themselves"),
        Case(
            name: "a ParticipantVerified naming another user than its actor", actor: "_carol",
            event: { token, bobID in
                var e = Shareledger_Events_V1_ParticipantVerified()
                (e.token, e.participantID, e.userRecordName) = (token, bobID, "_bob")
                return .participantVerified(e)
            }, type: "ParticipantVerified", reason: "a user verifies only for themselves"),
        Case(
            name: "a ParticipantAdded by a participant who does not manage the share", actor: "_bob",
            event: { token, _ in
                var e = Shareledger_Events_V1_ParticipantAdded()
                e.token = token
                e.participantID = "forged"
                e.userRecordName = "_carol"
                e.lookupInfo.userRecordName = "_carol"
                e.role = .administrator
                e.permission = .readWrite
                return .participantAdded(e)
            }, type: "ParticipantAdded", reason: "only the share's owner or an administrator may change its participants"),
        Case(
            name: "a RecordSaved by a read-only participant", actor: "_bob",
            event: { _, _ in
                var e = Shareledger_Events_V1_RecordSaved()
                e.ownerName = "_alice"
                e.zoneName = "Notes"
                e.recordName = "item"
                e.recordType = "Item"
                e.parentRecordName = "list"
                e.changeTag = 2
                return .recordSaved(e)
            }, type: "RecordSaved", reason: "changing shared records needs readWrite"),
        Case(
            name: "a ParticipantZoneCreated without a task", actor: "_bob",
            event: { _, _ in
                var e = Shareledger_Events_V1_ParticipantZoneCreated()
                e.userRecordName = "_bob"
                e.ownerName = "_alice"
                e.zoneName = "Notes"
                e.taskID = 123_456_789
                return .participantZoneCreated(e)
            }, type: "ParticipantZoneCreated", reason: "there is no residual task 123456789 in the outbox"),
    ]

    /// Alice's share with Bob invited read-only: accepted (and his zone task done), or still pending.
    private func ledger(_ label: String, bobAccepts: Bool) async throws -> (SharingFixture, Share, bobID: String) {
        let f = try await SharingFixture(label)
        var share = try await f.makeHierarchy()
        share = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly, to: share.url)
        if bobAccepts {
            _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
            try await f.ledger.completeResidualTasks()
        }
        let bob = try #require(share.participants.first { $0.userIdentity.userRecordID?.recordName == "_bob" })
        return (f, share, bob.participantID)
    }

    @Test("an import holding one is refused at its line, with its position, type and why; nothing is written", arguments: cases)
    func importRefuses(_ forged: Case) async throws {
        let (f, share, bobID) = try await ledger("import-\(forged.type)", bobAccepts: forged.type != "ShareAccepted")
        let head = try f.ledger.log.head().position.rawValue
        let file = try Forge.export(f)
            + (try Forge.forgedLines(f.ledger, token: share.token.text, actor: forged.actor, [forged.event(share.token.text, bobID)]))
        let dir = TemporaryDirectory("import-target-\(forged.type)")
        let target = try HostileStoredDataTests.emptyLedger(dir)
        do {
            _ = try await Forge.importing(file, into: target, dir, "file.ndjson")
            Issue.record("the forged import was accepted")
        } catch {
            #expect(error.code == .invalidArguments)
            #expect(error.message.contains("line \(head + 1) of the import is refused"), "\(error.message)")
            #expect(error.message.contains("event \(head + 1) (shareledger.events.v1.\(forged.type) by \(forged.actor))"), "\(error.message)")
            #expect(error.message.contains(forged.reason), "\(error.message)")
            #expect(error.message.hasSuffix("nothing was imported"), "\(error.message)")
            #expect(!error.message.contains("@"), "no email addresses in messages: \(error.message)")
        }
        #expect(try target.log.head().position == .start)
        #expect(try target.statistics().users == 0)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.child("ledger")).filter { $0.hasPrefix(".import-check-") }
        #expect(leftovers.isEmpty)
        // The same export without the forged line imports, and audits clean.
        let clean = try Forge.export(f)
        let summary = try await Forge.importing(clean, into: target, dir, "clean.ndjson")
        #expect(summary.headPosition == head)
        #expect(try LedgerAudit(target).audit(scratchPath: dir.child("audit")).ok)
        await target.close()
        await f.ledger.close()
    }

    @Test("a continuing import is checked against the live read models")
    func continuingImport() async throws {
        let (f, share, bobID) = try await ledger(#function, bobAccepts: false)
        // The target holds the source's events already; the forged line continues its head.
        let dir = TemporaryDirectory("continuing-target")
        let target = try HostileStoredDataTests.emptyLedger(dir)
        _ = try await Forge.importing(try Forge.export(f), into: target, dir, "base.ndjson")
        let head = try target.log.head()
        // Bob's own acceptance of his invitation is admissible; Carol's is not.
        var accepted = Shareledger_Events_V1_ShareAccepted()
        accepted.token = share.token.text
        accepted.participantID = bobID
        accepted.userRecordName = "_bob"
        let good = try Forge.forgedLines(f.ledger, token: share.token.text, actor: "_bob", [.shareAccepted(accepted)])
        let bad = try Forge.forgedLines(f.ledger, token: share.token.text, actor: "_carol", [Self.cases[0].event(share.token.text, bobID)])
        #expect(await errorCode { try await Forge.importing(bad, into: target, dir, "bad.ndjson") } == .invalidArguments)
        #expect(try target.log.head() == head)
        let summary = try await Forge.importing(good, into: target, dir, "good.ndjson")
        #expect(summary.events == 1)
        #expect(try LedgerAudit(target).audit(scratchPath: dir.child("audit")).ok)
        await target.close()
        await f.ledger.close()
    }

    @Test("audit reports one written behind the ledger's back: its position and why", arguments: cases)
    func auditReports(_ forged: Case) async throws {
        let (f, share, bobID) = try await ledger("audit-\(forged.type)", bobAccepts: forged.type != "ShareAccepted")
        #expect(try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("before")).ok)
        let position = try Forge.forgeBehindTheBack(
            f.ledger, token: share.token.text, actor: forged.actor, [forged.event(share.token.text, bobID)])
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("after"))
        #expect(!report.ok)
        #expect(report.firstBadPosition == position)
        let problem = try #require(report.problems.first { $0.contains("not one the sharing rules could have produced") })
        #expect(problem.contains("event \(position) (shareledger.events.v1.\(forged.type) by \(forged.actor))"), "\(problem)")
        #expect(problem.contains(forged.reason), "\(problem)")
        // A rebuild refuses it too, and leaves the read models as they were.
        let code = await errorCode { try await LedgerAudit(f.ledger).rebuildReadModels() }
        #expect(code == .corruptedData)
        await f.ledger.close()
    }

    @Test("the CLI's audit names it in --json and exits with 1")
    func auditCLI() async throws {
        let (f, share, bobID) = try await ledger(#function, bobAccepts: false)
        let position = try Forge.forgeBehindTheBack(
            f.ledger, token: share.token.text, actor: "_carol", [Self.cases[0].event(share.token.text, bobID)])
        await f.ledger.close()
        let audit = try await runProduct("share-ledger", ["audit", "--path", f.dir.child("ledger"), "--json"])
        #expect(audit.status == 1, "\(audit.stdout) \(audit.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(audit.stdout.utf8)) as? [String: Any])
        #expect(report["ok"] as? Bool == false)
        #expect(report["firstBadPosition"] as? Int == Int(position))
        let problems = try #require(report["problems"] as? [String])
        #expect(problems.contains { $0.contains("event \(position) (shareledger.events.v1.ShareAccepted by _carol)") }, "\(problems)")
    }
    @Test("a ledger the writer produced, with every event type, audits clean and imports")
    func everyEventTypeAdmissible() async throws {
        let f = try await SharingFixture(#function)
        var share = try await f.makeHierarchy()
        // A participant lookup, one that finds an account and one that fails (both are logged).
        _ = try await f.alice.shareParticipants(
            for: [LookupInfo(emailAddress: "bob@example.com"), LookupInfo(userRecordID: RecordID(userRecordName: "_nobody"))])
        // Invitations: by email to Bob (an account), and to an address nobody has yet, which Carol claims.
        share = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readWrite, to: share.url)
        share = try await f.alice.addParticipant(LookupInfo(emailAddress: "carol.other@example.com"), permission: .readOnly, to: share.url)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        let verification = try await f.carol.requestParticipantVerification(
            for: share.url, lookupInfo: LookupInfo(emailAddress: "carol.other@example.com"))
        _ = try await f.carol.verifyParticipant(for: share.url, code: verification.code)
        _ = try await f.carol.accept(try await f.carol.shareMetadata(for: share.url))
        try await f.ledger.completeResidualTasks()
        // A participant writes; roles change; the title changes; a participant leaves.
        var item = try f.bob.record(for: RecordID(recordName: "item", zoneID: RecordZoneID(zoneName: "Notes", ownerName: "_alice")))
        item["name"] = .string("bread")
        _ = try await f.bob.save(item)
        let bobID = try #require(share.participants.first { $0.userIdentity.userRecordID?.recordName == "_bob" }).participantID
        _ = try await f.alice.setPermission(.readWrite, role: .administrator, forParticipant: bobID, in: share.url)
        _ = try await f.bob.setTitle("Weekly", for: share.url)
        try await f.carol.leaveShare(share.url)
        // Public: Carol joins by URL; the permission changes and she follows; back to private drops her.
        _ = try await f.alice.setPublicPermission(.readOnly, for: share.url)
        _ = try await f.carol.accept(try await f.carol.shareMetadata(for: share.url))
        _ = try await f.alice.setPublicPermission(.readWrite, for: share.url)
        _ = try await f.alice.setPublicPermission(.none, for: share.url)
        _ = try await f.alice.removeParticipant(bobID, from: share.url)
        try await f.ledger.completeResidualTasks()
        // Access requests: allowed; Bob asks and is denied, asks again and is approved (then
        // accepts); Carol asks and is blocked with Bob (a participant, removed by the block); Carol is
        // unblocked.
        _ = try await f.alice.setAllowsAccessRequests(true, for: share.url)
        _ = try await f.bob.requestShareAccess(for: [share.url])
        _ = try await f.alice.denyRequesters([requesterValue("_bob")], for: share.url)
        _ = try await f.bob.requestShareAccess(for: [share.url])
        _ = try await f.alice.approveRequesters([requesterValue("_bob")], for: share.url)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        _ = try await f.carol.requestShareAccess(for: [share.url])
        _ = try await f.alice.blockIdentities([identityValue("_bob"), identityValue("_carol")], for: share.url)
        _ = try await f.alice.unblockIdentities([Share.BlockedIdentity(userIdentity: identityValue("_carol"))], for: share.url)
        try await f.ledger.completeResidualTasks()
        // A zone-wide share, then the zone deleted with it; the hierarchy's share deleted by its root.
        let wide = RecordZoneID(zoneName: "Wide")
        _ = try await f.alice.save(RecordZone(zoneID: wide))
        _ = try await f.alice.share(recordZoneID: wide, title: "All")
        try await f.alice.deleteRecordZone(withID: wide)
        try await f.alice.deleteRecord(withID: SharingFixture.recordID("list"))
        try await f.ledger.completeResidualTasks()
        try await f.ledger.forget(user: "_carol", in: SharingFixture.container)

        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("audit"))
        #expect(report.ok, "\(report.problems)")
        let types = Set(try f.ledger.log.events(after: .start, limit: .max).map(\.eventType))
        for type in DomainEvent.typeNames where type != "shareledger.events.v1.ShareMetadataFetched" {
            #expect(types.contains(type), "the scenario never produced \(type)")
        }
        let dir = TemporaryDirectory("every-type-target")
        let target = try HostileStoredDataTests.emptyLedger(dir)
        let summary = try await Forge.importing(try Forge.export(f), into: target, dir, "all.ndjson")
        #expect(summary.headPosition == report.headPosition)
        await target.close()
        await f.ledger.close()
    }
}
