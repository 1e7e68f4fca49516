import ArgumentParser
import Foundation
import ShareLedger

// A share's life by hand: `zone`, `record` and `share` act as one user through the library's public
// `Container` API — the calls an app makes — so every change is an event in the log, as in-process
// calls are. `user register`, `fetch` and `accept` complete the set.

/// Who acts, and where: the options of a command that acts as one user in one container.
struct ActorOptions: ParsableArguments {
    @Option(name: .customLong("as"), help: "The user record name to act as.")
    var user: String

    @Option(help: "The container the user acts in, e.g. iCloud.com.example.notes.")
    var container: String
}

extension LedgerOptions {
    /// Opens the ledger (exit 2 when it cannot be read), runs `body` with the handle of `user` in
    /// `container`, closes the ledger, and returns what `body` returned; a ``LedgerError`` from `body`
    /// becomes exit 1 with its message (JSON with `--json`).
    func acting<R>(
        as user: String, in container: String, _ body: (Container, ShareLedger) async throws(LedgerError) -> R
    ) async throws -> R {
        let sharing = try openSharing(create: false)
        let result: Result<R, LedgerError>
        do throws(LedgerError) {
            result = .success(try await body(sharing.container(container, userRecordName: user), sharing))
        } catch {
            result = .failure(error)
        }
        await sharing.close()
        switch result {
        case .success(let value): return value
        case .failure(let error):
            Output.failure(error, json: json)
            throw ExitCode(1)
        }
    }
}

extension Share.Participant.Permission: ExpressibleByArgument {
    /// Parses `none`, `readOnly` or `readWrite` (any case).
    public init?(argument: String) {
        guard let match = Self.allCases.first(where: { $0 != .unknown && $0.description.lowercased() == argument.lowercased() })
        else { return nil }
        self = match
    }

    /// The names the command line accepts.
    public static var allValueStrings: [String] { ["none", "readOnly", "readWrite"] }
}

extension Share.Participant.Role: ExpressibleByArgument {
    /// Parses `privateUser` or `administrator` (any case): the roles an invitation can give.
    public init?(argument: String) {
        guard let match = [Self.privateUser, .administrator].first(where: { $0.description.lowercased() == argument.lowercased() })
        else { return nil }
        self = match
    }

    /// The names the command line accepts.
    public static var allValueStrings: [String] { ["privateUser", "administrator"] }
}

/// Whom a command means: an email address, phone number or user record name (the command checks
/// how many it needs).
struct PersonOptions: ParsableArguments {
    // Arrays, though one person is named: an option given twice then counts twice and the command
    // refuses it, where a single-value option would keep the last one silently (`share invite URL
    // --email a --email b` invited only b).
    @Option(name: .customLong("email"), help: "An email address.")
    var emails: [String] = []

    @Option(name: .customLong("phone"), help: "A phone number.")
    var phones: [String] = []

    @Option(name: .customLong("user"), help: "A user record name.")
    var users: [String] = []

    var email: String? { emails.first }
    var phone: String? { phones.first }
    var user: String? { users.first }

    /// How many were given, counting repeats.
    var count: Int { emails.count + phones.count + users.count }

    /// The lookup info of the person, when one was given.
    var lookupInfo: LookupInfo? {
        if let email { return LookupInfo(emailAddress: email) }
        if let phone { return LookupInfo(phoneNumber: phone) }
        return user.map { LookupInfo(userRecordID: RecordID(userRecordName: $0)) }
    }

    /// Whether `participant` is this person: the same account, email address (any case) or phone
    /// number (the same digits).
    func matches(_ participant: Share.Participant) -> Bool {
        let identity = participant.userIdentity
        let digits: (String) -> String = { text in String(text.filter { $0.isNumber || $0 == "+" }) }
        if let user { return identity.userRecordID?.recordName == user }
        if let email, let known = identity.lookupInfo?.emailAddress { return known.lowercased() == email.lowercased() }
        if let phone, let known = identity.lookupInfo?.phoneNumber { return digits(known) == digits(phone) }
        return false
    }
}

extension UserIdentity {
    /// The identity of the account `name`, as requesters and blocked identities name it.
    static func account(_ name: String) -> UserIdentity {
        UserIdentity(
            userRecordID: RecordID(userRecordName: name), lookupInfo: LookupInfo(userRecordID: RecordID(userRecordName: name)),
            nameComponents: nil, hasiCloudAccount: true)
    }
}
