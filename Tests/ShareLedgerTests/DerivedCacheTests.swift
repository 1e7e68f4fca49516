import ByteKeys
import Foundation
import LMDB
@testable import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// `derived/` is a cache of the log: recreated from the log when missing or unreadable, caught up
/// when it lags (in memory, by a read-only open), and reported by `audit` only when it disagrees with
/// the log at a position both have.
@Suite("derived/ as a cache of the log")
struct DerivedCacheTests {
    /// A closed sharing ledger whose `derived/` lags its log: the derived state as it was after
    /// ``DerivedStateTests/act(_:title:)``, the log with a zone, a share and an acceptance more.
    /// Returns the path, the derived position left behind, and the state a writer derives.
    static func laggingLedger(_ f: SharingFixture) async throws -> (path: String, behind: UInt64, expected: Expected) {
        try await DerivedStateTests.act(f, title: "A")
        let behind = try f.ledger.log.head().position.rawValue
        let (path, derived, saved) = try await DerivedStateTests.closeKeepingDerived(f)

        let ledger = try ShareLedger.open(DerivedStateTests.configuration(path))
        let container = ledger.container(SharingFixture.container, userRecordName: "_alice")
        _ = try await container.save(RecordZone(zoneID: RecordZoneID(zoneName: "B")))
        let root = RecordID(recordName: "rootB", zoneID: RecordZoneID(zoneName: "B"))
        _ = try await container.save(Record(recordType: "List", recordID: root))
        _ = try await container.share(rootRecord: root, title: "B")
        let expected = try Expected(ledger)
        await ledger.close()
        #expect(expected.digest.head.position.rawValue > behind)

        try FileManager.default.removeItem(atPath: derived)
        try FileManager.default.copyItem(atPath: saved, toPath: derived)
        try? FileManager.default.removeItem(atPath: derived + "/lock.mdb")
        return (path, behind, expected)
    }

    /// What a ledger answers: its read-model digest, counters and alice's history.
    struct Expected: Equatable {
        var digest: (head: LogHead, digest: String)
        var streams: Int
        var commands: Int
        var shares: UInt64
        var history: Int

        init(_ ledger: ShareLedger) throws {
            digest = try ledger.readModelDigest()
            let statistics = try ledger.statistics()
            streams = statistics.streams
            commands = statistics.commands
            shares = statistics.shares
            history = try LedgerAudit(ledger).history(of: .user("_alice", container: SharingFixture.container)).count
        }

        static func == (a: Expected, b: Expected) -> Bool {
            a.digest == b.digest && a.streams == b.streams && a.commands == b.commands && a.shares == b.shares
                && a.history == b.history
        }
    }

    @Test("a read-only open of a ledger whose derived/ lags the log answers what the log implies; audit passes and says where derived/ is")
    func lagReadOnly() async throws {
        let f = try await SharingFixture()
        let (path, behind, expected) = try await Self.laggingLedger(f)

        let ledger = try ShareLedger.open(DerivedStateTests.configuration(path, readOnly: true))
        #expect(try Expected(ledger) == expected)
        let report = try LedgerAudit(ledger).audit(scratchPath: f.dir.child("audit"))
        #expect(report.ok, "\(report.problems)")
        #expect(report.derivedPosition == behind)
        await ledger.close()

        // The command line, as the probe ran it after a kill.
        let audit = try await runCLI(["audit", "--path", path])
        #expect(audit.exited(0), "\(audit.summary)")
        #expect(audit.stdout.contains("derived/ (a cache of the log) reflects the log up to position \(behind)"), "\(audit.summary)")
        let stats = try await runCLI(["stats", "--path", path, "--json"])
        #expect(stats.exited(0), "\(stats.summary)")
        #expect(jsonObject(stats.stdout)?["commands"] as? Int == expected.commands, "\(stats.summary)")
        #expect(jsonObject(stats.stdout)?["shares"] as? Int == Int(expected.shares), "\(stats.summary)")
        // Nothing was written: derived/ still lags until a write open.
        let again = try ShareLedger.open(DerivedStateTests.configuration(path, readOnly: true))
        #expect(try again.log.store.environment.read { txn in try again.log.store.derivedPosition(txn).position } == behind)
        await again.close()
    }

    @Test("derived/ whose position carries a hash other than the log's event there: audit reports it at that position")
    func positionWithAnotherHash() async throws {
        let f = try await SharingFixture()
        try await DerivedStateTests.act(f, title: "A")
        let expected = try f.ledger.readModelDigest()
        let head = try f.ledger.log.head()
        await f.ledger.close()
        let path = f.dir.child("ledger")
        // What a rewrite of the log with a recomputed chain leaves behind: derived/ names the old hash.
        do {
            let environment = try Environment(options: EnvironmentOptions(path: path + "/" + DerivedState.directoryName))
            let meta = try environment.openDatabases([("derived_meta", [])])[0]
            var other = head.hash.bytes
            other[0] ^= 0xFF
            try environment.write { txn in
                try txn.put(meta, key: Array("position".utf8), value: BigEndian.bytes(of: head.position.rawValue) + other)
            }
            environment.close()
        }
        let ledger = try ShareLedger.open(DerivedStateTests.configuration(path, readOnly: true))
        let report = try LedgerAudit(ledger).audit(scratchPath: f.dir.child("audit"))
        #expect(!report.ok)
        #expect(report.firstBadPosition == head.position.rawValue, "\(report.problems)")
        #expect(report.problems.contains { $0.contains("derived/ records position \(head.position.rawValue)") }, "\(report.problems)")
        // Read-only reads answer from the log all the same (derived again in memory).
        #expect(try ledger.readModelDigest() == expected)
        await ledger.close()
        let cli = try await runCLI(["audit", "--path", path, "--json"])
        #expect(cli.exited(1), "\(cli.summary)")
        #expect(jsonObject(cli.stdout)?["firstBadPosition"] as? Int == Int(head.position.rawValue), "\(cli.summary)")
        // A write open derives it again; then the audit passes.
        let writer = try ShareLedger.open(DerivedStateTests.configuration(path))
        #expect(try writer.readModelDigest() == expected)
        #expect(try LedgerAudit(writer).audit(scratchPath: f.dir.child("audit2")).ok)
        await writer.close()
    }

    @Test("a checkpoint or an expected head beyond the head: audit reports the first missing position, as for a cut tail")
    func anchorsBeyondHead() async throws {
        let dir = TemporaryDirectory()
        let path = dir.child("ledger")
        let ledger = try await AuditAnchorTests.tenEvents(path)
        let key = CheckpointSigningKey.generate()
        try await LedgerAudit(ledger).checkpoint(signingKey: key)
        let tenth = try ledger.log.head()
        try AuditAnchorTests.cut(after: 7, through: 10, in: ledger)
        await ledger.close()
        // derived/ derived again from the cut log, so that only the anchors show the cut.
        try FileManager.default.removeItem(atPath: path + "/" + DerivedState.directoryName)
        let reopened = try ShareLedger.open(DerivedStateTests.configuration(path))
        let checkpointed = try LedgerAudit(reopened).audit(scratchPath: dir.child("a1"), options: AuditOptions(trustedKeys: [key.publicKey]))
        #expect(!checkpointed.ok)
        #expect(checkpointed.firstBadPosition == 8, "\(checkpointed.problems)")
        let pinned = try LedgerAudit(reopened).audit(
            scratchPath: dir.child("a2"), options: AuditOptions(expectedHeads: [ExpectedHead(position: tenth.position, hash: tenth.hash)]))
        #expect(pinned.firstBadPosition == 8, "\(pinned.problems)")
        await reopened.close()
    }

    @Test("rebuild repairs damaged stream and command records: afterwards they equal the records derived from the log")
    func rebuildRepairsRecords() async throws {
        let f = try await SharingFixture()
        try await DerivedStateTests.act(f, title: "A")
        let store = f.ledger.log.store
        let (streamKey, commandKey) = try store.environment.read { txn -> ([UInt8], [UInt8]) in
            var stream: [UInt8] = []
            var command: [UInt8] = []
            try txn.visitEntries(store.streams, from: nil) { key, _ in
                stream = Array(key)
                return false
            }
            try txn.visitEntries(store.commands, from: nil) { key, _ in
                command = Array(key)
                return false
            }
            return (stream, command)
        }
        try store.environment.write { txn in
            try store.writeStreamRecord(txn, key: streamKey, version: 99, last: 1)
            try txn.delete(store.commands, key: commandKey)
            try store.writeCommandRecord(txn, key: Array("iCloud.x".utf8) + [0] + Array(repeating: 7, count: 16), first: 2, count: 1, streamVersion: 0)
        }
        #expect(try !LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("a1")).ok)
        try await LedgerAudit(f.ledger).rebuildReadModels()
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("a2"))
        #expect(report.ok, "\(report.problems)")
        let repaired = try Self.records(f.ledger)
        await f.ledger.close()

        // The records derived from the log alone: derived/ deleted, derived again by a write open.
        let path = f.dir.child("ledger")
        try FileManager.default.removeItem(atPath: path + "/" + DerivedState.directoryName)
        let fresh = try ShareLedger.open(DerivedStateTests.configuration(path))
        #expect(try Self.records(fresh) == repaired)
        await fresh.close()
    }

    /// Every stream and command record, as stored.
    static func records(_ ledger: ShareLedger) throws -> [[UInt8]] {
        let store = ledger.log.store
        return try store.environment.read { txn in
            var out: [[UInt8]] = []
            for db in [store.streams, store.commands] {
                try txn.visitEntries(db, from: nil) { key, value in
                    out.append(Array(key) + [0xFF] + Array(value))
                    return true
                }
            }
            return out
        }
    }

    @Test("export verifies the chain as it reads: at an altered event it stops with corruptedData, having written only the events before it")
    func exportStopsAtBrokenChain() async throws {
        let dir = TemporaryDirectory()
        let path = dir.child("ledger")
        let ledger = try await AuditAnchorTests.tenEvents(path)
        try AuditAnchorTests.flipByte(of: 4, in: ledger)
        let file = dir.child("export.ndjson")
        let error = #expect(throws: LedgerError.self) { try exportToFile(ledger, file) }
        #expect(error?.code == .corruptedData)
        #expect(error?.message.contains("position 4") == true, "\(String(describing: error))")
        let lines = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 3)
        await ledger.close()

        let cli = try await runCLI(["export", "--path", path])
        #expect(!cli.exited(0), "\(cli.summary)")
        #expect(cli.stderr.contains("corruptedData"), "\(cli.summary)")
    }
}
