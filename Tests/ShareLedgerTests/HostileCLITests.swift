import ByteKeys
import Crypto
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import LMDB
@testable import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// Every file under `path` with a digest of its contents (a missing path gives an empty listing).
func directoryListing(_ path: String) -> [String: String] {
    var out: [String: String] = [:]
    guard let names = FileManager.default.subpaths(atPath: path) else { return out }
    for name in names {
        let full = path + "/" + name
        var isDirectory: ObjCBool = false
        _ = FileManager.default.fileExists(atPath: full, isDirectory: &isDirectory)
        if isDirectory.boolValue || name.hasSuffix("lock.mdb") {
            out[name] = "dir-or-lock"
        } else {
            let data = FileManager.default.contents(atPath: full) ?? Data()
            out[name] = SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
        }
    }
    return out
}

@Suite("Hostile input: the share-ledger command")
struct HostileCLITests {
    private func json(_ text: String) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
    }

    /// Every command that reads an existing ledger, with the arguments it needs.
    static func commands(_ path: String) -> [[String]] {
        let url = "https://share.localhost/share/0AAAAAAAAAAAAAAAAAAAAAAAAA"
        return [
            ["stats", "--path", path], ["verify", "--path", path], ["audit", "--path", path], ["rebuild", "--path", path],
            ["history", "--path", path, "--container", "iCloud.x"], ["access", "--path", path, "--share", url, "--at", "1"],
            ["export", "--path", path], ["fetch", "--path", path, url, "--as", "_alice", "--container", "iCloud.x"],
            ["accept", "--path", path, url, "--as", "_alice", "--container", "iCloud.x"], ["tasks", "list", "--path", path],
            ["tasks", "retry", "--all", "--path", path], ["worker", "--drain", "--path", path],
            ["zone", "create", "Z", "--path", path, "--as", "_alice", "--container", "iCloud.x"],
            ["record", "save", "r", "--zone", "Z", "--type", "T", "--path", path, "--as", "_alice", "--container", "iCloud.x"],
            ["share", "create", "--zone", "Z", "--path", path, "--as", "_alice", "--container", "iCloud.x"],
            ["share", "lookup", "--user", "_bob", "--path", path, "--as", "_alice", "--container", "iCloud.x"],
            ["share", "delete", url, "--path", path, "--as", "_alice", "--container", "iCloud.x"],
        ]
    }

    @Test("every command on a missing path, a foreign directory, a damaged data file or a newer-format ledger exits 2 and changes nothing")
    func notALedger() async throws {
        let dir = TemporaryDirectory()
        let foreign = dir.makeChild("foreign")
        _ = FileManager.default.createFile(atPath: foreign + "/notes.txt", contents: Data("mine".utf8))
        let garbage = dir.makeChild("garbage")
        _ = FileManager.default.createFile(atPath: garbage + "/data.mdb", contents: Data(repeating: 0x42, count: 32_768))
        let newer = dir.child("newer")
        do {
            let log = try EventLog.open(Fixtures.configuration(newer).log)
            try await log.append([Fixtures.draft("a")], to: "s", metadata: Fixtures.metadata())
            await log.close()
            let env = try Environment(options: EnvironmentOptions(path: newer))
            let meta = try env.openDatabases([("meta", [])])[0]
            try env.write { txn in try txn.put(meta, key: Array("format_version".utf8), value: BigEndian.bytes(of: UInt32(99))) }
            env.close()
        }
        let file = dir.child("plain-file")
        _ = FileManager.default.createFile(atPath: file, contents: Data("not a directory".utf8))
        for (kind, path) in [("missing", dir.child("missing")), ("foreign", foreign), ("garbage", garbage), ("newer", newer), ("file", file)] {
            let before = directoryListing(path)
            // Every command on a foreign directory and a newer ledger; a sample on the others (each
            // command opens the ledger the same way).
            var commands = Self.commands(path)
            if kind == "missing" || kind == "garbage" || kind == "file" {
                commands = commands.filter { ["stats", "audit", "fetch", "worker"].contains($0[0]) }
            }
            // Import creates a ledger where there is none (that is its job); elsewhere it must refuse.
            if kind != "missing" { commands.append(["import", "--path", path]) }
            for command in commands {
                let result = try await runProduct("share-ledger", command + ["--json"], input: Data())
                #expect(result.status == 2, "\(kind): \(command[0]) exited \(result.status): \(result.stdout) \(result.stderr)")
                let error = json(result.stdout)?["error"] as? [String: Any]
                let expected = kind == "newer" ? "formatTooNew" : "notALedger"
                #expect(error?["name"] as? String == expected, "\(kind): \(command[0]): \(result.stdout)")
                #expect(directoryListing(path) == before, "\(kind): \(command[0]) changed the directory")
            }
            #expect(FileManager.default.fileExists(atPath: dir.child("missing")) == false)
        }
    }

    @Test("fetch and accept with hostile URLs, users and containers exit 1 with a typed error; the ledger audits clean after")
    func hostileArguments() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let before = try f.ledger.statistics()
        await f.ledger.close()
        let path = f.dir.child("ledger")
        let container = SharingFixture.container
        let cases: [(String, [String], String)] = [
            ("empty URL", ["", "--as", "_bob", "--container", container], "invalidArguments"),
            ("not a URL", ["not a url", "--as", "_bob", "--container", container], "invalidArguments"),
            ("10,000 characters", [String(repeating: "a", count: 10_000), "--as", "_bob", "--container", container], "invalidArguments"),
            ("oversized share URL", [share.url.absoluteString + String(repeating: "x", count: 3_000), "--as", "_alice", "--container", container], "unknownItem"),
            ("unknown token", ["https://share.localhost/share/0AAAAAAAAAAAAAAAAAAAAAAAAA", "--as", "_bob", "--container", container], "unknownItem"),
            ("javascript URL", ["javascript:alert(1)", "--as", "_bob", "--container", container], "unknownItem"),
            ("not invited", [share.url.absoluteString, "--as", "_carol", "--container", container], "unknownItem"),
            ("unknown user", [share.url.absoluteString, "--as", "_nobody", "--container", container], "notAuthenticated"),
            ("user name of 10,000 characters", [share.url.absoluteString, "--as", String(repeating: "u", count: 10_000), "--container", container], "notAuthenticated"),
            ("user name with a path", [share.url.absoluteString, "--as", "../../etc/passwd", "--container", container], "notAuthenticated"),
            ("empty container", [share.url.absoluteString, "--as", "_alice", "--container", ""], "invalidArguments"),
            ("container of 10,000 characters", [share.url.absoluteString, "--as", "_alice", "--container", String(repeating: "c", count: 10_000)], "invalidArguments"),
            ("wrong container", [share.url.absoluteString, "--as", "_alice", "--container", "iCloud.com.example.other"], "notAuthenticated"),
        ]
        // Accept fetches first, as clients do: a sample of the cases shows it refuses the same way.
        for command in ["fetch", "accept"] {
            for (name, arguments, code) in command == "fetch" ? cases : [cases[0], cases[3], cases[6], cases[7]] {
                let result = try await runProduct("share-ledger", [command, "--path", path, "--json"] + arguments, input: Data())
                #expect(result.status == 1, "\(command) \(name): \(result.status) \(result.stdout) \(result.stderr)")
                let error = json(result.stdout)?["error"] as? [String: Any]
                #expect(error?["name"] as? String == code, "\(command) \(name): \(result.stdout.prefix(300))")
            }
        }
        // Bad options of the audit commands are refused by the parser (exit 64) before the ledger is opened.
        for arguments in [
            ["history", "--path", path, "--share", share.url.absoluteString, "--since", "yesterday"],
            ["access", "--path", path, "--share", share.url.absoluteString, "--at", "-1"],
            ["history", "--path", path, "--user", "_bob"],
            ["tasks", "retry", "--path", path, "--all", "7"],
            ["audit", "--path", path, "--expect-head", "12:nothex"],
        ] {
            let result = try await runProduct("share-ledger", arguments, input: Data())
            #expect(result.status == 64, "\(arguments[0]): \(result.status) \(result.stderr)")
        }
        let unknownShare = try await runProduct(
            "share-ledger", ["access", "--path", path, "--share", "https://share.localhost/share/0AAAAAAAAAAAAAAAAAAAAAAAAA", "--at", "5", "--json"], input: Data())
        #expect(unknownShare.status == 0 || unknownShare.status == 1, "\(unknownShare.stdout) \(unknownShare.stderr)")

        let ledger = try ShareLedger.open(ShareLedger.Configuration(path: path, createIfMissing: false, durability: .unsafeNoSync))
        let after = try ledger.statistics()
        // Only failed fetches were logged: no share, participant or record changed.
        #expect(after.shares == before.shares)
        #expect(after.participants == before.participants)
        #expect(after.records == before.records)
        #expect(try LedgerAudit(ledger).audit(scratchPath: f.dir.child("audit")).ok)
        await ledger.close()
    }

    @Test("hostile import files are refused at their first bad line, by the API and by the command (exit 1), and change nothing")
    func hostileImports() async throws {
        let (f, _) = try await SharingFixture.withShare(inviting: LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly)
        let good = try HostileStoredDataTests.export(f)
        let lines = good.split(separator: UInt8(ascii: "\n")).map(Array.init)
        #expect(lines.count > 5)
        func file(_ lines: [[UInt8]]) -> [UInt8] { lines.flatMap { $0 + [UInt8(ascii: "\n")] } }
        let text = String(decoding: lines[0], as: UTF8.self)
        let cases: [(String, [UInt8], Int)] = [
            ("a blank line", [UInt8(ascii: "\n")], 1),
            ("a byte-order mark", [0xEF, 0xBB, 0xBF] + good, 1),
            ("CRLF line ends", Array(String(decoding: good, as: UTF8.self).replacingOccurrences(of: "\n", with: "\r\n").utf8), 1),
            ("binary garbage", (0..<4_096).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 7) } + [10], 1),
            ("invalid UTF-8", [0xC3, 0x28, 0xFF, 0xFE, 10], 1),
            ("JSON null", Array("null\n".utf8), 1),
            ("a JSON array", Array("[]\n".utf8), 1),
            ("a line of 2 MB", Array(repeating: UInt8(ascii: " "), count: 2 << 20) + [10], 1),
            ("a position beyond UInt64", Array(text.replacingOccurrences(of: "\"position\":1,", with: "\"position\":1e30,").utf8) + [10], 1),
            ("a negative stream version", file([Array(text.replacingOccurrences(of: "\"streamVersion\":1,", with: "\"streamVersion\":-1,").utf8)]), 1),
            ("keys in another order", file([Array(text.replacingOccurrences(of: "{\"position\":1,\"recordedAtMicros\"", with: "{\"recordedAtMicros\"").replacingOccurrences(of: ",\"container\"", with: ",\"position\":1,\"container\"").utf8)]), 1),
            ("an extra key", file([Array(text.replacingOccurrences(of: "}", with: ",\"extra\":1}").utf8)]), 1),
            ("spaces after colons", file([Array(text.replacingOccurrences(of: "\":", with: "\": ").utf8)]), 1),
            ("a duplicated line", file([lines[0], lines[1], lines[1]] + lines[2...]), 3),
            ("the last two lines swapped", file(Array(lines.dropLast(2)) + [lines[lines.count - 1], lines[lines.count - 2]]), lines.count - 1),
            ("a line from the middle missing", file(Array(lines[..<3]) + lines[4...]), 4),
        ]
        let dir = TemporaryDirectory()
        var configuration = ShareLedger.Configuration(path: dir.child("target"), durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        let target = try ShareLedger.open(configuration)
        let empty = try target.snapshot()
        for (name, bytes, line) in cases {
            let error = await #expect(throws: LedgerError.self, "\(name)") {
                try await HostileStoredDataTests.importing(bytes, into: target, dir, "import.ndjson")
            }
            #expect(error?.code == .invalidArguments, "\(name): \(String(describing: error))")
            #expect(error?.message.hasPrefix("line \(line) ") == true, "\(name): \(error?.message.prefix(200) ?? "")")
            #expect(try target.snapshot() == empty, "\(name) changed the ledger")
        }
        // An empty file imports nothing, successfully.
        let none = try await HostileStoredDataTests.importing([], into: target, dir, "empty.ndjson")
        #expect(none.events == 0)
        #expect(try target.snapshot() == empty)
        await target.close()

        // The command: exit 1, the first bad line named, the ledger as it was.
        let path = dir.child("target")
        for (name, bytes, line) in cases.prefix(4) + cases.suffix(2) {
            let result = try await runProduct("share-ledger", ["import", "--path", path, "--json"], input: Data(bytes))
            #expect(result.status == 1, "\(name): \(result.stdout) \(result.stderr)")
            let error = json(result.stdout)?["error"] as? [String: Any]
            #expect((error?["message"] as? String)?.hasPrefix("line \(line) ") == true, "\(name): \(result.stdout.prefix(200))")
        }
        let reopened = try ShareLedger.open(configuration)
        #expect(try reopened.snapshot() == empty)
        // And the good file still imports.
        let summary = try await HostileStoredDataTests.importing(good, into: reopened, dir, "good.ndjson")
        #expect(summary.events == UInt64(lines.count))
        await reopened.close()
        await f.ledger.close()
    }

    @Test("a ledger opened read-only refuses every write with readOnly and still answers reads")
    func readOnlyLedger() async throws {
        let (f, share) = try await SharingFixture.withShare()
        await f.ledger.close()
        var configuration = ShareLedger.Configuration(path: f.dir.child("ledger"), createIfMissing: false, readOnly: true, durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        let before = try ledger.snapshot()
        let alice = ledger.container(SharingFixture.container, userRecordName: "_alice")
        let zone = SharingFixture.zone
        let writes: [(String, @Sendable () async throws -> Void)] = [
            ("registerUser", { try await ledger.registerUser("_erin", in: SharingFixture.container) }),
            ("save zone", { _ = try await alice.save(RecordZone(zoneID: RecordZoneID(zoneName: "New"))) }),
            ("save record", { _ = try await alice.save(Record(recordType: "T", recordID: RecordID(recordName: "n", zoneID: zone))) }),
            ("delete record", { try await alice.deleteRecord(withID: SharingFixture.recordID("item")) }),
            ("delete zone", { try await alice.deleteRecordZone(withID: zone) }),
            ("share", { _ = try await alice.share(recordZoneID: RecordZoneID(zoneName: "Other")) }),
            ("add participant", { _ = try await alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly, to: share.url) }),
            ("set title", { _ = try await alice.setTitle("t", for: share.url) }),
            ("delete share", { try await alice.deleteShare(share.url) }),
            ("fetch metadata", { _ = try await alice.shareMetadata(for: share.url) }),
            ("complete tasks", { try await ledger.completeResidualTasks() }),
            ("rebuild", { _ = try await LedgerAudit(ledger).rebuildReadModels() }),
            ("raw append", { try await ledger.log.append([Fixtures.draft("x")], to: "s", metadata: Fixtures.metadata()) }),
        ]
        for (name, write) in writes {
            let error = await #expect(throws: LedgerError.self, "\(name)") { try await write() }
            #expect(error?.code == .readOnly, "\(name): \(String(describing: error))")
            #expect(try ledger.snapshot() == before, "\(name)")
        }
        // Reads answer.
        #expect(try alice.share(for: share.url).title == "Groceries")
        #expect(try alice.shareMetadataWithoutLogging(for: share.url).participantRole == .owner)
        #expect(try LedgerAudit(ledger).audit(scratchPath: f.dir.child("audit")).ok)
        await ledger.close()
    }
}

/// Whether the tests may bind-mount a directory read-only (root with CAP_SYS_ADMIN): root ignores
/// file permissions, so a read-only file system is the only way to see a ledger it cannot write.
/// Whether this process may make a read-only bind mount (root with CAP_SYS_ADMIN): probed with a real one.
private func canMountReadOnly() async -> Bool {
    guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/mount") || FileManager.default.isExecutableFile(atPath: "/bin/mount")
    else { return false }
    let probe = TemporaryDirectory("probe")
    let target = probe.makeChild("ro")
    guard await runTool("mount", ["--bind", probe.makeChild("src"), target]) == 0 else { return false }
    let readOnly = await runTool("mount", ["-o", "remount,ro,bind", target]) == 0
    await runTool("umount", [target])
    return readOnly
}

@discardableResult
private func runTool(_ tool: String, _ arguments: [String]) async -> Int32 {
    guard let run = try? await runProcess(URL(fileURLWithPath: "/usr/bin/env"), [tool] + arguments) else { return -1 }
    return run.status
}

@Suite("Reading commands change nothing")
struct ReadingCommandTests {
    @Test("stats, verify, audit, history, access, export, tasks list and snapshot --list leave every file of the ledger as it was")
    func readingCommandsWriteNothing() async throws {
        let (f, share) = try await SharingFixture.withShare()
        try await f.bobAccepts(share)
        await f.ledger.close()
        let path = f.dir.child("ledger")
        let before = directoryListing(path)
        let commands: [[String]] = [
            ["stats"], ["verify"], ["audit"], ["tasks", "list"], ["history", "--share", share.url.absoluteString],
            ["access", "--share", share.url.absoluteString, "--at", "5"], ["export"], ["snapshot", "--list"],
        ]
        for command in commands {
            let result = try await runProduct("share-ledger", command + ["--path", path, "--json"], input: Data())
            #expect(result.status == 0, "\(command): \(result.status) \(result.stdout) \(result.stderr)")
            #expect(directoryListing(path) == before, "\(command) changed the ledger's files")
        }
    }
}

@Suite("Ledgers written by an earlier release")
struct EarlierReleaseTests {
    @Test("a ledger without a database a later release added: a read-only open says what to do; the reading commands open it for writing once, which adds it")
    func missingDatabase() async throws {
        let f = try await SharingFixture()
        _ = try await f.makeHierarchy()
        await f.ledger.close()
        let path = f.dir.child("ledger")
        // `checkpoints` arrived after the first releases, without a format change.
        do {
            let environment = try Environment(options: EnvironmentOptions(path: path, mapSize: 64 << 20, maxDatabases: 32))
            let checkpoints = try environment.openDatabases([("checkpoints", [])])[0]
            try environment.write { txn in try txn.dropDatabase(checkpoints) }
            #expect(try !environment.databaseNames().contains("checkpoints"))
            environment.close()
        }
        var configuration = Fixtures.configuration(path)
        configuration.readOnly = true
        let error = #expect(throws: LedgerError.self) { try EventLog.open(configuration.log) }
        #expect(error?.code == .readOnly)
        #expect(error?.message.contains("lacks the databases checkpoints") == true, "\(String(describing: error))")

        let stats = try await runProduct("share-ledger", ["stats", "--path", path, "--json"], input: Data())
        #expect(stats.status == 0, "\(stats.stdout) \(stats.stderr)")
        let log = try EventLog.open(configuration.log)
        #expect(try log.verifyChain().isValid)
        await log.close()
    }
}

@Suite("Hostile input: a ledger on a read-only file system")
struct ReadOnlyFileSystemTests {
    @Test("opening for writing fails with notALedger; a read-only open and every reading command answer, every writing command exits 2; nothing changes",
          .enabled { await canMountReadOnly() })
    func readOnlyMount() async throws {
        let dir = TemporaryDirectory()
        let source = dir.child("ledger")
        let demo = try await runProduct("share-ledger", ["demo", "--path", source, "--events", "20"], input: Data())
        #expect(demo.status == 0)
        let mounted = dir.makeChild("mounted")
        #expect(await runTool("mount", ["--bind", source, mounted]) == 0)
        // Unmounted when done, whatever happened (a defer cannot await).
        let checked: Result<Void, any Error>
        do {
            try await checkReadOnlyMount(source: source, mounted: mounted)
            checked = .success(())
        } catch {
            checked = .failure(error)
        }
        await runTool("umount", [mounted])
        try checked.get()
    }

    private func checkReadOnlyMount(source: String, mounted: String) async throws {
        #expect(await runTool("mount", ["-o", "remount,ro,bind", mounted]) == 0)
        let before = directoryListing(source)

        let writable = #expect(throws: LedgerError.self) { try EventLog.open(Fixtures.configuration(mounted).log) }
        var configuration = Fixtures.configuration(mounted)
        configuration.readOnly = true
        let readOnly: Result<UInt64, LedgerError>
        do throws(LedgerError) {
            let log = try EventLog.open(configuration.log)
            readOnly = .success(try log.head().position.rawValue)
            await log.close()
        } catch {
            readOnly = .failure(error)
        }
        // Read-only, the library opens it (LMDB reads the existing lock file) and answers.
        #expect(try readOnly.get() == 20)
        #expect(writable?.code == .notALedger)
        #expect(writable?.message.contains("not writable") == true)
        // The commands that only read open the ledger read-only: they answer from the mount.
        for command in [["stats"], ["verify"], ["audit"], ["tasks", "list"], ["history", "--container", "iCloud.com.example.demo"], ["export"], ["snapshot", "--list"]] {
            let result = try await runProduct("share-ledger", command + ["--path", mounted, "--json"], input: Data())
            #expect(result.status == 0, "\(command): \(result.status) \(result.stdout) \(result.stderr)")
        }
        let stats = try await runProduct("share-ledger", ["stats", "--path", mounted, "--json"], input: Data())
        #expect(stats.stdout.contains("\"events\" : 20"), "\(stats.stdout)")
        // The commands that write open it for writing: exit 2, notALedger, "not writable".
        for command in [["rebuild"], ["snapshot"], ["tasks", "retry", "--all"], ["worker", "--drain"]] {
            let result = try await runProduct("share-ledger", command + ["--path", mounted, "--json"], input: Data())
            #expect(result.status == 2, "\(command): \(result.status) \(result.stdout) \(result.stderr)")
            #expect(result.stdout.contains("not writable"), "\(command): \(result.stdout)")
        }
        let append = try await runProduct("share-ledger", ["demo", "--path", mounted, "--events", "5"], input: Data())
        #expect(append.status != 0)
        #expect(directoryListing(source) == before)
    }
}
