import Foundation
import LMDB
@testable import ShareLedger
import TestSupport
import Testing

/// What the command line does with nothing to check, a damaged `data.mdb` and a 0-byte one: an
/// answer and an exit code, never a crash, and nothing changed.
@Suite("Damaged ledgers: the share-ledger command")
struct DamagedLedgerCLITests {
    /// A small sharing ledger made by `simulate` (a few hundred events over many B-tree pages).
    static func simulatedLedger(_ dir: TemporaryDirectory) async throws -> String {
        let path = dir.child("source")
        let run = try await runCLI([
            "simulate", "--path", path, "--actions", "400", "--users", "30", "--clients", "2", "--seed", "5",
            "--durability", "unsafeNoSync",
        ])
        #expect(run.exited(0), "\(run.summary)")
        return path
    }

    /// A copy of `source` at `name` without its lock file: `data.mdb` and the key store its sealed
    /// events need.
    static func copy(_ source: String, to path: String) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: source + "/data.mdb", toPath: path + "/data.mdb")
        try copyKeyStore(source, to: path)
    }

    static func copyKeyStore(_ source: String, to path: String) throws {
        let name = "/" + ShareLedger.keyStoreFileName
        try FileManager.default.copyItem(atPath: source + name, toPath: path + name)
    }

    @Test("verify and audit answer when there is nothing to check: 0 events, and right after a checkpoint of the head")
    func nothingToCheck() async throws {
        let dir = TemporaryDirectory()
        let empty = dir.child("empty")
        let imported = try await runCLI(["import", "--path", empty])
        #expect(imported.exited(0), "\(imported.summary)")
        for command in ["verify", "audit"] {
            let run = try await runCLI([command, "--path", empty, "--json"])
            #expect(run.exited(0), "\(command) \(run.summary)")
            let report = try #require(jsonObject(run.stdout), "\(command) \(run.summary)")
            #expect(report["ok"] as? Bool == true)
            #expect(report["events"] as? Int == 0)
        }

        let path = dir.child("ledger")
        let ledger = try ShareLedger.open(Fixtures.configuration(path))
        for index in 0..<3 { try await ledger.log.append([Fixtures.draft("event \(index)")], to: "s", metadata: Fixtures.metadata()) }
        // The library: a chain check that starts at the head checks nothing, and holds.
        let atHead = try ledger.log.verifyChain(after: 3)
        #expect(atHead.isValid && atHead.eventsChecked == 0)
        await ledger.close()

        let key = dir.child("signer")
        #expect(try await runCLI(["keygen", "--out", key]).exited(0))
        let signed = try await runCLI(["checkpoint", "--path", path, "--signing-key", key + ".key"])
        #expect(signed.exited(0), "\(signed.summary)")
        let audit = try await runCLI(["audit", "--path", path, "--trusted-key", key + ".pub", "--from-checkpoint", "--json"])
        #expect(audit.exited(0), "\(audit.summary)")
        #expect(jsonObject(audit.stdout)?["ok"] as? Bool == true, "\(audit.summary)")
    }

    @Test("a data.mdb cut to half its size: every command exits 2 with corruptedData naming the file, none crashes")
    func cutDataFile() async throws {
        let dir = TemporaryDirectory()
        let source = try await Self.simulatedLedger(dir)
        let path = dir.child("cut")
        try Self.copy(source, to: path)
        let size = try #require(try FileManager.default.attributesOfItem(atPath: path + "/data.mdb")[.size] as? Int)
        #expect(truncate(path + "/data.mdb", off_t(size / 2)) == 0)
        for command in HostileCLITests.commands(path) {
            let run = try await runCLI(command)
            #expect(run.exited(2), "\(command): \(run.summary)")
            #expect(run.stderr.contains("corruptedData") && run.stderr.contains(path + "/data.mdb"), "\(command): \(run.summary)")
        }
        // With --json the error is JSON on standard output.
        let json = try await runCLI(["audit", "--path", path, "--json"])
        #expect(json.exited(2))
        let error = try #require(jsonObject(json.stdout)?["error"] as? [String: Any], "\(json.summary)")
        #expect(error["name"] as? String == "corruptedData")
    }

    /// The typed answers (exit 2) a damaged `data.mdb` may get, by where the damage lands: a bad page
    /// or record (corruptedData), a file that is no longer LMDB (notALedger), a hit on the format-version
    /// record (formatTooNew), an error LMDB itself reports (storageFailure). Anything else is a failure.
    static let damagedFileAnswers: Set<String> = ["corruptedData", "notALedger", "formatTooNew", "storageFailure"]

    /// The error code a failed command named at the end of its standard error ("... (code)"), if any.
    static func typedAnswer(_ stderr: String) -> String? {
        let line = stderr.split(separator: "\n").last { $0.hasPrefix("share-ledger: ") }
        guard let line, line.hasSuffix(")"), let open = line.lastIndex(of: "(") else { return nil }
        return String(line[line.index(after: open)..<line.index(before: line.endIndex)])
    }

    @Test("random (seeded) bit flips in data.mdb: audit answers 0, 1 or 2 with a typed error, never a crash")
    func flippedBits() async throws {
        let dir = TemporaryDirectory()
        let source = try await Self.simulatedLedger(dir)
        let original = try #require(FileManager.default.contents(atPath: source + "/data.mdb"))
        var random = SplitMix64(state: 0xF11B)
        var outcomes: [Int32: Int] = [:]
        for trial in 0..<12 {
            let path = dir.child("flipped-\(trial)")
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            var bytes = [UInt8](original)
            // Past the two meta pages: the B-tree pages liblmdb walks without checking.
            for _ in 0..<64 { bytes[Int.random(in: 8192..<bytes.count, using: &random)] ^= UInt8(1) << UInt8.random(in: 0..<8, using: &random) }
            #expect(FileManager.default.createFile(atPath: path + "/data.mdb", contents: Data(bytes)))
            try Self.copyKeyStore(source, to: path)
            let run = try await runCLI(["audit", "--path", path])
            #expect(!run.signaled, "trial \(trial): \(run.summary)")
            #expect([0, 1, 2].contains(run.status), "trial \(trial): \(run.summary)")
            if run.exited(2) {
                let answer = Self.typedAnswer(run.stderr)
                #expect(answer.map(Self.damagedFileAnswers.contains) == true, "trial \(trial): untyped or unexpected answer: \(run.summary)")
            }
            outcomes[run.status, default: 0] += 1
        }
        #expect(outcomes.values.reduce(0, +) == 12, "\(outcomes)")
    }

    /// A copy of `source` (its `data.mdb` and key store, and `derived` as its `derived/data.mdb`)
    /// without lock files.
    static func copy(_ source: String, to path: String, derived: Data) throws {
        try copy(source, to: path)
        try FileManager.default.createDirectory(atPath: path + "/derived", withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: path + "/derived/data.mdb", contents: derived))
    }

    @Test("a damaged derived/ (0 bytes, cut, not LMDB): a read-only open names derived/ as a cache and never advises a restore; a write, or a reading command on a writable directory, recreates it from the log")
    func damagedDerived() async throws {
        let dir = TemporaryDirectory()
        let source = try await Self.simulatedLedger(dir)
        let original = try #require(FileManager.default.contents(atPath: source + "/derived/data.mdb"))
        let good = try await runCLI(["audit", "--path", source, "--json"])
        #expect(good.exited(0), "\(good.summary)")
        let head = try #require(jsonObject(good.stdout)?["headHash"] as? String)
        for (name, damaged) in [
            ("empty", Data()), ("cut", original.prefix(8192)), ("garbage", Data(repeating: 0x5A, count: original.count)),
        ] {
            let path = dir.child(name)
            try Self.copy(source, to: path, derived: damaged)
            // Read-only (what a read-only mount gets): `readOnly`, naming derived/ as the cache it is.
            var configuration = ShareLedger.Configuration(path: path, createIfMissing: false, readOnly: true)
            configuration.residualTaskWorker = nil
            let error = #expect(throws: LedgerError.self) { try ShareLedger.open(configuration) }
            #expect(error?.code == .readOnly, "\(name): \(String(describing: error))")
            let message = error?.message ?? ""
            #expect(message.contains("derived/") && message.contains("cache"), "\(name): \(message)")
            #expect(!message.contains("restore"), "\(name): \(message)")
            // The reading commands open a writable directory for writing once, which derives it again.
            let stats = try await runCLI(["stats", "--path", path, "--json"])
            #expect(stats.exited(0), "\(name): \(stats.summary)")
            #expect(jsonObject(stats.stdout)?["headHash"] as? String == head, "\(name): \(stats.summary)")
            let audit = try await runCLI(["audit", "--path", path, "--json"])
            #expect(audit.exited(0), "\(name): \(audit.summary)")
            #expect(jsonObject(audit.stdout)?["headHash"] as? String == head, "\(name): \(audit.summary)")
        }
        // A write (here `rebuild`) does the same.
        let path = dir.child("rebuilt")
        try Self.copy(source, to: path, derived: Data())
        let rebuilt = try await runCLI(["rebuild", "--path", path])
        #expect(rebuilt.exited(0), "\(rebuilt.summary)")
        let audit = try await runCLI(["audit", "--path", path, "--json"])
        #expect(audit.exited(0), "\(audit.summary)")
    }

    @Test("random (seeded) bit flips in derived/data.mdb: audit answers 0, 1 or 2, never a crash, and an error names derived/")
    func flippedBitsInDerived() async throws {
        let dir = TemporaryDirectory()
        let source = try await Self.simulatedLedger(dir)
        let original = try #require(FileManager.default.contents(atPath: source + "/derived/data.mdb"))
        var random = SplitMix64(state: 0xDE41)
        for trial in 0..<6 {
            let path = dir.child("flipped-\(trial)")
            var bytes = [UInt8](original)
            for _ in 0..<64 { bytes[Int.random(in: 8192..<bytes.count, using: &random)] ^= UInt8(1) << UInt8.random(in: 0..<8, using: &random) }
            try Self.copy(source, to: path, derived: Data(bytes))
            let run = try await runCLI(["audit", "--path", path])
            #expect(!run.signaled, "trial \(trial): \(run.summary)")
            #expect([0, 1, 2].contains(run.status), "trial \(trial): \(run.summary)")
            if run.exited(2) {
                #expect(run.stderr.contains("derived/"), "trial \(trial): the error does not name derived/: \(run.summary)")
            }
        }
    }

    @Test(
        "a key store cut to half, by 1 or 100 bytes, emptied or deleted under a log that needs it: every command, writing ones included, exits 2 with corruptedData naming it and saying to restore it; it stays as it was")
    func damagedKeyStore() async throws {
        let dir = TemporaryDirectory()
        let source = try await Self.simulatedLedger(dir)
        let good = try #require(FileManager.default.contents(atPath: source + "/" + ShareLedger.keyStoreFileName))
        let damages: [(what: String, bytes: Data?)] = [
            ("half", good.prefix(good.count / 2)), ("1 byte less", good.prefix(good.count - 1)),
            ("100 bytes less", good.prefix(good.count - 100)), ("empty", Data()), ("deleted", nil),
        ]
        for (what, bytes) in damages {
            let path = dir.child("keys-\(what.replacingOccurrences(of: " ", with: "-"))")
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: source + "/data.mdb", toPath: path + "/data.mdb")
            let keys = path + "/" + ShareLedger.keyStoreFileName
            if let bytes { #expect(FileManager.default.createFile(atPath: keys, contents: bytes)) }
            for command in [["stats", "--path", path], ["audit", "--path", path], ["export", "--path", path]]
                + HostileCLITests.commands(path).suffix(4)
            {
                let run = try await runCLI(command)
                #expect(run.exited(2), "\(what): \(command): \(run.summary)")
                #expect(
                    run.stderr.contains("corruptedData") && run.stderr.contains(ShareLedger.keyStoreFileName)
                        && run.stderr.contains("restore it from its backup"), "\(what): \(command): \(run.summary)")
                #expect(FileManager.default.contents(atPath: keys) == bytes, "\(what): \(command) changed the key store")
            }
        }
    }

    @Test("a 0-byte data.mdb: every command, writing ones included, exits 2 with corruptedData and changes nothing")
    func emptyDataFile() async throws {
        let dir = TemporaryDirectory()
        let path = dir.makeChild("ledger")
        #expect(FileManager.default.createFile(atPath: path + "/data.mdb", contents: Data()))
        let before = directoryListing(path)
        for command in HostileCLITests.commands(path) + [["snapshot", "--path", path], ["import", "--path", path]] {
            let run = try await runCLI(command)
            #expect(run.exited(2), "\(command): \(run.summary)")
            #expect(run.stderr.contains("corruptedData") && run.stderr.contains("0 bytes"), "\(command): \(run.summary)")
            #expect(directoryListing(path) == before, "\(command) changed the directory")
        }
        // The library says the same.
        let error = #expect(throws: LedgerError.self) { try EventLog.open(Fixtures.configuration(path).log) }
        #expect(error?.code == .corruptedData)
        #expect(directoryListing(path) == before)
    }

    @Test("the library refuses a data.mdb whose root pages lie beyond its end (a cut file) before mapping it")
    func rootBeyondEnd() async throws {
        let dir = TemporaryDirectory()
        let path = dir.child("ledger")
        let log = try EventLog.open(Fixtures.configuration(path).log)
        for index in 0..<200 { try await log.append([Fixtures.draft(String(repeating: "x", count: 500) + "\(index)")], to: "s", metadata: Fixtures.metadata()) }
        await log.close()
        // Two meta pages and one byte: every root page is beyond the end.
        #expect(truncate(path + "/data.mdb", off_t(2 * 4096 + 1)) == 0)
        try? FileManager.default.removeItem(atPath: path + "/lock.mdb")
        for readOnly in [false, true] {
            var configuration = Fixtures.configuration(path)
            configuration.readOnly = readOnly
            let error = #expect(throws: LedgerError.self) { try EventLog.open(configuration.log) }
            #expect(error?.code == .corruptedData)
            #expect(error?.message.contains("beyond its end") == true, "\(String(describing: error))")
            #expect(error?.message.contains(path + "/data.mdb") == true)
        }
    }

    @Test("a refused import into a new directory leaves no empty ledger behind")
    func refusedImportLeavesNothing() async throws {
        let dir = TemporaryDirectory()
        let path = dir.child("new")
        let run = try await runCLI(["import", "--path", path], input: Data("{\"position\":1}\n".utf8))
        #expect(run.exited(1), "\(run.summary)")
        #expect(!FileManager.default.fileExists(atPath: path))
        // Into an existing empty directory: the directory stays, empty.
        let existing = dir.makeChild("existing")
        #expect(try await runCLI(["import", "--path", existing], input: Data("nope\n".utf8)).exited(1))
        #expect(try FileManager.default.contentsOfDirectory(atPath: existing).isEmpty)
    }
}
