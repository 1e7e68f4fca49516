import Foundation
#if canImport(Glibc)
import Glibc
#endif
import ShareLedger
import TestSupport
import Testing

@Suite("share-ledger command")
struct CLITests {
    @Test("demo writes a ledger; stats --json and verify --json report it")
    func demoStatsVerify() async throws {
        let dir = TemporaryDirectory()
        let demo = try await runProduct("share-ledger", ["demo", "--path", dir.path, "--events", "300", "--writers", "3", "--json"])
        #expect(demo.status == 0, "\(demo.stderr)")
        let summary = try JSONSerialization.jsonObject(with: Data(demo.stdout.utf8)) as? [String: Any]
        #expect(summary?["appended"] as? Int == 300)

        let stats = try await runProduct("share-ledger", ["stats", "--path", dir.path, "--json"])
        #expect(stats.status == 0, "\(stats.stderr)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(stats.stdout.utf8)) as? [String: Any])
        #expect(object["events"] as? Int == 300)
        #expect(object["headPosition"] as? Int == 300)
        #expect((object["headHash"] as? String)?.count == 64)
        #expect((object["mapSizeBytes"] as? Int ?? 0) > 0)
        #expect((object["usedBytes"] as? Int ?? 0) > 0)
        #expect(object["streams"] as? Int == 3)

        let verify = try await runProduct("share-ledger", ["verify", "--path", dir.path, "--json"])
        #expect(verify.status == 0)
        let result = try #require(try JSONSerialization.jsonObject(with: Data(verify.stdout.utf8)) as? [String: Any])
        #expect(result["eventsChecked"] as? Int == 300)
        #expect(result["headHash"] as? String == object["headHash"] as? String)
    }

    @Test("a path that holds no ledger exits with 2 and a clear message, and creates nothing")
    func notALedger() async throws {
        let dir = TemporaryDirectory()
        let missing = dir.child("missing")
        let text = try await runProduct("share-ledger", ["stats", "--path", missing])
        #expect(text.status == 2)
        #expect(text.stderr.contains("no ledger"))
        #expect(!FileManager.default.fileExists(atPath: missing))

        let json = try await runProduct("share-ledger", ["verify", "--path", missing, "--json"])
        #expect(json.status == 2)
        let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        let error = object?["error"] as? [String: Any]
        #expect(error?["name"] as? String == "notALedger")
        #expect(error?["code"] as? Int == 1003)
    }

    @Test("--help lists the commands; bad arguments are refused before anything is written")
    func helpAndValidation() async throws {
        let help = try await runProduct("share-ledger", ["--help"])
        #expect(help.status == 0)
        for command in ["stats", "demo", "verify", "bench"] { #expect(help.stdout.contains(command)) }
        let dir = TemporaryDirectory()
        let bad = try await runProduct("share-ledger", ["demo", "--path", dir.child("x"), "--events", "0"])
        #expect(bad.status != 0)
        #expect(!FileManager.default.fileExists(atPath: dir.child("x")))
    }
}

/// Whether the tests can run a command as an unprivileged user (root bypasses file permissions, so
/// "not writable" can only be observed as another user).
private let canDropPrivileges: Bool = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/sbin/runuser")

@Suite("share-ledger command, as an unprivileged user")
struct UnprivilegedCLITests {
    @Test("a ledger directory the user cannot write is refused with exit 2 and a message that says so",
          .enabled(if: canDropPrivileges))
    func unwritableDirectory() async throws {
        let dir = TemporaryDirectory()
        let ledger = dir.child("ledger")
        let demo = try await runProduct("share-ledger", ["demo", "--path", ledger, "--events", "10"])
        #expect(demo.status == 0)
        // `nobody` may reach the (root-owned, 0755) directories but not write them. The binary is copied
        // next to the ledger: the checkout it was built in may sit in a directory only root can enter.
        let binary = dir.child("share-ledger")
        try FileManager.default.copyItem(atPath: builtProduct("share-ledger").path, toPath: binary)
        for path in [dir.url.deletingLastPathComponent().path, dir.path, ledger, binary] {
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: path)
        }
        let run = try await runProcess(URL(fileURLWithPath: "/usr/sbin/runuser"), ["-u", "nobody", "--", binary, "stats", "--path", ledger])
        let message = run.stderr
        #expect(run.exited(2), "\(run.summary)")
        #expect(message.contains("not writable"), "\(message)")
    }
}
