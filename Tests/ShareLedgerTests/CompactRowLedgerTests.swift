import Foundation
import LMDB
@testable import ShareLedger
import ShareLedgerAudit
import SwiftProtobuf
import TestSupport
import Testing

/// Compact rows in a ledger (the layouts alone: SharingDomainTests' `CompactRowTests`).
@Suite("Compact read-model rows in a ledger")
struct CompactRowLedgerTests {
    @Test("a ledger whose rows are protobuf (an earlier release) audits clean, and its rows turn compact as they change")
    func oldRowsCompareByContent() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let models = f.ledger.models
        let key = Array(share.token.text.utf8)
        // Write the share's row back as an earlier release would have (protobuf).
        _ = try await f.ledger.maintain { txn in
            let row = try #require(try models.share(txn, share.token.text))
            var options = BinaryEncodingOptions()
            options.useDeterministicOrdering = true
            try txn.put(models.shares, key: key, value: try row.legacy.serializedBytes(options: options) as [UInt8])
            return 1
        }
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok && report.projectionsMatch, "\(report.problems)")
        #expect(try f.alice.shareMetadataWithoutLogging(for: share.url).share.title == "Groceries")
        _ = try await f.alice.setTitle("Shopping", for: share.url)
        let stored = try f.ledger.log.store.environment.read { txn in try txn.get(models.shares, key: key) }
        // Compact again: the second layout, since the new title is sealed (crypto-shredding).
        #expect(stored?.first == 0xC2)
        await f.ledger.close()
    }
}

extension ShareState {
    /// The row as an earlier release stored it (protobuf); SharingDomainTests' `LegacyEncodable` has every row's.
    var legacy: Shareledger_Readmodels_V1_ShareState {
        var m = Shareledger_Readmodels_V1_ShareState()
        (m.container, m.ownerName, m.zoneName, m.zoneID) = (container, ownerName, zoneName, zoneID)
        (m.shareRecordName, m.rootRecordName, m.title) = (shareRecordName, rootRecordName, title)
        (m.publicPermission, m.changeTag, m.createdAtMicros) = (publicPermission, changeTag, createdAtMicros)
        (m.ownerParticipantID, m.activeParticipantCount) = (ownerParticipantID, activeParticipantCount)
        (m.unmatchedPendingCount, m.allowsAccessRequests) = (unmatchedPendingCount, allowsAccessRequests)
        if hasSealedTitle { m.sealedTitle = sealedTitle }
        return m
    }
}
