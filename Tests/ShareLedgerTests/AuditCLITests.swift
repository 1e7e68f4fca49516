import ByteKeys
import Foundation
import LMDB
@testable import ShareLedger
import TestSupport
import Testing

@Suite("share-ledger audit, rebuild, history")
struct AuditCLITests {
    private func json(_ text: String) throws -> Any { try JSONSerialization.jsonObject(with: Data(text.utf8)) }

    @Test("audit passes, history shows the share's timeline, rebuild replays; a flipped byte fails the audit with 1")
    func auditHistoryRebuild() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        try await f.ledger.completeResidualTasks()
        let events = try f.ledger.statistics().events
        await f.ledger.close()
        let path = f.dir.child("ledger")

        let audit = try await runProduct("share-ledger", ["audit", "--path", path, "--json"])
        #expect(audit.status == 0, "\(audit.stdout) \(audit.stderr)")
        let report = try #require(try json(audit.stdout) as? [String: Any])
        #expect(report["ok"] as? Bool == true)
        #expect(report["events"] as? Int == Int(events))
        #expect(report["projectionsMatch"] as? Bool == true)
        #expect((report["headHash"] as? String)?.count == 64)

        let history = try await runProduct("share-ledger", ["history", "--path", path, "--share", share.url.absoluteString, "--json"])
        #expect(history.status == 0, "\(history.stderr)")
        let entries = try #require(try json(history.stdout) as? [[String: Any]])
        #expect(entries.first?["event"] as? String == "ShareCreated")
        #expect(entries.map { $0["event"] as? String }.contains("ParticipantZoneCreated"))
        let text = try await runProduct("share-ledger", ["history", "--path", path, "--user", "_bob", "--container", SharingFixture.container])
        #expect(text.stdout.contains("ShareAccepted"))
        #expect(try await runProduct("share-ledger", ["history", "--path", path]).status != 0)

        let access = try await runProduct("share-ledger", ["access", "--path", path, "--share", share.url.absoluteString, "--at", "\(events)", "--json"])
        #expect(access.status == 0, "\(access.stderr)")
        let accessJSON = try #require(try json(access.stdout) as? [String: Any])
        #expect(accessJSON["existed"] as? Bool == true)
        #expect((accessJSON["participants"] as? [[String: Any]])?.count == 2)
        let early = try await runProduct("share-ledger", ["access", "--path", path, "--share", share.url.absoluteString, "--at", "1"])
        #expect(early.stdout.contains("did not exist"))

        let rebuild = try await runProduct("share-ledger", ["rebuild", "--path", path, "--json"])
        #expect(rebuild.status == 0, "\(rebuild.stderr)")
        let rebuildJSON = try #require(try json(rebuild.stdout) as? [String: Any])
        #expect(rebuildJSON["events"] as? Int == Int(events))
        #expect(rebuildJSON["switchedCopies"] as? Bool == false && rebuildJSON["changedEntries"] as? Int == 0)
        let rewrite = try await runProduct("share-ledger", ["rebuild", "--path", path, "--rewrite-all"])
        #expect(rewrite.status == 0, "\(rewrite.stderr)")
        #expect(rewrite.stdout.contains("rewritten into their second copies and switched in"))

        // Flip a byte of one stored event behind the ledger's back.
        do {
            let environment = try Environment(options: EnvironmentOptions(path: path, mapSize: 64 << 20, maxDatabases: 32))
            let log = try environment.openDatabases([("log", [])])[0]
            try environment.write { txn in
                var bytes = try #require(try txn.get(log, key: BigEndian.bytes(of: UInt64(3))))
                bytes[bytes.count - 40] ^= 0x20
                try txn.put(log, key: BigEndian.bytes(of: UInt64(3)), value: bytes)
            }
            environment.close()
        }
        let broken = try await runProduct("share-ledger", ["audit", "--path", path, "--json"])
        #expect(broken.status == 1)
        let brokenReport = try #require(try json(broken.stdout) as? [String: Any])
        #expect(brokenReport["ok"] as? Bool == false)
        #expect(brokenReport["firstBadPosition"] as? Int == 3)
        #expect(try await runProduct("share-ledger", ["audit", "--path", f.dir.child("nothing")]).status == 2)
    }
}
