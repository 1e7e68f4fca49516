import Foundation
import LMDB
@testable import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// Rows of `derived/` damaged at rest inside pages LMDB accepts: every read checks a row's checksum,
/// so a damaged row is an error that names `derived/` as the cache it is, never an answer; a writer
/// that meets one derives `derived/` again from the log and runs on rows that hold; a process that
/// only read one marks `derived/` at close for the next open for writing.
@Suite("derived/ rows damaged at rest")
struct DerivedRowDamageTests {
    /// Flips one byte in the middle of every value (the trailer excepted) of every read model in the
    /// closed ledger's `derived/`, through handles that do not check the trailer.
    static func damageReadModels(_ path: String, only: Set<String>? = nil) throws {
        let env = try Environment(
            options: EnvironmentOptions(path: path + "/" + DerivedState.directoryName, mapSize: 1 << 20, durability: .unsafeNoSync))
        defer { env.close() }
        let names = try env.databaseNames().filter {
            $0.hasPrefix("rm_") && !$0.hasSuffix(Database.twinSuffix) && (only?.contains($0) ?? true)
        }
        #expect(names.contains("rm_shares"))
        let databases = try env.openDatabases(names.map { ($0, DatabaseFlags()) }, create: false)
        var flipped = 0
        try env.write { txn in
            for db in databases where db.name != "rm_record_children" {
                var rows: [([UInt8], [UInt8])] = []
                try txn.withCursor(db) { cursor in
                    var entry = try cursor.first()
                    while let current = entry {
                        rows.append((Array(current.key), Array(current.value)))
                        entry = try cursor.next()
                    }
                }
                for (key, var value) in rows where value.count > 4 {
                    value[(value.count - 4) / 2] ^= 0x20
                    try txn.put(db, key: key, value: value)
                    flipped += 1
                }
            }
        }
        #expect(flipped > 0)
    }

    @Test("a write that reads a damaged row of derived/ derives derived/ again from the log and then runs: the same answer as an undamaged ledger; a read-only reader gets corruptedData naming derived/")
    func writerRederivesDamagedRows() async throws {
        let f = try await SharingFixture()
        try await DerivedStateTests.act(f, title: "A")
        let url = try #require(try f.alice.ownedShares().first?.url)
        await f.ledger.close()
        let path = f.dir.child("ledger")
        // The shares' rows only: opening for writing reads the users' rows, not these.
        try Self.damageReadModels(path, only: ["rm_shares"])

        // A read-only open reads a damaged row as an error, not an answer.
        let reader = try ShareLedger.open(DerivedStateTests.configuration(path, readOnly: true))
        let readError = #expect(throws: LedgerError.self) {
            _ = try reader.container(SharingFixture.container, userRecordName: "_alice").share(for: url)
        }
        #expect(readError?.code == .corruptedData)
        #expect(readError?.message.contains("derived/") == true)
        await reader.close()

        let writer = try ShareLedger.open(DerivedStateTests.configuration(path))
        let head = try writer.log.head()
        // A logged fetch reads the share's row: derived/ is derived again first, and the fetch answers.
        let metadata = try await writer.container(SharingFixture.container, userRecordName: "_bob").shareMetadata(for: url)
        #expect(metadata.share.url == url)
        #expect(try writer.log.head().position.rawValue == head.position.rawValue + 1)
        #expect(try writer.container(SharingFixture.container, userRecordName: "_alice").share(for: url).url == url)
        let report = try LedgerAudit(writer).audit(scratchPath: f.dir.child("audit"))
        #expect(report.ok, "\(report.problems)")
        await writer.close()
    }

    @Test("an open for writing whose first reads meet damaged rows derives derived/ again: the same read models as before the damage")
    func openRederivesDamagedRows() async throws {
        let f = try await SharingFixture()
        try await DerivedStateTests.act(f, title: "A")
        let digest = try f.ledger.readModelDigest()
        await f.ledger.close()
        let path = f.dir.child("ledger")
        try Self.damageReadModels(path)
        let writer = try ShareLedger.open(DerivedStateTests.configuration(path))
        #expect(try writer.readModelDigest() == digest)
        let report = try LedgerAudit(writer).audit(scratchPath: f.dir.child("audit"))
        #expect(report.ok, "\(report.problems)")
        await writer.close()
    }

    @Test("a process that read a damaged row and closed without writing marks derived/: a read-only open then says so, the next open for writing derives it again")
    func closeMarksDamage() async throws {
        let f = try await SharingFixture()
        try await DerivedStateTests.act(f, title: "A")
        let url = try #require(try f.alice.ownedShares().first?.url)
        let digest = try f.ledger.readModelDigest()
        await f.ledger.close()
        let path = f.dir.child("ledger")
        try Self.damageReadModels(path, only: ["rm_shares"])
        var configuration = DerivedStateTests.configuration(path)
        let writer = try ShareLedger.open(configuration)
        #expect(throws: LedgerError.self) { _ = try writer.container(SharingFixture.container, userRecordName: "_alice").share(for: url) }
        await writer.close()

        let error = #expect(throws: LedgerError.self) { _ = try ShareLedger.open(DerivedStateTests.configuration(path, readOnly: true)) }
        #expect(error?.code == .readOnly)
        #expect(error?.message.contains("damaged") == true)
        configuration.residualTaskWorker = nil
        let again = try ShareLedger.open(configuration)
        #expect(try again.readModelDigest() == digest)
        await again.close()
    }

    @Test("audit checks every row of derived/ against its checksum: damage no read reached fails the audit (exit 1, not 2) naming the database and rebuild; after rebuild the audit passes")
    func auditFindsUnreadDamage() async throws {
        let f = try await SharingFixture()
        try await DerivedStateTests.act(f, title: "A")
        await f.ledger.close()
        let path = f.dir.child("ledger")
        try Self.damageReadModels(path, only: ["rm_shares"])

        let reader = try ShareLedger.open(DerivedStateTests.configuration(path, readOnly: true))
        let report = try LedgerAudit(reader).audit(scratchPath: f.dir.child("audit-1"))
        #expect(!report.ok)
        #expect(report.problems.contains { $0.contains("damaged at rest in rm_shares") && $0.contains("share-ledger rebuild") }, "\(report.problems)")
        await reader.close()

        let writer = try ShareLedger.open(DerivedStateTests.configuration(path))
        _ = try await LedgerAudit(writer).rebuildReadModels()
        let after = try LedgerAudit(writer).audit(scratchPath: f.dir.child("audit-2"))
        #expect(after.ok, "\(after.problems)")
        await writer.close()
    }

    @Test("the row check resumes across read transactions without skipping or repeating a row, sorted duplicates included")
    func rowCheckChunks() async throws {
        let f = try await SharingFixture()
        try await DerivedStateTests.act(f, title: "A")
        try await DerivedStateTests.act(f, title: "B")
        let store = f.ledger.log.store
        let whole = store.checkDerivedRows()
        #expect(whole.failed.isEmpty)
        #expect(whole.rows > 20)
        for chunk in [1, 2, 3, 7] {
            let chunked = store.checkDerivedRows(rowsPerTransaction: chunk)
            #expect(chunked.failed.isEmpty)
            #expect(chunked.rows == whole.rows, "chunks of \(chunk)")
        }
        await f.ledger.close()
    }
}
