import ArgumentParser
import Foundation
import ShareLedger

/// `share-ledger forget`: carries out an erasure request by crypto-shredding (docs/operations.md,
/// "Handling an erasure request").
struct ForgetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "forget",
        abstract: "Forget a user's personal data (email, phone, name, share titles, invitations): record the erasure, destroy the keys.",
        discussion: """
            Appends a PersonalDataForgotten event (who asked, when; no personal data) and then destroys the \
            user's key and the keys of the addresses they registered with (which seal the invitations and \
            lookups to them) in the key store (personal-data.keys), so every copy of the sealed data, in \
            the log, exports and backups, is unreadable. The hash chain is unchanged: audit and verify stay \
            clean. Forgetting a forgotten user succeeds and changes nothing. --email or --phone instead of \
            --user forgets an address nobody registered with (an invitee without an account).
            """)

    @OptionGroup var ledger: LedgerOptions

    // Arrays, though one is forgotten per call: given twice, an option is refused instead of the
    // last one silently winning (an operator would believe both were forgotten).
    @Option(name: .customLong("user"), help: "The user record name to forget, e.g. _alice.")
    var users: [String] = []

    @Option(
        name: .customLong("email"),
        help: "Instead of a user: an email address no user registered with (an invitee without an account).")
    var emails: [String] = []

    @Option(name: .customLong("phone"), help: "Instead of a user: a phone number no user registered with.")
    var phones: [String] = []

    var user: String? { users.first }
    var email: String? { emails.first }
    var phone: String? { phones.first }

    @Option(help: "The container the user is registered in.")
    var container: String

    @Option(help: "Who asked: a role or ticket reference such as dsr-1234 (recorded as the event's actor; never a name or email).")
    var requestedBy: String = "operator"

    struct Summary: Encodable {
        /// The user forgotten; nil when an address was.
        var userRecordName: String?
        var container: String
        var personalDataErased: Bool
        /// For an address: whether anything readable was sealed to it when asked.
        var addressHeldData: Bool?
    }

    func validate() throws {
        guard users.count + emails.count + phones.count == 1 else {
            throw ValidationError("give exactly one of --user, --email and --phone, once (one erasure per call)")
        }
    }

    func run() async throws {
        // The address itself is never printed or logged: it is the personal data being erased.
        let address = email.map { LookupInfo(emailAddress: $0) } ?? phone.map { LookupInfo(phoneNumber: $0) }
        let held: Bool? = try await ledger.withLedger { shareLedger in
            if let address { return try await shareLedger.forget(address: address, in: container, requestedBy: requestedBy) }
            try await shareLedger.forget(user: user ?? "", in: container, requestedBy: requestedBy)
            return nil
        }
        if ledger.json {
            Output.printJSON(Summary(userRecordName: user, container: container, personalDataErased: true, addressHeldData: held))
        } else if let user {
            print("forgot the personal data of \(user) in \(container): its key is destroyed, and those of their addresses")
        } else {
            print(
                "forgot the address in \(container): "
                    + (held == true ? "its key is destroyed" : "nothing readable was sealed to it; the request is recorded"))
        }
    }
}
