import Foundation
@testable import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

@Suite("share-ledger keygen, checkpoint, export, import")
struct CheckpointExportCLITests {
    private func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    @Test("keygen writes a 0600 key; checkpoint and audit --trusted-key pass; another key and a wrong --expect-head fail with 1")
    func checkpoints() async throws {
        let f = try await SharingFixture()
        _ = try await f.makeHierarchy()
        await f.ledger.close()
        let path = f.dir.child("ledger")
        let prefix = f.dir.child("signer")

        let keygen = try await runProduct("share-ledger", ["keygen", "--out", prefix])
        #expect(keygen.status == 0, "\(keygen.stderr)")
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: prefix + ".key")[.posixPermissions] as? Int)
        #expect(mode == 0o600)
        let secret = try String(contentsOfFile: prefix + ".key", encoding: .utf8)
        #expect(Data(base64Encoded: secret.trimmingCharacters(in: .newlines))?.count == 32)
        #expect(try await runProduct("share-ledger", ["keygen", "--out", prefix]).status == 1)  // no overwrite
        #expect(try await runProduct("share-ledger", ["keygen", "--out", f.dir.child("other")]).status == 0)

        let checkpoint = try await runProduct("share-ledger", ["checkpoint", "--path", path, "--signing-key", prefix + ".key", "--json"])
        #expect(checkpoint.status == 0, "\(checkpoint.stdout) \(checkpoint.stderr)")
        let signed = try json(checkpoint.stdout)
        let position = try #require(signed["position"] as? Int)
        let hash = try #require(signed["hash"] as? String)

        let audit = try await runProduct("share-ledger", ["audit", "--path", path, "--trusted-key", prefix + ".pub", "--json"])
        #expect(audit.status == 0, "\(audit.stdout) \(audit.stderr)")
        #expect(try json(audit.stdout)["checkpointsVerified"] as? Int == 1)

        let other = try await runProduct("share-ledger", ["audit", "--path", path, "--trusted-key", f.dir.child("other.pub")])
        #expect(other.status == 1)
        #expect(other.stdout.contains("not trusted"))

        let pinned = try await runProduct("share-ledger", ["audit", "--path", path, "--expect-head", "\(position):\(hash)"])
        #expect(pinned.status == 0, "\(pinned.stdout)")
        let wrong = String(repeating: "0", count: 64)
        let mismatch = try await runProduct("share-ledger", ["audit", "--path", path, "--expect-head", "\(position):\(wrong)", "--json"])
        #expect(mismatch.status == 1)
        #expect(try json(mismatch.stdout)["firstBadPosition"] as? Int == position)
        #expect(try await runProduct("share-ledger", ["audit", "--path", path, "--expect-head", "nonsense"]).status != 0)
    }

    @Test("export | import round-trips byte for byte; a broken file is refused with its line and exit 1")
    func exportImport() async throws {
        let f = try await SharingFixture()
        _ = try await f.makeHierarchy()
        await f.ledger.close()
        let path = f.dir.child("ledger")

        let export = try await runProduct("share-ledger", ["export", "--path", path])
        #expect(export.status == 0, "\(export.stderr)")
        let file = f.dir.child("log.ndjson")
        try export.stdout.write(toFile: file, atomically: true, encoding: .utf8)
        let imported = try await runProduct("share-ledger", ["import", "--path", f.dir.child("copy"), "--json"], stdin: file)
        #expect(imported.status == 0, "\(imported.stdout) \(imported.stderr)")
        #expect(try json(imported.stdout)["events"] as? Int == export.stdout.split(separator: "\n").count)
        let again = try await runProduct("share-ledger", ["export", "--path", f.dir.child("copy")])
        #expect(again.stdout == export.stdout)
        #expect(try await runProduct("share-ledger", ["audit", "--path", f.dir.child("copy")]).status == 0)

        var lines = export.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        lines.swapAt(2, 3)
        let broken = f.dir.child("broken.ndjson")
        try lines.joined(separator: "\n").write(toFile: broken, atomically: true, encoding: .utf8)
        let refused = try await runProduct("share-ledger", ["import", "--path", f.dir.child("other")], stdin: broken)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("line 3 "), "\(refused.stderr)")
        // The refused import left no empty ledger behind.
        #expect(!FileManager.default.fileExists(atPath: f.dir.child("other")))
        // A non-empty target is refused.
        #expect(try await runProduct("share-ledger", ["import", "--path", f.dir.child("copy")], stdin: file).status == 1)
    }
}
