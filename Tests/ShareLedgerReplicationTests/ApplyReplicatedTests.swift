import Foundation
import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// `ShareLedger.applyReplicated`, without NATS: a replica fed the primary's stored events in batches
/// of any size (commands split across batches) ends equal to the primary; altered, missing or
/// foreign events are refused and nothing of their batch is written.
@Suite struct ApplyReplicatedTests {
    func primary(_ directory: TemporaryDirectory) async throws -> ShareLedger {
        let primary = try Ledgers.open(directory.makeChild("primary"))
        try await Ledgers.share(primary, round: 0)
        try await primary.completeResidualTasks(limit: 2)
        // A raw command of three events, so that small batches split it.
        try await primary.log.append(
            (0..<3).map { EventDraft(type: "example.Part", payload: [UInt8($0)]) }, to: "parts",
            metadata: CommandMetadata(container: Ledgers.container, actor: "_p"))
        try await Ledgers.share(primary, round: 1, shares: 1)
        return primary
    }

    @Test(arguments: [1, 7, 10_000])
    func batchesOfAnySizeGiveTheSameLedger(batch: Int) async throws {
        let directory = TemporaryDirectory()
        let primary = try await primary(directory)
        let replica = try Ledgers.open(directory.makeChild("replica"))
        let events = try primary.log.storedEvents(after: .start, limit: 10_000)
        var index = 0
        while index < events.count {
            let head = try await replica.applyReplicated(Array(events[index..<min(index + batch, events.count)]))
            index += batch
            #expect(head == (try replica.log.head()))
        }
        #expect(try replica.log.head() == primary.log.head())
        #expect(try replica.readModelDigest().digest == primary.readModelDigest().digest)
        #expect(try replica.statistics().commands == primary.statistics().commands)
        let audit = try LedgerAudit(replica).audit(scratchPath: directory.child("audit"))
        #expect(audit.ok, "\(audit.problems)")
        await replica.close()
        await primary.close()
    }

    @Test func alteredMissingOrForeignEventsAreRefused() async throws {
        let directory = TemporaryDirectory()
        let primary = try await primary(directory)
        let replica = try Ledgers.open(directory.makeChild("replica"))
        let events = try primary.log.storedEvents(after: .start, limit: 10_000)
        try await replica.applyReplicated(Array(events[0..<5]))

        // One payload byte changed (hash field left as it was): refused, nothing of the batch written.
        var altered = Array(events[5..<9])
        var bytes = altered[2].bytes
        bytes[bytes.count / 2] ^= 0x01
        altered[2] = try #require(StoredEvent(position: altered[2].position, bytes: bytes))
        await expectRefused(.corruptedData) { () async throws(LedgerError) in try await replica.applyReplicated(altered) }
        #expect(try replica.log.head().position == 5)

        // A gap: the batch does not continue the head.
        await expectRefused(.serverRecordChanged) { () async throws(LedgerError) in try await replica.applyReplicated(Array(events[6..<8])) }
        // Out of order inside a batch.
        await expectRefused(.corruptedData) { () async throws(LedgerError) in try await replica.applyReplicated([events[5], events[7]]) }

        // Another ledger's event at the next position: its previous hash is not this head's.
        let other = try Ledgers.open(directory.makeChild("other"))
        try await Ledgers.append(other.log, count: 6, stream: "elsewhere")
        let foreign = try #require(try other.log.storedEvent(at: 6))
        await expectRefused(.corruptedData) { () async throws(LedgerError) in try await replica.applyReplicated([foreign]) }
        #expect(try replica.log.head().position == 5)

        // The genuine rest still applies.
        try await replica.applyReplicated(Array(events[5...]))
        #expect(try replica.readModelDigest().digest == primary.readModelDigest().digest)
        await other.close()
        await replica.close()
        await primary.close()
    }

    func expectRefused(_ code: LedgerError.Code, _ body: () async throws(LedgerError) -> LogHead) async {
        do {
            _ = try await body()
            Issue.record("accepted, expected \(code)")
        } catch {
            #expect(error.code == code, "\(error.message)")
        }
    }
}
