import ByteKeys
import Foundation
import LMDB
@testable import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// What the audit can and cannot see without recomputing: a history altered below a checkpoint, a
/// cut tail, and `verify --json`'s shape.
@Suite("Audit: checkpoints, cut tails, verify's answer")
struct AuditAnchorTests {
    /// Ten raw events: stream `a` at 1, 2, 3 and 9, stream `b` at 4...8 and 10.
    static func tenEvents(_ path: String) async throws -> ShareLedger {
        var configuration = Fixtures.configuration(path)
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        for stream in ["a", "a", "a", "b", "b", "b", "b", "b", "a", "b"] {
            try await ledger.log.append([Fixtures.draft("in \(stream)")], to: stream, metadata: Fixtures.metadata())
        }
        return ledger
    }

    static func flipByte(of position: UInt64, in ledger: ShareLedger) throws {
        let store = ledger.log.store
        try store.environment.write { txn in
            var bytes = try #require(try txn.get(store.log, key: BigEndian.bytes(of: position)))
            bytes[bytes.count - 40] ^= 0x01
            try txn.put(store.log, key: BigEndian.bytes(of: position), value: bytes)
        }
    }

    static func cut(after position: UInt64, through last: UInt64, in ledger: ShareLedger) throws {
        let store = ledger.log.store
        try store.environment.write { txn in
            for removed in (position + 1)...last { try txn.delete(store.log, key: BigEndian.bytes(of: removed)) }
        }
    }

    @Test("audit --from-checkpoint sees an event before the checkpoint altered without recomputing anything")
    func alteredBelowCheckpoint() async throws {
        let dir = TemporaryDirectory()
        let path = dir.child("ledger")
        let ledger = try await Self.tenEvents(path)
        let key = CheckpointSigningKey.generate()
        try await LedgerAudit(ledger).checkpoint(signingKey: key)
        try Self.flipByte(of: 4, in: ledger)
        let report = try LedgerAudit(ledger).audit(
            scratchPath: dir.child("scratch"), options: AuditOptions(trustedKeys: [key.publicKey], fromCheckpoint: true))
        #expect(!report.ok)
        #expect(report.firstBadPosition == 4, "\(report.problems)")
        #expect(report.chainVerifiedFrom == 1)
        await ledger.close()

        let pub = dir.child("k.pub")
        try CheckpointKeyFile.text(key.publicKey.rawRepresentation).write(toFile: pub, atomically: true, encoding: .utf8)
        let run = try await runCLI(["audit", "--path", path, "--trusted-key", pub, "--from-checkpoint", "--json"])
        #expect(run.exited(1), "\(run.summary)")
        #expect(jsonObject(run.stdout)?["firstBadPosition"] as? Int == 4, "\(run.summary)")
    }

    @Test("a cut tail: audit points at the cut, verify says it has no anchor")
    func cutTail() async throws {
        let dir = TemporaryDirectory()
        let path = dir.child("ledger")
        let ledger = try await Self.tenEvents(path)
        try Self.cut(after: 7, through: 10, in: ledger)
        let report = try LedgerAudit(ledger).audit(scratchPath: dir.child("scratch"))
        #expect(!report.ok)
        #expect(report.firstBadPosition == 8, "\(report.problems)")
        #expect(report.problems.contains { $0.contains("cut tail") }, "\(report.problems)")
        await ledger.close()

        let verify = try await runCLI(["verify", "--path", path])
        #expect(verify.exited(0), "\(verify.summary)")
        #expect(verify.stdout.contains("cannot show a removed tail"), "\(verify.summary)")
        let audit = try await runCLI(["audit", "--path", path, "--json"])
        #expect(audit.exited(1), "\(audit.summary)")
        #expect(jsonObject(audit.stdout)?["firstBadPosition"] as? Int == 8, "\(audit.summary)")
    }

    @Test("a format-1 ledger with a cut tail: verify and audit report the defect (exit 1, the position), not an unreadable ledger")
    func formatOneCutTail() async throws {
        let dir = TemporaryDirectory()
        let path = dir.child("ledger")
        let ledger = try await Self.tenEvents(path)
        let store = ledger.log.store
        let head = try ledger.log.head()
        try store.environment.write { txn in
            try txn.put(store.meta, key: LogStore.formatKey, value: BigEndian.bytes(of: UInt32(1)))
            let record = BigEndian.bytes(of: head.position.rawValue) + head.hash.bytes
                + BigEndian.bytes(of: UInt64(bitPattern: head.recordedAtMicros))
            try txn.put(store.meta, key: LogStore.headKey, value: record)
        }
        try Self.cut(after: 7, through: 10, in: ledger)
        await ledger.close()
        for command in ["verify", "audit"] {
            let run = try await runCLI([command, "--path", path, "--json"])
            #expect(run.exited(1), "\(command): \(run.summary)")
            #expect(jsonObject(run.stdout)?["firstBadPosition"] as? Int == 8, "\(command): \(run.summary)")
        }
    }

    @Test("verify --json has audit's shape: ok, events, the ledger's head, firstBadPosition")
    func verifyJSONShape() async throws {
        let dir = TemporaryDirectory()
        let path = dir.child("ledger")
        let ledger = try await Self.tenEvents(path)
        let head = try ledger.log.head()
        try Self.flipByte(of: 3, in: ledger)
        await ledger.close()
        let run = try await runCLI(["verify", "--path", path, "--json"])
        #expect(run.exited(1), "\(run.summary)")
        let report = try #require(jsonObject(run.stdout), "\(run.summary)")
        #expect(report["ok"] as? Bool == false)
        #expect(report["events"] as? Int == 10)
        #expect(report["headPosition"] as? Int == 10)
        #expect(report["headHash"] as? String == head.hash.hex)
        #expect(report["firstBadPosition"] as? Int == 3)
        #expect(report["lastGoodPosition"] as? Int == 2)
        let good = try await runCLI(["verify", "--path", dir.child("none"), "--json"])
        #expect(good.exited(2))
    }
}
