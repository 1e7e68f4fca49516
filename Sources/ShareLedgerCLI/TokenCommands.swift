import ArgumentParser
import Foundation
import ShareLedger
import ShareLedgerServer

/// `share-ledger token`: the credentials `serve` accepts (kept in the ledger directory, file
/// `server-credentials.json`, as SHA-256 hashes; a token is shown once, when made).
struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Make, list and revoke the API tokens, web auth tokens, server-to-server keys and operator tokens `serve` accepts.",
        discussion: """
            Kept in <path>/server-credentials.json (mode 0600) as SHA-256 hashes: a token is printed once, \
            when it is made. A running server picks up changes within a second.
            """,
        subcommands: [Create.self, RegisterKey.self, Revoke.self, List.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "create",
            abstract: "Make a container's API token, with --user a web auth token naming that user, or with --operator an operator token for the report pages.")

        @OptionGroup var ledger: LedgerOptions

        @Option(help: "The container, e.g. iCloud.com.example.notes (not with --operator).")
        var container: String?

        @Option(
            name: .customLong("operator"),
            help: "Make an operator token for this operator (a name for `token list`): it opens the report pages under /reports, read-only, for every container.")
        var operatorName: String?

        @Option(help: "The user record name a web auth token names (without it: an API token).")
        var user: String?

        @Option(
            name: .customLong("expires-in"),
            help: "Lifetime in seconds (web auth tokens: default 30 days; API tokens: default never).")
        var expiresIn: Int?

        func validate() throws {
            if let expiresIn, expiresIn < 1 { throw ValidationError("--expires-in must be 1 or more seconds") }
            if operatorName != nil {
                guard container == nil, user == nil else { throw ValidationError("--operator takes neither --container nor --user") }
            } else if container == nil {
                throw ValidationError("give --container (an API or web auth token) or --operator NAME (an operator token)")
            }
        }

        func run() async throws {
            let credentials = ServerCredentials(ledgerPath: ledger.path)
            let issued = try reporting(json: ledger.json) { () throws(ServerError) in
                if let operatorName {
                    return try credentials.createOperatorToken(
                        name: operatorName, expiresAt: expiresIn.map { Date().addingTimeInterval(TimeInterval($0)) })
                }
                let container = container ?? ""
                if let user {
                    return try credentials.createWebAuthToken(
                        container: container, userRecordName: user,
                        expiresAt: Date().addingTimeInterval(TimeInterval(expiresIn ?? 30 * 24 * 3600)))
                }
                return try credentials.createAPIToken(
                    container: container, expiresAt: expiresIn.map { Date().addingTimeInterval(TimeInterval($0)) })
            }
            if ledger.json {
                Output.printJSON(issued)
            } else if issued.entry.kind == .operatorToken {
                print("operatorToken \(issued.entry.id) for the report pages (shown once, keep it):")
                print(issued.token)
            } else {
                print("\(issued.entry.kind.rawValue) \(issued.entry.id) for \(issued.entry.container) (shown once, keep it):")
                print(issued.token)
            }
        }
    }

    struct RegisterKey: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "register-key",
            abstract: "Register a server-to-server key (ECDSA P-256 public key, PEM) acting as --user; prints its key id.")

        @OptionGroup var ledger: LedgerOptions

        @Option(help: "The container.")
        var container: String

        @Option(help: "The user record name signed requests act as.")
        var user: String

        @Option(name: .customLong("public-key"), help: "The PEM file of the public key (openssl ec -pubout).")
        var publicKey: String

        @Option(help: "The environment the key may be used in: development or production.")
        var environment = "development"

        @Flag(
            name: .customLong("allow-private-databases"),
            help: "Let the key act in its user's private and shared databases (by default: the public database only, as Apple's).")
        var allowPrivateDatabases = false

        func run() async throws {
            guard let pem = try? String(contentsOfFile: publicKey, encoding: .utf8) else {
                try reporting(json: ledger.json) { () throws(ServerError) in
                    throw ServerError(.invalidArguments, "cannot read \(publicKey)")
                }
                return
            }
            let credentials = ServerCredentials(ledgerPath: ledger.path)
            let entry = try reporting(json: ledger.json) { () throws(ServerError) in
                try credentials.registerServerKey(
                    container: container, userRecordName: user, publicKeyPEM: pem, environment: environment,
                    allowingPrivateDatabases: allowPrivateDatabases)
            }
            if ledger.json {
                Output.printJSON(entry)
            } else {
                print("server key \(entry.id) for \(entry.container); callers send it as X-Apple-CloudKit-Request-KeyID")
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "revoke", abstract: "Remove a token or key by its id.")

        @OptionGroup var ledger: LedgerOptions

        @Argument(help: "The id `token list` shows.")
        var id: String

        struct Summary: Encodable { var revoked: String }

        func run() async throws {
            let credentials = ServerCredentials(ledgerPath: ledger.path)
            try reporting(json: ledger.json) { () throws(ServerError) in try credentials.revoke(id: id) }
            if ledger.json { Output.printJSON(Summary(revoked: id)) } else { print("revoked \(id)") }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list", abstract: "List tokens and keys (never the tokens themselves).")

        @OptionGroup var ledger: LedgerOptions

        func run() async throws {
            let credentials = ServerCredentials(ledgerPath: ledger.path)
            let entries = try reporting(json: ledger.json) { () throws(ServerError) in try credentials.list() }
            if ledger.json {
                Output.printJSON(
                    entries.map { entry in
                        var shown = entry
                        shown.tokenSHA256 = nil
                        return shown
                    })
                return
            }
            if entries.isEmpty { print("no tokens or keys") }
            let formatter = ISO8601DateFormatter()
            for entry in entries {
                var line = "\(entry.id)  \(entry.kind.rawValue)"
                if entry.kind == .operatorToken {
                    line += "  operator \(entry.userRecordName ?? "")"
                } else {
                    line += "  \(entry.container)"
                    if let user = entry.userRecordName { line += "  user \(user)" }
                }
                line += "  expires " + (entry.expiresAt.map(formatter.string(from:)) ?? "never")
                print(line)
            }
        }
    }
}

/// Runs `body`; a ``ServerError`` becomes exit code 1 with its message (JSON with --json).
func reporting<R>(json: Bool, _ body: () throws(ServerError) -> R) throws -> R {
    do {
        return try body()
    } catch {
        if json {
            Output.printJSON(["error": ["name": error.code.rawValue, "message": error.message]])
        } else {
            FileHandle.standardError.write(Data("share-ledger: \(error.message) (\(error.code.rawValue))\n".utf8))
        }
        throw ExitCode(1)
    }
}

/// `share-ledger user register`: an account in a container (what signing in to iCloud gives a
/// CloudKit user), with the email address and phone number others invite it by.
struct UserCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "user", abstract: "Register users (accounts others can invite).", subcommands: [Register.self])

    struct Register: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "register", abstract: "Register a user in a container.")

        @OptionGroup var ledger: LedgerOptions

        @Argument(help: "The user record name, e.g. _alice.")
        var name: String

        @Option(help: "The container.")
        var container: String

        @Option(help: "The email address others invite the user by.")
        var email: String?

        @Option(help: "The phone number others invite the user by.")
        var phone: String?

        struct Summary: Encodable {
            var userRecordName: String
            var container: String
        }

        func run() async throws {
            _ = try await ledger.withLedger(create: true) { shareLedger in
                try await shareLedger.registerUser(name, in: container, emailAddress: email, phoneNumber: phone)
            }
            if ledger.json {
                Output.printJSON(Summary(userRecordName: name, container: container))
            } else {
                print("registered \(name) in \(container)")
            }
        }
    }
}
