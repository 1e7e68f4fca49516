import Foundation
import ShareLedger
import ShareLedgerAudit
import ShareLedgerCrashHarness
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Starts `ShareLedgerCrashChild` with `arguments` and waits (on its output file, not the clock) until
/// it says "ready": its ledger is open. Its standard output and error are files in `dir`.
func startCrashChild(_ arguments: [String], in dir: TemporaryDirectory) async throws -> ChildProcess {
    let name = "crash-child-\(UUID().uuidString)"
    let outPath = dir.child(name + ".out")
    let child = try ChildProcess(
        builtProduct("ShareLedgerCrashChild"), arguments, stdout: outPath, stderr: dir.child(name + ".err"))
    func output() -> String { String(decoding: FileManager.default.contents(atPath: outPath) ?? Data(), as: UTF8.self) }
    try await waitUntil("the crash child is ready") { output().contains("ready") || !child.isRunning }
    if !output().contains("ready") {
        let stderr = String(decoding: FileManager.default.contents(atPath: dir.child(name + ".err")) ?? Data(), as: UTF8.self)
        throw WaitTimedOut(description: "the crash child ended before it was ready (\(child.termination?.summary ?? "?")): \(stderr)")
    }
    return child
}

@Suite("Crash safety")
struct CrashTests {
    @Test("a crash child whose parent is gone ends by itself (status 75) instead of appending forever")
    func childEndsWithItsParent() async throws {
        let dir = TemporaryDirectory()
        let pidFile = dir.child("child.pid")
        let outFile = dir.child("child.out")
        // A shell starts the child in the background, waits until its ledger is open, and exits:
        // the child, appending, loses its parent.
        let script = """
            "$0" "$1" "$2" 2 > "$3" 2>&1 & echo $! > "$4"
            i=0; while ! grep -q ready "$3" && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done
            """
        let shell = try ChildProcess(
            URL(fileURLWithPath: "/bin/sh"),
            ["-c", script,
             builtProduct("ShareLedgerCrashChild").path, dir.child("ledger"), dir.child("acks"), outFile, pidFile],
            stdout: dir.child("shell.out"), stderr: dir.child("shell.err"))
        #expect(await shell.exit().status == 0)
        let output = String(decoding: FileManager.default.contents(atPath: outFile) ?? Data(), as: UTF8.self)
        #expect(output.contains("ready"), "the child did not start: \(output)")
        let text = String(decoding: FileManager.default.contents(atPath: pidFile) ?? Data(), as: UTF8.self)
        let pid = try #require(Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)), "no pid in \(text)")
        /// Whether `pid` still runs (a zombie waiting for its new parent to reap it has ended).
        func running() -> Bool {
            guard let stat = FileManager.default.contents(atPath: "/proc/\(pid)/stat") else { return false }
            let line = String(decoding: stat, as: UTF8.self)
            guard let close = line.lastIndex(of: ")") else { return false }
            return !line[line.index(after: close)...].trimmingCharacters(in: .whitespaces).hasPrefix("Z")
        }
        try await waitUntil("the orphaned crash child ends", timeLimit: .seconds(60)) { !running() }
    }

    /// Starts the crash child, waits until it has acknowledged some appends, kills it with SIGKILL.
    private func runAndKill(ledger: String, acks: String, after milliseconds: Int, in dir: TemporaryDirectory) async throws {
        let child = try await startCrashChild([ledger, acks, "8"], in: dir)
        // The kill lands at a seeded moment of the run: the one sleep that is the point of the test.
        try await Task.sleep(for: .milliseconds(milliseconds))
        child.send(SIGKILL)
        let ended = await child.exit()
        #expect(ended.signaled && ended.status == SIGKILL, "\(ended.summary)")
    }

    @Test("appends acknowledged before SIGKILL are all there after reopening, once each", .timeLimit(.minutes(5)))
    func acknowledgedAppendsSurviveSIGKILL() async throws {
        let dir = TemporaryDirectory()
        let ledger = dir.child("ledger")
        let acks = dir.child("acks")
        var random = SplitMix64(state: 0x5EED)
        for _ in 0..<4 {
            try await runAndKill(ledger: ledger, acks: acks, after: Int.random(in: 80...400, using: &random), in: dir)
        }
        let lines = try String(contentsOfFile: acks, encoding: .utf8).split(separator: "\n")
        var acknowledged: [(UInt64, UUID)] = []
        for line in lines {
            let parts = line.split(separator: " ")
            // A line cut by the kill has no id; the append it reports was still acknowledged only
            // if the line was written whole, so skip partial lines.
            guard parts.count == 2, let position = UInt64(parts[0]), let id = UUID(uuidString: String(parts[1])) else {
                continue
            }
            acknowledged.append((position, id))
        }
        #expect(acknowledged.count > 50, "the child acknowledged \(acknowledged.count) appends")

        var configuration = Fixtures.configuration(ledger)
        configuration.createIfMissing = false
        let log = try EventLog.open(configuration.log)
        let verification = try log.verifyChain()
        #expect(verification.isValid, "\(verification.problem ?? "")")
        var occurrences: [UUID: Int] = [:]
        var after = LogPosition.start
        while true {
            let chunk = try log.events(after: after, limit: 4096)
            guard let last = chunk.last else { break }
            for event in chunk { occurrences[event.commandID, default: 0] += 1 }
            after = last.position
        }
        for (position, id) in acknowledged {
            #expect(try log.event(at: LogPosition(position))?.commandID == id, "acknowledged append at \(position)")
            #expect(occurrences[id] == 1)
        }
        #expect(Set(acknowledged.map(\.0)).count == acknowledged.count)
        // The ledger takes appends again after the crashes.
        let result = try await log.append([Fixtures.draft("after")], to: "s", metadata: Fixtures.metadata())
        #expect(result.positions.lowerBound.rawValue == verification.headPosition + 1)
        await log.close()
    }
}

@Suite("Crash safety: the mixed sharing workload")
struct MixedCrashTests {
    /// The kill count of the normal run; `scripts/soak` runs hundreds through the same driver.
    static let kills = 20

    /// Kills the mixed workload's child `kills` times, seeded with `seed`, and checks that every
    /// acknowledged command is there exactly once, each check passed, and that at least
    /// `acknowledgedPerKill` commands per kill were acknowledged (the kills landed while there was
    /// work to lose). Short runs and a fresh ledger every 4 kills keep each verification (a full
    /// audit) short. Returns the report.
    @discardableResult
    static func soak(
        kills: Int, seed: UInt64, runMilliseconds: ClosedRange<Int>, acknowledgedPerKill: Int,
        _ configure: (inout SoakDriver.Options) -> Void = { _ in }
    ) async -> SoakDriver.Report {
        let dir = TemporaryDirectory()
        var options = SoakDriver.Options(
            kills: kills, seed: seed, childExecutable: builtProduct("ShareLedgerCrashChild"), workDirectory: dir.path)
        options.killsPerLedger = 4
        options.runMilliseconds = runMilliseconds
        configure(&options)
        // The harness waits for its children with blocking calls: on threads of their own.
        let report = await withTaskExecutorPreference(BlockingWorkExecutor.shared) { [options] in await SoakDriver.run(options) }
        #expect(report.lost.isEmpty, "lost: \(report.lost.prefix(10))")
        #expect(report.duplicated.isEmpty, "duplicated: \(report.duplicated.prefix(10))")
        #expect(report.problems.isEmpty, "problems: \(report.problems.prefix(10))")
        #expect(report.killsSurvived == kills, "\(report.summaryLine)")
        #expect(report.acknowledged > kills * acknowledgedPerKill, "only \(report.acknowledged) acknowledged commands")
        return report
    }

    @Test(
        "SIGKILL at 20 seeded moments of a mixed sharing workload: every acknowledged command exactly once, the worker drains",
        .timeLimit(.minutes(5)))
    func mixedWorkloadSurvivesSIGKILL() async throws {
        // About 20 s for the 20 kills alone on the 2-core machine.
        let report = await Self.soak(kills: Self.kills, seed: 0xC0FFEE, runMilliseconds: 100...300, acknowledgedPerKill: 20)
        #expect(report.summaryLine == "kills survived: \(Self.kills), acknowledged commands lost: 0")
    }

    @Test(
        "SIGKILL while rebuilds rewrite the read models into their second copies and switch them in, under writes: every acknowledged command exactly once, the audit clean",
        .timeLimit(.minutes(5)))
    func rebuildSurvivesSIGKILL() async throws {
        await Self.soak(kills: 8, seed: 0x7E1B, runMilliseconds: 100...400, acknowledgedPerKill: 10) { $0.rebuilding = true }
    }

    @Test("the verifier reports an acknowledged command the ledger does not hold, and a cut side-file line")
    func verifierCatchesLostCommands() async throws {
        let dir = TemporaryDirectory()
        let path = dir.child("ledger")
        var configuration = ShareLedger.Configuration(path: path, durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        try await ledger.registerUser("_owner", in: CrashWorkload.container)
        _ = try await ledger.container(CrashWorkload.container, userRecordName: "_owner").save(
            RecordZone(zoneID: RecordZoneID(zoneName: CrashWorkload.zoneName)))
        await ledger.close()

        let acks = dir.child("acks")
        let writer = try AckLog.Writer(path: acks)
        writer.append(.register(user: "_owner"))
        writer.append(.zone(owner: "_owner"))
        writer.append(.register(user: "_ghost"))
        writer.append(.record(owner: "_owner", record: "missing"))
        // A line the kill cut: no newline.
        let handle = try #require(FileHandle(forWritingAtPath: acks))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data("accept https://x/share/abc _p".utf8))
        try handle.close()

        let contents = try AckLog.read(acks)
        #expect(contents.acks.count == 4)
        #expect(contents.cutLines == 1)
        #expect(contents.malformedLines.isEmpty)
        let result = await CrashVerifier.verify(ledgerPath: path, acks: contents.acks, scratchPath: dir.child("scratch"))
        #expect(result.acknowledged == 4)
        #expect(result.lost.count == 2, "\(result.lost)")
        #expect(result.lost.contains { $0.hasPrefix("register _ghost") })
        #expect(result.lost.contains { $0.hasPrefix("record _owner missing") })
        #expect(result.duplicated.isEmpty && result.problems.isEmpty, "\(result.duplicated) \(result.problems)")
    }
}

@Suite("Crash safety: import")
struct ImportCrashTests {
    /// An export of about 20,000 raw events (three import batches) with sharing events between them.
    static func export(_ f: SharingFixture) async throws -> String {
        _ = try await f.alice.save(RecordZone(zoneID: SharingFixture.zone))
        for round in 0..<12 {
            for half in 0..<2 {
                let drafts = (0..<800).map { Fixtures.draft("round \(round).\(half) event \($0)") }
                try await f.ledger.log.append(drafts, to: "bulk/\(round % 3)", metadata: Fixtures.metadata())
            }
            let record = SharingFixture.recordID("r\(round)")
            _ = try await f.alice.save(Record(recordType: "List", recordID: record, fields: ["n": .int64(Int64(round))]))
            let share = try await f.alice.share(rootRecord: record, title: "List \(round)")
            _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly, to: share.url)
            _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        }
        let path = f.dir.child("export.ndjson")
        try exportToFile(f.ledger, path)
        return path
    }

    @Test(
        "SIGKILL during an import at seeded moments: the read models always match the log, the rest imports after",
        .timeLimit(.minutes(5)))
    func importSurvivesSIGKILL() async throws {
        let f = try await SharingFixture()
        let file = try await Self.export(f)
        let events = try f.ledger.log.head().position.rawValue
        await f.ledger.close()
        var options = ImportCrash.Options(
            kills: 4, seed: 0x1A9, childExecutable: builtProduct("ShareLedgerCrashChild"), file: file,
            ledgerPath: f.dir.child("imported"))
        options.batches = 1...2
        // The harness waits for its children with blocking calls: on threads of their own.
        let report = await withTaskExecutorPreference(BlockingWorkExecutor.shared) { [options] in await ImportCrash.run(options) }
        #expect(report.problems.isEmpty, "\(report.problems.prefix(10))")
        #expect(report.killsSurvived == options.kills, "heads \(report.heads)")
        // The kills landed mid-import (between the first and the last batch), where a kill used to
        // leave the whole log with empty read models.
        #expect(report.killsMidImport >= 1, "heads \(report.heads)")
        #expect(report.complete && report.finalHead == events, "final head \(report.finalHead) of \(events)")
    }

    @Test("forget survives SIGKILL at any point: every forgotten user's key is gone after reopening, every other user's data still opens, the audit is clean", .timeLimit(.minutes(5)))
    func forgetSurvivesSIGKILL() async throws {
        let dir = TemporaryDirectory()
        let ledger = dir.child("ledger")
        let acks = dir.child("acks")
        let container = "iCloud.com.example.crash"
        var random = SplitMix64(state: 0xF06E7)
        for _ in 0..<4 {
            let child = try await startCrashChild(["--forget", ledger, acks, "4"], in: dir)
            // The kill lands at a seeded moment of the run: the one sleep that is the point of the test.
            try await Task.sleep(for: .milliseconds(Int.random(in: 80...400, using: &random)))
            child.send(SIGKILL)
            let ended = await child.exit()
            #expect(ended.signaled && ended.status == SIGKILL, "\(ended.summary)")
        }
        var registered: [String] = []
        var forgotten: Set<String> = []
        for line in try String(contentsOfFile: acks, encoding: .utf8).split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count == 2 else { continue }  // a line cut by the kill
            if parts[0] == "registered" { registered.append(String(parts[1])) }
            if parts[0] == "forgot" { forgotten.insert(String(parts[1])) }
        }
        #expect(registered.count > 8 && !forgotten.isEmpty, "\(registered.count) registered, \(forgotten.count) forgotten")

        var configuration = ShareLedger.Configuration(path: ledger, createIfMissing: false, durability: .durable)
        configuration.residualTaskWorker = nil
        let reopened = try ShareLedger.open(configuration)
        let keyStore = try #require(FileManager.default.contents(atPath: ledger + "/" + ShareLedger.keyStoreFileName))
        let viewer = reopened.container(container, userRecordName: registered[0])
        for name in registered {
            let history = try LedgerAudit(reopened).history(of: .user(name, container: container))
            let wasForgotten = history.contains { $0.name == "PersonalDataForgotten" }
            // Acknowledged forgets committed; unacknowledged ones may have too.
            if forgotten.contains(name) { #expect(wasForgotten, "\(name)") }
            // A person key's record: kind 2, the subject's length (2 bytes), the subject.
            let subjectBytes = Array((container + "\u{0}" + name).utf8)
            let subject = Data([2, UInt8(subjectBytes.count >> 8), UInt8(subjectBytes.count & 0xFF)] + subjectBytes)
            let identity = try viewer.userIdentity(forEmailAddress: forgetCrashEmail(name))
            if wasForgotten {
                #expect(keyStore.range(of: subject) == nil, "\(name)'s key survived its forget")
                #expect(identity == nil)
            } else {
                // Its key was stored before its registration committed.
                #expect(identity?.nameComponents?.givenName?.hasPrefix("Given") == true, "\(name) does not open")
            }
        }
        let report = try LedgerAudit(reopened).audit(scratchPath: dir.child("audit"))
        #expect(report.ok, "\(report.problems)")
        #expect(try reopened.log.verifyChain().isValid)
        await reopened.close()
    }
}

/// The email the forget crash child registers `name` with (ShareLedgerCrashChild/ForgetChild.swift).
private func forgetCrashEmail(_ name: String) -> String { "\(name.dropFirst())@forget.example" }
