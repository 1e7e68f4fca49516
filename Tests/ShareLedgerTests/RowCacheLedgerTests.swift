import Foundation
@testable import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// The row cache in the writer of a ledger (its rules alone: SharingDomainTests' `RowCacheTests`).
@Suite("The writer's row cache on a ledger")
struct RowCacheLedgerTests {
    @Test("the writer decodes a hot share once, and its answers equal an uncached ledger's")
    func writerUsesIt() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let before = f.ledger.store.writerModels.rowCache?.hits ?? 0
        for user in ["bob", "carol"] {
            _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "\(user)@example.com"), permission: .readOnly, to: share.url)
        }
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        #expect((f.ledger.store.writerModels.rowCache?.hits ?? 0) > before)
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok, "\(report.problems)")
        await f.ledger.close()
    }
}

extension RowCacheLedgerTests {
    @Test("an atomic batch that fails rolls its rows back in the cache too: the share it deleted is still there")
    func failedAtomicBatch() async throws {
        let (f, share) = try await SharingFixture.withShare()
        // Deleting the root deletes its share; the missing record fails the batch, so neither happens.
        let results = try await f.alice.modifyRecords(
            [.delete(SharingFixture.recordID("list")), .delete(SharingFixture.recordID("missing"))], atomically: true)
        #expect(results.allSatisfy { (try? $0.get()) == nil })
        // The writer must not answer from a row the rolled-back transaction wrote.
        _ = try await f.alice.setTitle("Still here", for: share.url)
        #expect(try f.alice.shareMetadataWithoutLogging(for: share.url).share.title == "Still here")
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok, "\(report.problems)")
        await f.ledger.close()
    }
}
