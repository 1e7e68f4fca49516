import Foundation
import ShareLedgerTestSupport
import ShareLedger

#if canImport(Glibc)
import Glibc
#endif

/// Runs the crash child, kills it with SIGKILL at a seeded random moment, verifies the ledger, and
/// again, `kills` times. Used by `CrashTests` (20 kills) and by `scripts/soak` (through
/// `ShareLedgerCrashChild --soak-driver`, hundreds of kills).
///
/// A ledger takes ``Options/killsPerLedger`` kills in a row (each child reopens what the last one
/// left, crash after crash), then the next kill starts a fresh ledger, so that each verification
/// (a full audit with a rebuild) stays short. Each child run gets its own side file, so a line cut
/// by one kill cannot run into the next child's first line. The durability mode of each run is
/// drawn from the seed too: no mode may lose an acknowledged command to a process crash.
public enum SoakDriver {
    public struct Options: Sendable {
        /// How many times to kill the child.
        public var kills: Int
        /// The seed of the kill moments and durability modes.
        public var seed: UInt64
        /// The crash child executable (`ShareLedgerCrashChild`).
        public var childExecutable: URL
        /// Where the ledgers and side files go (must exist).
        public var workDirectory: String
        /// Concurrent clients in the child.
        public var clients = 6
        /// How long the child runs after it is ready, before the kill, in milliseconds.
        public var runMilliseconds: ClosedRange<Int> = 100...400
        /// Kills one ledger takes before the next kill starts a fresh ledger.
        public var killsPerLedger = 5
        /// Whether the child also rebuilds the read models over and over, rewriting them into their
        /// second copies and switching them in, while its clients write.
        public var rebuilding = false
        /// Called with a line per kill (for the soak's progress output).
        public var progress: (@Sendable (String) -> Void)?

        public init(kills: Int, seed: UInt64, childExecutable: URL, workDirectory: String) {
            self.kills = kills
            self.seed = seed
            self.childExecutable = childExecutable
            self.workDirectory = workDirectory
        }
    }

    public struct Report: Sendable {
        /// Kills after which every check passed.
        public var killsSurvived = 0
        /// Kills done.
        public var kills = 0
        /// Acknowledged commands (whole lines in the side files).
        public var acknowledged = 0
        /// Acknowledged commands whose effect was missing after a kill (each counted once).
        public var lost: [String] = []
        /// Commands found more than once.
        public var duplicated: [String] = []
        /// Everything else that went wrong.
        public var problems: [String] = []
        /// Lines the kills cut in the side files (not acknowledged; expected now and then).
        public var cutLines = 0
        /// Residual tasks the kills left pending, completed by the verifier.
        public var tasksDrained = 0
        /// Events in the ledgers at the end.
        public var events: UInt64 = 0
        /// Ledgers used.
        public var ledgers = 0
        /// Wall time.
        public var elapsed: Duration = .zero

        public var isClean: Bool { lost.isEmpty && duplicated.isEmpty && problems.isEmpty }

        /// `kills survived: N, acknowledged commands lost: L` (what `scripts/soak` prints last).
        public var summaryLine: String { "kills survived: \(killsSurvived), acknowledged commands lost: \(lost.count)" }
    }

    public static func run(_ options: Options) async -> Report {
        let started = ContinuousClock.now
        // Seeded (ShareLedgerTestSupport's SplitMix64): the same seed gives the same kill moments and modes.
        var random = SplitMix64(state: options.seed)
        var report = Report()
        var ledgerAcks: [Ack] = []
        let modes: [Durability] = [.durable, .relaxed, .unsafeNoSync]
        for kill in 0..<options.kills {
            let ledgerIndex = kill / max(1, options.killsPerLedger)
            let isLastOfLedger = (kill + 1) % max(1, options.killsPerLedger) == 0 || kill + 1 == options.kills
            if kill % max(1, options.killsPerLedger) == 0 {
                ledgerAcks = []
                report.ledgers += 1
            }
            let ledgerPath = options.workDirectory + "/ledger-\(ledgerIndex)"
            let ackPath = options.workDirectory + "/acks-\(kill)"
            let delay = Int.random(in: options.runMilliseconds, using: &random)
            let mode = modes[Int.random(in: 0..<modes.count, using: &random)]
            var problems: [String] = []
            do {
                try await runAndKill(
                    options.childExecutable,
                    ["--mix", ledgerPath, ackPath, String(options.clients), mode.rawValue, "k\(kill)"]
                        + (options.rebuilding ? ["rebuild"] : []), after: delay)
            } catch {
                problems.append("kill \(kill): \(error)")
            }
            var contents = AckLog.Contents()
            do {
                contents = try AckLog.read(ackPath)
            } catch {
                problems.append("kill \(kill): cannot read the side file: \(error)")
            }
            problems += contents.malformedLines.map { "kill \(kill): malformed acknowledgement line \"\($0)\"" }
            report.cutLines += contents.cutLines
            report.acknowledged += contents.acks.count
            ledgerAcks += contents.acks
            let verifyStarted = ContinuousClock.now
            let result = await CrashVerifier.verify(
                ledgerPath: ledgerPath, acks: ledgerAcks, scratchPath: options.workDirectory + "/scratch",
                auditAfterDrain: isLastOfLedger)
            // An ack lost after one kill stays lost after the next; count each once.
            let knownLost = Set(report.lost)
            report.lost += result.lost.filter { !knownLost.contains($0) }
            let knownDuplicated = Set(report.duplicated)
            report.duplicated += result.duplicated.filter { !knownDuplicated.contains($0) }
            problems += result.problems.map { "kill \(kill): \($0)" }
            report.problems += problems
            report.tasksDrained += result.tasksDrained
            report.kills += 1
            if result.isClean && problems.isEmpty { report.killsSurvived += 1 }
            if isLastOfLedger {
                report.events += result.events
                try? FileManager.default.removeItem(atPath: ledgerPath)
            }
            options.progress?(
                "kill \(kill + 1)/\(options.kills): ledger \(ledgerIndex), \(mode.rawValue), after \(delay) ms: "
                    + "\(contents.acks.count) acknowledged (\(ledgerAcks.count) on this ledger), "
                    + "\(result.tasksDrained) tasks left pending, \(result.events) events, verified in "
                    + "\((ContinuousClock.now - verifyStarted).components.seconds * 1_000 + (ContinuousClock.now - verifyStarted).components.attoseconds / 1_000_000_000_000_000) ms; "
                    + (result.isClean && problems.isEmpty
                        ? "ok" : "\(result.lost.count) lost, \(result.duplicated.count) duplicated, \(problems.count) problems"))
        }
        report.elapsed = ContinuousClock.now - started
        return report
    }

    struct ChildFailure: Error, CustomStringConvertible {
        var description: String
    }

    /// Starts the child, waits for "ready" (the ledger is open), lets it run, kills it with SIGKILL.
    static func runAndKill(_ executable: URL, _ arguments: [String], after milliseconds: Int) async throws {
        let out = Pipe()
        let child = try Spawned(
            executable.path, arguments, stdout: out.fileHandleForWriting.fileDescriptor, stderr: FileHandle.standardError.fileDescriptor)
        try? out.fileHandleForWriting.close()
        var seen = Data()
        while !String(decoding: seen, as: UTF8.self).contains("ready") {
            let data = out.fileHandleForReading.availableData
            if data.isEmpty { break }  // end of file: the child exited
            seen.append(data)
        }
        guard String(decoding: seen, as: UTF8.self).contains("ready") else {
            let (status, _) = child.wait()
            throw ChildFailure(description: "the child exited with status \(status) before it was ready")
        }
        try await Task.sleep(for: .milliseconds(milliseconds))
        // Not reaped yet either way: a kill of a child that already exited is a no-op on a zombie.
        kill(child.pid, SIGKILL)
        let (status, signaled) = child.wait()
        guard signaled, status == SIGKILL else {
            throw ChildFailure(
                description: "the child ended by itself (status \(status)) before the kill; see its standard error")
        }
        try? out.fileHandleForReading.close()
    }
}
