import Foundation
import ShareLedgerTestSupport
import ShareLedger
import ShareLedgerAudit

#if canImport(Glibc)
import Glibc
#endif

/// The crash harness for `import`: a child imports an NDJSON export into a ledger and is killed
/// with SIGKILL after a seeded number of committed batches (plus a seeded delay); after each kill
/// the ledger must audit clean (the chain, the records, every read model against a rebuild) and
/// hold a prefix of the file; the next child imports the rest (what `export --since HEAD` gives),
/// and the last one runs to the end.
public enum ImportCrash {
    /// The child's side: imports the lines of `file` after the ledger's head into the ledger at
    /// `ledgerPath` (created when missing), printing `ready` first and `batch N` after each commit,
    /// then waiting for a byte on standard input (or its end) before the next batch, so that the
    /// harness can kill it between two commits by state, not by time.
    public static func runChild(ledgerPath: String, file: String) async -> Int32 {
        var configuration = ShareLedger.Configuration(path: ledgerPath, durability: .durable)
        configuration.residualTaskWorker = nil
        do {
            let ledger = try ShareLedger.open(configuration)
            let head = try ledger.log.head().position.rawValue
            let rest = try rest(of: file, after: head, scratch: ledgerPath + ".rest-\(getpid())")
            defer { try? FileManager.default.removeItem(atPath: rest) }
            guard let handle = FileHandle(forReadingAtPath: rest) else { return 66 }
            FileHandle.standardOutput.write(Data("ready\n".utf8))
            _ = try await LedgerAudit(ledger).importLog(from: handle) { done, _ in
                FileHandle.standardOutput.write(Data("batch \(done)\n".utf8))
                var go: UInt8 = 0
                while read(STDIN_FILENO, &go, 1) < 0 && errno == EINTR {}
            }
            await ledger.close()
            return 0
        } catch {
            FileHandle.standardError.write(Data("import child: \(error)\n".utf8))
            return 70
        }
    }

    /// The lines of `file` after the first `head`, written to `scratch`; returns `scratch`.
    static func rest(of file: String, after head: UInt64, scratch: String) throws -> String {
        let bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        var skipped: UInt64 = 0
        var start = bytes.startIndex
        while skipped < head, let newline = bytes[start...].firstIndex(of: UInt8(ascii: "\n")) {
            start = newline + 1
            skipped += 1
        }
        try bytes[start...].write(to: URL(fileURLWithPath: scratch))
        return scratch
    }

    public struct Options: Sendable {
        /// Kills before the last, uninterrupted run.
        public var kills: Int
        public var seed: UInt64
        /// `ShareLedgerCrashChild`.
        public var childExecutable: URL
        /// The NDJSON export to import.
        public var file: String
        /// The ledger to import into (created by the first child).
        public var ledgerPath: String
        /// Committed batches before the kill (0: a seeded delay after `ready`, while the lines are checked).
        public var batches: ClosedRange<Int> = 0...2
        /// The delay after `ready` when the kill comes before the first batch, in milliseconds.
        public var delayMilliseconds: ClosedRange<Int> = 0...40

        public init(kills: Int, seed: UInt64, childExecutable: URL, file: String, ledgerPath: String) {
            self.kills = kills
            self.seed = seed
            self.childExecutable = childExecutable
            self.file = file
            self.ledgerPath = ledgerPath
        }
    }

    public struct Report: Sendable {
        /// Kills after which the ledger audited clean and held a prefix of the file.
        public var killsSurvived = 0
        /// Heads after each kill.
        public var heads: [UInt64] = []
        /// Kills that landed after at least one batch had committed and before the last.
        public var killsMidImport = 0
        /// What was wrong.
        public var problems: [String] = []
        /// The final head and whether it is the file's last line.
        public var finalHead: UInt64 = 0
        public var complete = false
    }

    /// Runs the kills, then the last child, verifying after each.
    public static func run(_ options: Options) async -> Report {
        var report = Report()
        var random = SplitMix64(state: options.seed)
        let hashes = lineHashes(options.file)
        for kill in 0..<options.kills {
            let batches = Int.random(in: options.batches, using: &random)
            let delay = Int.random(in: options.delayMilliseconds, using: &random)
            let outcome = runChild(options, killAfterBatches: batches, delayMilliseconds: delay)
            if let problem = outcome.problem { report.problems.append("kill \(kill): \(problem)") }
            let check = await verify(options.ledgerPath, hashes: hashes)
            report.heads.append(check.head)
            if check.head > 0 && check.head < UInt64(hashes.count) { report.killsMidImport += 1 }
            if check.problems.isEmpty { report.killsSurvived += 1 }
            report.problems += check.problems.map { "kill \(kill) (\(batches) batches + \(delay) ms, head \(check.head)): \($0)" }
        }
        let last = runChild(options, killAfterBatches: nil, delayMilliseconds: 0)
        if let problem = last.problem { report.problems.append("last run: \(problem)") }
        let check = await verify(options.ledgerPath, hashes: hashes)
        report.problems += check.problems.map { "after the last run: \($0)" }
        report.finalHead = check.head
        report.complete = check.head == UInt64(hashes.count)
        return report
    }

    /// Starts the child; kills it after `killAfterBatches` batch lines and the delay (nil: lets it finish).
    private static func runChild(_ options: Options, killAfterBatches: Int?, delayMilliseconds: Int) -> (killed: Bool, problem: String?) {
        let out = Pipe()
        let input = Pipe()
        let child: Spawned
        do {
            child = try Spawned(
                options.childExecutable.path, ["--import", options.ledgerPath, options.file],
                stdin: input.fileHandleForReading.fileDescriptor, stdout: out.fileHandleForWriting.fileDescriptor,
                stderr: FileHandle.standardError.fileDescriptor)
        } catch {
            return (false, "the child did not start: \(error)")
        }
        try? out.fileHandleForWriting.close()
        try? input.fileHandleForReading.close()
        var text = ""
        var killed = false
        if let killAfterBatches {
            // Wait by state: "ready", then each committed batch, which waits for a go before the next.
            var released = 0
            while true {
                let data = out.fileHandleForReading.availableData
                if data.isEmpty { break }  // the child ended
                text += String(decoding: data, as: UTF8.self)
                let lines = text.split(separator: "\n")
                guard lines.contains("ready") else { continue }
                let batches = lines.filter { $0.hasPrefix("batch ") }.count
                if batches >= killAfterBatches { break }
                while released < batches {
                    input.fileHandleForWriting.write(Data("g".utf8))
                    released += 1
                }
            }
            if killAfterBatches == 0 { usleep(useconds_t(delayMilliseconds * 1_000)) }
            killed = kill(child.pid, SIGKILL) == 0
        } else {
            try? input.fileHandleForWriting.close()
            _ = out.fileHandleForReading.readDataToEndOfFile()
        }
        let (status, signaled) = child.wait()
        try? out.fileHandleForReading.close()
        try? input.fileHandleForWriting.close()
        if killAfterBatches == nil && (status != 0 || signaled) {
            return (false, "the child exited with \(signaled ? "signal" : "status") \(status)")
        }
        return (killed, nil)
    }

    /// Each line's hash, by position - 1.
    static func lineHashes(_ file: String) -> [String] {
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").map { line in
            guard let range = line.range(of: "\"hash\":\"") else { return "" }
            return String(line[range.upperBound...].prefix(64))
        }
    }

    /// Reopens, audits, and checks that the head is one of the file's lines.
    static func verify(_ ledgerPath: String, hashes: [String]) async -> (head: UInt64, problems: [String]) {
        var problems: [String] = []
        var configuration = ShareLedger.Configuration(path: ledgerPath, createIfMissing: false, durability: .durable)
        configuration.residualTaskWorker = nil
        guard FileManager.default.fileExists(atPath: ledgerPath + "/data.mdb") else { return (0, []) }
        do {
            let ledger = try ShareLedger.open(configuration)
            let head = try ledger.log.head()
            let report = try LedgerAudit(ledger).audit(scratchPath: ledgerPath + ".audit")
            if !report.ok { problems += report.problems.prefix(5).map { "audit: \($0)" } }
            let position = Int(head.position.rawValue)
            if position > hashes.count || (position > 0 && hashes[position - 1] != head.hash.hex) {
                problems.append("the head \(position) \(head.hash.hex) is not a line of the file")
            }
            await ledger.close()
            return (head.position.rawValue, problems)
        } catch {
            return (0, ["reopening failed: \(error)"])
        }
    }
}
