import ArgumentParser
import ShareLedger

/// `share-ledger verify`: checks the hash chain from the first event to the head.
struct VerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Verify the hash chain of the whole log.",
        discussion: "Exit 0 when the chain holds, 1 with the first bad position when it does not, 2 when the ledger cannot be read.")

    @OptionGroup var ledger: LedgerOptions

    func run() async throws {
        let log = try ledger.open(create: false)
        let result: ChainVerification
        do {
            result = try log.verifyChain()
        } catch {
            Output.failure(error, json: ledger.json)
            await log.close()
            throw ExitCode(2)
        }
        await log.close()
        if ledger.json {
            Output.printJSON(result)
        } else if result.isValid {
            print("chain holds: \(result.eventsChecked) events, head \(result.headPosition) \(result.headHash)")
        } else {
            print("chain BROKEN at position \(result.firstBadPosition ?? 0): \(result.problem ?? "")")
        }
        if !result.isValid { throw ExitCode(1) }
    }
}
