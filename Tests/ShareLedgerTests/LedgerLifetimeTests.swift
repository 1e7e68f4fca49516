import Foundation
@testable import ShareLedger
import TestSupport
import Testing

/// A closed ledger and its log are freed: a process that opens and closes ledgers (tests, `bench`, a
/// host of many ledgers) does not keep them.
@Suite("Ledger lifetime")
struct LedgerLifetimeTests {
    @Test("a closed ledger and its log are freed once the caller lets go of them")
    func closedLedgerIsFreed() async throws {
        let dir = TemporaryDirectory()
        weak var weakLedger: ShareLedger?
        weak var weakLog: EventLog?
        do {
            var configuration = ShareLedger.Configuration(path: dir.child("l"), durability: .unsafeNoSync)
            configuration.residualTaskWorker = ResidualTaskWorker.Configuration(batchSize: 16)
            let ledger = try ShareLedger.open(configuration)
            try await ledger.registerUser("_a", in: "iCloud.x", emailAddress: "a@example.com")
            try await ledger.registerUser("_b", in: "iCloud.x")
            let a = ledger.container("iCloud.x", userRecordName: "_a")
            let zone = RecordZoneID(zoneName: "Z")
            _ = try await a.save(RecordZone(zoneID: zone))
            _ = try await a.save(Record(recordType: "Doc", recordID: RecordID(recordName: "r", zoneID: zone)))
            let share = try await a.share(rootRecord: RecordID(recordName: "r", zoneID: zone))
            _ = try await a.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_b")), permission: .readOnly, to: share.url)
            let b = ledger.container("iCloud.x", userRecordName: "_b")
            _ = try await b.accept(try await b.shareMetadata(for: share.url))
            try await ledger.completeResidualTasks()
            weakLedger = ledger
            weakLog = ledger.log
            await ledger.close()
        }
        // The writer's thread and the worker's task let go as they finish: wait for that (bounded).
        for _ in 0..<250 where weakLedger != nil || weakLog != nil { try await Task.sleep(for: .milliseconds(20)) }
        #expect(weakLedger == nil, "ledger not freed")
        #expect(weakLog == nil, "log not freed")
    }
}
