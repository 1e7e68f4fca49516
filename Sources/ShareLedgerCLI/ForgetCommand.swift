import ArgumentParser
import Foundation
import ShareLedger

/// `share-ledger forget`: carries out an erasure request by crypto-shredding (docs/operations.md,
/// "Handling an erasure request").
struct ForgetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "forget",
        abstract: "Forget a user's personal data (email, phone, name, share titles): record the erasure, destroy the user's key.",
        discussion: """
            Appends a PersonalDataForgotten event (who asked, when; no personal data) and then destroys the \
            user's key in the key store (personal-data.keys), so every copy of the sealed data, in the log, \
            exports and backups, is unreadable. The hash chain is unchanged: audit and verify stay clean. \
            Forgetting a forgotten user succeeds and changes nothing.
            """)

    @OptionGroup var ledger: LedgerOptions

    @Option(help: "The user record name to forget, e.g. _alice.")
    var user: String

    @Option(help: "The container the user is registered in.")
    var container: String

    @Option(help: "Who asked: a role or ticket reference such as dsr-1234 (recorded as the event's actor; never a name or email).")
    var requestedBy: String = "operator"

    struct Summary: Encodable {
        var userRecordName: String
        var container: String
        var personalDataErased: Bool
    }

    func run() async throws {
        let shareLedger = try ledger.openWithoutWorker()
        try await runReportingErrors(json: ledger.json) {
            do {
                try await shareLedger.forget(user: user, in: container, requestedBy: requestedBy)
            } catch {
                await shareLedger.close()
                throw error
            }
        }
        await shareLedger.close()
        if ledger.json {
            Output.printJSON(Summary(userRecordName: user, container: container, personalDataErased: true))
        } else {
            print("forgot the personal data of \(user) in \(container): its key is destroyed")
        }
    }
}
