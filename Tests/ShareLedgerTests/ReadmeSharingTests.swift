import Foundation
import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// The sharing tour of README.md, as written there (only the paths differ), with its printed
/// values checked.
@Suite("README sharing tour")
struct ReadmeSharingTests {
    @Test("the sharing tour runs and prints what the README says", .timeLimit(.minutes(5)))
    func sharingTour() async throws {
        let dir = TemporaryDirectory()
        // Open (or create) a ledger. A background worker for the residual tasks starts with it.
        let ledger = try ShareLedger.open(.init(path: dir.child("share-ledger")))
        let notes = "iCloud.com.example.notes"

        try await ledger.registerUser("_alice", in: notes, emailAddress: "alice@example.com")
        try await ledger.registerUser("_bob", in: notes, emailAddress: "bob@example.com")
        let alice = ledger.container(notes, userRecordName: "_alice")
        let bob = ledger.container(notes, userRecordName: "_bob")

        let zone = RecordZoneID(zoneName: "Lists")
        _ = try await alice.save(RecordZone(zoneID: zone))
        let listID = RecordID(recordName: "groceries", zoneID: zone)
        _ = try await alice.save(Record(recordType: "List", recordID: listID, fields: ["title": .string("Groceries")]))
        let share = try await alice.share(rootRecord: listID, title: "Groceries")
        _ = try await alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readWrite, to: share.url)

        let metadata = try await bob.shareMetadata(for: share.url)
        #expect("\(metadata.participantRole) \(metadata.participantStatus)" == "privateUser pending")
        _ = try await bob.accept(metadata)

        try await ledger.waitForResidualTasks()
        #expect("\(try bob.sharedDatabaseZones())" == "[Lists (owner _alice)]")

        let report = try LedgerAudit(ledger).audit(scratchPath: dir.child("share-ledger-audit"))
        #expect("\(report.ok) \(report.events)" == "true 9")
        await ledger.close()
    }
}
