import ArgumentParser
import Foundation
import ShareLedger

/// `share-ledger key-store`: what to do when the key store of crypto-shredding is lost.
struct KeyStoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "key-store",
        abstract: "Manage the key store of sealed personal data (personal-data.keys).",
        subcommands: [KeyStoreReplaceLostCommand.self])
}

/// `share-ledger key-store replace-lost`: a new key store in place of one lost without a backup.
struct KeyStoreReplaceLostCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replace-lost",
        abstract: "Give a ledger whose key store is lost for good (no backup) a new one; everything sealed reads as erased.",
        discussion: """
            When personal-data.keys is missing, emptied, cut or damaged, every command refuses the ledger \
            (corruptedData): restore the file from its backup. Without a backup, this puts a new key store \
            in its place (the lost file is kept beside it as personal-data.keys.lost-<time>): the ledger \
            opens again, and every sealed email, phone number, name, share title and invitation address \
            answers as erased. It cannot be undone. An intact key store is refused (exit 1). Stop every \
            process using the ledger first.
            """)

    @OptionGroup var ledger: LedgerOptions

    @Flag(help: "Confirm that the sealed personal data is lost for good (required).")
    var loseSealedPersonalData = false

    struct Summary: Encodable {
        var path: String
        var lostFileMovedTo: String?
    }

    func validate() throws {
        guard loseSealedPersonalData else {
            throw ValidationError(
                "replacing the key store makes every sealed email, phone, name and title unreadable for good: restore "
                    + "personal-data.keys from its backup instead, or confirm with --lose-sealed-personal-data")
        }
    }

    func run() async throws {
        let moved = try await runReportingErrors(json: ledger.json) {
            try await ShareLedger.replaceLostKeyStore(at: ledger.path)
        }
        if ledger.json {
            Output.printJSON(Summary(path: ledger.path, lostFileMovedTo: moved))
        } else {
            print(
                "a new key store is in place in \(ledger.path); sealed personal data answers as erased"
                    + (moved.map { "; the lost file is kept as \($0)" } ?? ""))
        }
    }
}
