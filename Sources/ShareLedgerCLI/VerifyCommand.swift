import ArgumentParser
import ShareLedger

/// `share-ledger verify`: checks the hash chain from the first event to the head.
struct VerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Verify the hash chain of the whole log.",
        discussion: "Exit 0 when the chain holds, 1 with the first bad position when it does not, 2 when the ledger cannot be read.")

    @OptionGroup var ledger: LedgerOptions

    @Option(help: "Threads that share the work (default: one per core, at most 4; logs under 65,536 events use one).")
    var threads: Int?

    /// The JSON output: the verification plus how long it took.
    struct Report: Encodable {
        var result: ChainVerification
        var seconds: Double
        var threads: Int?

        func encode(to encoder: any Encoder) throws {
            try result.encode(to: encoder)
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(seconds, forKey: .seconds)
            try container.encode(seconds > 0 ? Double(result.eventsChecked) / seconds : 0, forKey: .eventsPerSecond)
        }

        enum Keys: String, CodingKey { case seconds, eventsPerSecond }
    }

    func validate() throws {
        if let threads, !(1...64).contains(threads) { throw ValidationError("--threads must be 1...64") }
    }

    func run() async throws {
        let log = try ledger.open(create: false, readOnly: true)
        let result: ChainVerification
        let started = ContinuousClock.now
        do {
            result = try log.verifyChain(parallelism: threads)
        } catch {
            Output.failure(error, json: ledger.json)
            await log.close()
            throw ExitCode(2)
        }
        let seconds = (ContinuousClock.now - started).seconds
        await log.close()
        if ledger.json {
            Output.printJSON(Report(result: result, seconds: seconds, threads: threads))
        } else if result.isValid {
            print(
                "chain holds: \(result.eventsChecked) events, head \(result.headPosition) \(result.headHash) "
                    + "(\(Output.grouped(Double(result.eventsChecked) / max(seconds, 1e-9))) events/s)")
        } else {
            print("chain BROKEN at position \(result.firstBadPosition ?? 0): \(result.problem ?? "")")
        }
        if !result.isValid { throw ExitCode(1) }
    }
}
