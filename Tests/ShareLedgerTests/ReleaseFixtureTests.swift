import Foundation
@testable import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// A ledger written by the release before the event log became a module of its own (commit b99e06a,
/// `share-ledger simulate --seed 7 --actions 400 --clients 2 --users 12 --durability unsafeNoSync`),
/// committed as it was: the current code must open it, read it, audit it clean and keep writing it.
/// That release opened every database with the log; this one adds the sharing layer's `worker_state`
/// (the worker's lease) when a ledger is first opened for writing.
@Suite("Ledgers written by the release before the module split")
struct ReleaseFixtureTests {
    static let fixture = packageRoot.appendingPathComponent("Tests/ShareLedgerTests/Fixtures/release-2026-11-22/data.mdb")
    /// What that release's `stats --json` and `audit` said of it.
    static let headHash = "98a9bc08bf6eb3925860336b0183a9fb591df03ca0508b9c25f3a245ae2a3339"

    /// A writable copy of the fixture in a temporary directory.
    static func copy(_ dir: TemporaryDirectory) throws -> String {
        let path = dir.makeChild("ledger")
        try FileManager.default.copyItem(atPath: fixture.path, toPath: path + "/data.mdb")
        return path
    }

    @Test("the library opens it, its counters and head are the ones that release reported, the audit is clean, and it takes new commands")
    func libraryOpensAndWrites() async throws {
        let dir = TemporaryDirectory()
        let path = try Self.copy(dir)
        var configuration = ShareLedger.Configuration(path: path, createIfMissing: false, durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        let stats = try ledger.statistics()
        #expect(stats.events == 416 && stats.headHash == Self.headHash)
        #expect(stats.shares == 12 && stats.participants == 19 && stats.acceptedParticipants == 11)
        #expect(stats.participantZones == 11 && stats.users == 14 && stats.records == 47 && stats.pendingResidualTasks == 0)
        let report = try LedgerAudit(ledger).audit(scratchPath: dir.child("audit"))
        #expect(report.ok, "\(report)")
        // It keeps working: a new user shares a record, another accepts, the worker (with its lease
        // in the new worker_state database) completes the zone creation.
        let container = "iCloud.com.example.sim.notes"
        try await ledger.registerUser("_newcomer", in: container, emailAddress: "newcomer@example.com")
        try await ledger.registerUser("_guest", in: container)
        let newcomer = ledger.container(container, userRecordName: "_newcomer")
        let zone = RecordZoneID(zoneName: "After")
        _ = try await newcomer.save(RecordZone(zoneID: zone))
        let root = RecordID(recordName: "root", zoneID: zone)
        _ = try await newcomer.save(Record(recordType: "Item", recordID: root))
        let share = try await newcomer.share(rootRecord: root, title: "after the upgrade")
        _ = try await newcomer.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_guest")), permission: .readOnly, to: share.url)
        let guest = ledger.container(container, userRecordName: "_guest")
        _ = try await guest.accept(try await guest.shareMetadata(for: share.url))
        #expect(try await ledger.completeResidualTasks() == 1)
        #expect(try guest.sharedDatabaseZones().map(\.zoneName) == ["After"])
        let after = try LedgerAudit(ledger).audit(scratchPath: dir.child("audit2"))
        #expect(after.ok, "\(after)")
        await ledger.close()
    }

    @Test("the reading commands answer from it (opening it for writing once to add worker_state), with that release's figures")
    func readingCommands() async throws {
        let dir = TemporaryDirectory()
        let path = try Self.copy(dir)
        let stats = try await runProduct("share-ledger", ["stats", "--path", path, "--json"], input: Data())
        #expect(stats.status == 0, "\(stats.stderr)")
        #expect(stats.stdout.contains("\"headHash\" : \"\(Self.headHash)\"") && stats.stdout.contains("\"shares\" : 12"), "\(stats.stdout)")
        let audit = try await runProduct("share-ledger", ["audit", "--path", path, "--json"], input: Data())
        #expect(audit.status == 0, "\(audit.stdout) \(audit.stderr)")
        let verify = try await runProduct("share-ledger", ["verify", "--path", path], input: Data())
        #expect(verify.status == 0 && verify.stdout.contains("416 events"), "\(verify.stdout)")
    }
}
