import ArgumentParser
import ShareLedger

/// `share-ledger verify`: checks the hash chain from the first event to the head.
struct VerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Verify the hash chain of the whole log.",
        discussion: "Exit 0 when the chain holds, 1 with the first bad position when it does not, 2 when the ledger cannot be read.")

    @OptionGroup var ledger: LedgerOptions

    @Option(help: "Threads that hash the events, chunk by chunk (default: one per core; 1 checks in one pass).")
    var threads: Int?

    /// What a chain cannot show without an anchor, said with every answer.
    static let anchorNote =
        "a chain cannot show a removed tail: only a signed checkpoint (`audit --trusted-key`) or a head pinned "
        + "elsewhere (`audit --expect-head POS:HASH`) can"

    /// The JSON output, in the shape of `audit --json` (`ok`, `events`, `headPosition`, `headHash`,
    /// `firstBadPosition`) plus the chain's own details and how long it took.
    struct Report: Encodable {
        var ok: Bool
        /// Events in the log (its head position: positions have no gaps).
        var events: UInt64
        /// The ledger's head.
        var headPosition: UInt64
        var headHash: String
        var firstBadPosition: UInt64?
        var problem: String?
        /// Events whose hash was recomputed and found good, and the last of them.
        var eventsChecked: UInt64
        var lastGoodPosition: UInt64
        var lastGoodHash: String
        /// Verify has no anchor: it cannot see a removed tail.
        var anchored = false
        var note = VerifyCommand.anchorNote
        var seconds: Double
        var eventsPerSecond: Double
        var threads: Int?

        init(result: ChainVerification, head: LogHead, seconds: Double, threads: Int?) {
            ok = result.isValid
            events = head.position.rawValue
            headPosition = head.position.rawValue
            headHash = head.hash.hex
            firstBadPosition = result.firstBadPosition
            problem = result.problem
            eventsChecked = result.eventsChecked
            lastGoodPosition = result.headPosition
            lastGoodHash = result.headHash
            self.seconds = seconds
            eventsPerSecond = seconds > 0 ? Double(result.eventsChecked) / seconds : 0
            self.threads = threads
        }
    }

    func validate() throws {
        if let threads, !(1...64).contains(threads) { throw ValidationError("--threads must be 1...64") }
    }

    func run() async throws {
        let log = try ledger.open(create: false, readOnly: true)
        let result: ChainVerification
        let head: LogHead
        let started = ContinuousClock.now
        do {
            head = try log.head()
            result = try log.verifyChain(parallelism: threads)
        } catch {
            Output.failure(error, json: ledger.json)
            await log.close()
            throw Output.exitCode(unreadable: error)
        }
        let seconds = (ContinuousClock.now - started).seconds
        await log.close()
        if ledger.json {
            Output.printJSON(Report(result: result, head: head, seconds: seconds, threads: threads))
        } else if result.isValid {
            print(
                "chain holds: \(result.eventsChecked) events, head \(result.headPosition) \(result.headHash) "
                    + "(\(Output.grouped(Double(result.eventsChecked) / max(seconds, 1e-9))) events/s); "
                    + VerifyCommand.anchorNote)
        } else {
            print("chain BROKEN at position \(result.firstBadPosition ?? 0): \(result.problem ?? "")")
        }
        if !result.isValid { throw ExitCode(1) }
    }
}
