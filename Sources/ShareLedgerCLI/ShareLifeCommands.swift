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

// MARK: - zone

/// `share-ledger zone`: the zones of a user's private database.
struct ZoneCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "zone", abstract: "Create, list and delete a user's zones.",
        subcommands: [Create.self, List.self, Delete.self])

    /// A zone as the CLI prints it.
    struct ZoneReport: Encodable {
        /// The zone's name.
        var zoneName: String
        /// The owner's user record name.
        var ownerName: String
        /// The zone's capabilities.
        var capabilities: [String]
        /// Whether a zone-wide share covers the zone.
        var zoneWideShare: Bool

        /// The report of `zone`.
        init(_ zone: RecordZone) {
            zoneName = zone.zoneID.zoneName
            ownerName = zone.zoneID.ownerName
            let names: [(RecordZone.Capabilities, String)] = [
                (.fetchChanges, "fetchChanges"), (.atomic, "atomic"), (.sharing, "sharing"), (.zoneWideSharing, "zoneWideSharing"),
            ]
            capabilities = names.filter { zone.capabilities.contains($0.0) }.map(\.1)
            zoneWideShare = zone.share != nil
        }

        /// One line for people.
        var line: String {
            "zone \(zoneName) (owner \(ownerName)), capabilities \(capabilities.joined(separator: ", "))"
                + (zoneWideShare ? ", shared as a whole" : "")
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "create",
            abstract: "Create a zone in the user's private database (saving an existing zone changes nothing).")

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var actor: ActorOptions

        @Argument(help: "The zone's name, e.g. Lists.")
        var name: String

        func run() async throws {
            let zoneName = name
            let zone = try await ledger.acting(as: actor.user, in: actor.container) { handle, _ throws(LedgerError) in
                try await handle.save(RecordZone(zoneID: RecordZoneID(zoneName: zoneName)))
            }
            let report = ZoneReport(zone)
            if ledger.json { Output.printJSON(report) } else { print("saved " + report.line) }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List the user's zones.")

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var actor: ActorOptions

        func run() async throws {
            let zones = try await ledger.acting(as: actor.user, in: actor.container) { handle, _ throws(LedgerError) in
                try handle.recordZones()
            }
            let reports = zones.map(ZoneReport.init)
            if ledger.json {
                Output.printJSON(reports)
            } else {
                if reports.isEmpty { print("no zones") }
                for report in reports { print(report.line) }
            }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "delete",
            abstract: "Delete a zone with its records and shares (participants lose it).")

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var actor: ActorOptions

        @Argument(help: "The zone's name.")
        var name: String

        struct Summary: Encodable {
            var deletedZone: String
            var residualTasksCompleted: Int
        }

        func run() async throws {
            let zoneName = name
            let completed = try await ledger.acting(as: actor.user, in: actor.container) { handle, sharing throws(LedgerError) in
                let since = try sharing.log.head().position
                try await handle.deleteRecordZone(withID: RecordZoneID(zoneName: zoneName))
                return try await ResidualTaskDrain.drain(sharing, since: since)
            }
            if ledger.json {
                Output.printJSON(Summary(deletedZone: name, residualTasksCompleted: completed))
            } else {
                print("deleted zone \(name) with its records and shares; residual tasks completed \(completed)")
            }
        }
    }
}

// MARK: - record

/// `share-ledger record`: records in a zone (the owner's, or a zone shared with the user).
struct RecordCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "record", abstract: "Save, fetch and delete records.",
        subcommands: [Save.self, Fetch.self, Delete.self])

    /// Which record: its name, zone and the zone's owner.
    struct RecordOptions: ParsableArguments {
        @Argument(help: "The record's name, e.g. groceries.")
        var name: String

        @Option(help: "The record's zone.")
        var zone: String

        @Option(help: "The zone's owner, for a record of a share you accepted (default: you).")
        var owner: String?

        /// The record's id.
        var recordID: RecordID {
            RecordID(recordName: name, zoneID: RecordZoneID(zoneName: zone, ownerName: owner ?? RecordZoneID.defaultOwnerName))
        }
    }

    /// Prints a record for people.
    static func printRecord(_ record: MetadataReport.RecordReport, zone: String) {
        print("record \(record.recordName) (\(record.recordType)) in zone \(zone), change tag \(record.recordChangeTag ?? "?")"
            + (record.parent.map { ", parent \($0)" } ?? ""))
        for (key, value) in record.fields.sorted(by: { $0.key < $1.key }) {
            print("  " + key.rightPad(12) + value.description)
        }
    }

    struct Save: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "save",
            abstract: "Create a record, or change one (--change-tag: the tag it was fetched with).",
            discussion: """
                A new record needs --type. With --change-tag the record is fetched, the given fields, \
                parent and type are set on it, and it is saved with that tag: a stale tag fails with \
                serverRecordChanged. A participant with readWrite permission may save records of a share \
                they accepted (--owner names the zone's owner).
                """)

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var actor: ActorOptions
        @OptionGroup var record: RecordOptions

        @Option(help: "The record type, e.g. List (needed for a new record).")
        var type: String?

        @Option(help: "The parent record's name (same zone): puts the record into its parent's share.")
        var parent: String?

        @Option(name: .customLong("field"), help: "A string field, KEY=VALUE (repeatable).")
        var fields: [String] = []

        @Option(name: .customLong("change-tag"), help: "Change an existing record: the change tag it was fetched with.")
        var changeTag: String?

        func validate() throws {
            if changeTag == nil && type == nil { throw ValidationError("a new record needs --type (or pass --change-tag to change one)") }
            // The message never repeats the argument: its value may be personal data.
            for (index, field) in fields.enumerated() where !field.contains("=") || field.hasPrefix("=") {
                throw ValidationError(
                    "--field takes KEY=VALUE: --field number \(index + 1) has \(field.contains("=") ? "no key before its =" : "no =")")
            }
        }

        func run() async throws {
            var values: [String: FieldValue] = [:]
            for field in fields {
                let parts = field.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                values[String(parts[0])] = .string(parts.count > 1 ? String(parts[1]) : "")
            }
            let (id, type, parent, tag, fieldValues) = (record.recordID, type, parent, changeTag, values)
            let saved = try await ledger.acting(as: actor.user, in: actor.container) { handle, _ throws(LedgerError) in
                var draft: Record
                if let tag {
                    draft = try handle.record(for: id)
                    draft.recordChangeTag = tag
                    if let type { draft.recordType = type }
                    draft.fields.merge(fieldValues) { $1 }
                } else {
                    draft = Record(recordType: type ?? "", recordID: id, fields: fieldValues)
                }
                if let parent { draft.parent = RecordID(recordName: parent, zoneID: id.zoneID) }
                return try await handle.save(draft)
            }
            let report = MetadataReport.RecordReport(saved)
            if ledger.json {
                Output.printJSON(report)
            } else {
                print("saved", terminator: " ")
                RecordCommand.printRecord(report, zone: record.zone)
            }
        }
    }

    struct Fetch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "fetch", abstract: "Read a record of yours, or of a share you accepted (--owner).")

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var actor: ActorOptions
        @OptionGroup var record: RecordOptions

        func run() async throws {
            let id = record.recordID
            let found = try await ledger.acting(as: actor.user, in: actor.container) { handle, _ throws(LedgerError) in
                try handle.record(for: id)
            }
            let report = MetadataReport.RecordReport(found)
            if ledger.json { Output.printJSON(report) } else { RecordCommand.printRecord(report, zone: record.zone) }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "delete",
            abstract: "Delete a record; deleting a share's root record deletes the share.")

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var actor: ActorOptions
        @OptionGroup var record: RecordOptions

        struct Summary: Encodable {
            var deletedRecord: String
            var residualTasksCompleted: Int
        }

        func run() async throws {
            let id = record.recordID
            let completed = try await ledger.acting(as: actor.user, in: actor.container) { handle, sharing throws(LedgerError) in
                let since = try sharing.log.head().position
                try await handle.deleteRecord(withID: id)
                return try await ResidualTaskDrain.drain(sharing, since: since)
            }
            if ledger.json {
                Output.printJSON(Summary(deletedRecord: record.name, residualTasksCompleted: completed))
            } else {
                print("deleted record \(record.name); residual tasks completed \(completed)")
            }
        }
    }
}

// MARK: - share

/// `share-ledger share`: making and managing shares (owner and administrators), and leaving one.
struct ShareCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share", abstract: "Share a record or zone, look people up, invite them, manage and leave shares.",
        discussion: """
            A share's life: `share create`, `share lookup`, `share invite`; the invitee runs \
            `share-ledger fetch` and `share-ledger accept`; then `share set-permission`, `share set-public`, \
            `share remove`, `share leave`, `share delete`. Access requests: `share allow-requests`; a \
            stranger with the URL runs `share request-access`; the owner or an administrator runs \
            `share approve`, `share deny`, `share block`, `share unblock`. Each prints the share as the acting user then \
            sees it; --json prints it as JSON.
            """,
        subcommands: [
            Create.self, Lookup.self, Invite.self, SetPermission.self, SetPublic.self, Remove.self, Leave.self,
            Delete.self, AllowRequests.self, RequestAccess.self, Approve.self, Deny.self, Block.self, Unblock.self,
            InviteOneTime.self,
        ])

    /// What the share commands print with `--json`.
    struct Report: Encodable {
        /// What was done, e.g. `invited`.
        var action: String
        /// The participant the command was about, as the acting user sees it afterwards.
        var participant: MetadataReport.ParticipantReport?
        /// The share as the acting user sees it afterwards (none after `delete` and `leave`).
        var share: MetadataReport.ShareReport?
        /// Residual tasks run after the change (removals leave zone removals behind).
        var residualTasksCompleted: Int?
    }

    /// Prints `report` as JSON, or for people: `headline`, then the share.
    static func emit(_ report: Report, headline: String, json: Bool) {
        if json {
            Output.printJSON(report)
            return
        }
        print(headline)
        report.share?.printText()
    }

    /// Options that name a participant of a share: its id, or who it is.
    struct ParticipantOptions: ParsableArguments {
        @Option(help: "The participant's id (`share-ledger fetch URL --json` lists them), or instead:")
        var participant: String?

        @OptionGroup var person: PersonOptions

        func validate() throws {
            guard person.count + (participant == nil ? 0 : 1) == 1 else {
                throw ValidationError("name the participant with exactly one of --participant, --email, --phone and --user")
            }
        }

        /// The participant's id: given, or found among the participants `handle` sees in the share (it
        /// reads the share without recording a fetch).
        func participantID(in handle: Container, _ url: URL) throws(LedgerError) -> String {
            if let participant { return participant }
            guard let match = try handle.share(for: url).participants.first(where: person.matches) else {
                throw LedgerError(
                    .unknownItem, "no participant of this share you can see matches: "
                        + "`share-ledger fetch URL --json` lists the participants and their ids")
            }
            return match.participantID
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "create",
            abstract: "Share a record and the records below it (--record), or a whole zone; prints the URL last.",
            discussion: """
                Sharing the same root record (or zone) again gives the same URL. The last line of the text \
                output is the URL alone: URL=$(share-ledger share create ... | tail -1).
                """)

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var actor: ActorOptions

        @Option(help: "The zone.")
        var zone: String

        @Option(help: "The root record of a hierarchy share (without it: the whole zone is shared).")
        var record: String?

        @Option(help: "The share's title.")
        var title: String?

        @Option(name: .customLong("public"), help: "What anyone with the URL may do: none (default), readOnly or readWrite.")
        var publicPermission: Share.Participant.Permission = .none

        func run() async throws {
            let (zoneID, root, title, permission) = (RecordZoneID(zoneName: zone), record, title, publicPermission)
            let share = try await ledger.acting(as: actor.user, in: actor.container) { handle, _ throws(LedgerError) in
                if let root {
                    return try await handle.share(
                        rootRecord: RecordID(recordName: root, zoneID: zoneID), title: title, publicPermission: permission)
                }
                return try await handle.share(recordZoneID: zoneID, title: title, publicPermission: permission)
            }
            let report = Report(action: "created", share: MetadataReport.ShareReport(share))
            if ledger.json {
                Output.printJSON(report)
                return
            }
            print(record.map { "shared record \($0) and the records below it in zone \(zone)" } ?? "shared zone \(zone) as a whole")
            report.share?.printText()
            print(share.url.absoluteString)
        }
    }

    struct Lookup: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "lookup",
            abstract: "Look people up before inviting them (CloudKit's CKFetchShareParticipantsOperation).",
            discussion: """
                Prints, for each email address, phone number and user record name, the participant it \
                gives: with the account that has it, or with no account (an invitation to it waits for \
                verification). A lookup that fails (an unknown user record name, a malformed address) is \
                listed with its error and makes the command exit 1 (partialFailure). Every lookup is \
                recorded in the log.
                """)

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var actor: ActorOptions

        @Option(help: "An email address to look up (repeatable).")
        var email: [String] = []

        @Option(help: "A phone number to look up (repeatable).")
        var phone: [String] = []

        @Option(help: "A user record name to look up (repeatable).")
        var user: [String] = []

        func validate() throws {
            if email.isEmpty && phone.isEmpty && user.isEmpty { throw ValidationError("give at least one --email, --phone or --user") }
        }

        /// One lookup's outcome.
        struct Item: Encodable {
            /// What was looked up: `email`, `phone` or `user`.
            var kind: String
            /// The value looked up.
            var value: String
            /// The participant found.
            var participant: MetadataReport.ParticipantReport?
            /// The error of a failed lookup.
            var error: Output.ErrorBody.Detail?
        }

        /// What `share lookup --json` prints.
        struct Summary: Encodable {
            /// Each distinct lookup, in the order given (emails, phones, users).
            var results: [Item]
            /// `partialFailure` when a lookup failed.
            var error: Output.ErrorBody.Detail?
        }

        func run() async throws {
            var seen = Set<LookupInfo>()
            let lookups = (email.map { ("email", $0, LookupInfo(emailAddress: $0)) } + phone.map { ("phone", $0, LookupInfo(phoneNumber: $0)) }
                + user.map { ("user", $0, LookupInfo(userRecordID: RecordID(userRecordName: $0))) }).filter { seen.insert($0.2).inserted }
            let infos = lookups.map(\.2)
            let results = try await ledger.acting(as: actor.user, in: actor.container) { handle, _ throws(LedgerError) in
                try await handle.shareParticipants(for: infos)
            }
            var items: [Item] = []
            var failures = 0
            for (kind, value, info) in lookups {
                var item = Item(kind: kind, value: value)
                switch results[info] {
                case .success(let participant): item.participant = MetadataReport.ParticipantReport(participant)
                case .failure(let error):
                    failures += 1
                    item.error = .init(code: error.code.rawValue, name: error.code.name, message: error.message)
                case nil:
                    failures += 1
                    item.error = .init(code: LedgerError.Code.unknownItem.rawValue, name: "unknownItem", message: "no result")
                }
                items.append(item)
            }
            let partial = failures == 0
                ? nil
                : Output.ErrorBody.Detail(
                    code: LedgerError.Code.partialFailure.rawValue, name: LedgerError.Code.partialFailure.name,
                    message: "\(failures) of the \(items.count) lookups failed")
            if ledger.json {
                Output.printJSON(Summary(results: items, error: partial))
            } else {
                for item in items {
                    let subject = "\(item.kind) \(item.value)".rightPad(32)
                    if let participant = item.participant {
                        print(subject + (participant.user.map { "account \($0)" } ?? "no account (an invitation waits for verification)"))
                    } else if let error = item.error {
                        print(subject + "failed: \(error.message) (\(error.name))")
                    }
                }
                fflush(nil)  // the results before the summary on standard error
                if let partial { FileHandle.standardError.write(Data("share-ledger: \(partial.message) (\(partial.name))\n".utf8)) }
            }
            if partial != nil { throw ExitCode(1) }
        }
    }

    struct Invite: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "invite",
            abstract: "Invite someone to a private share by email, phone or user record name (owner or administrator).",
            discussion: """
                An email address or phone number that no account has gives a participant with no account \
                until someone verifies it. Inviting the same person again changes their role and permission.
                """)

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var share: ShareActorOptions
        @OptionGroup var person: PersonOptions

        @Option(help: "readOnly (default) or readWrite.")
        var permission: Share.Participant.Permission = .readOnly

        func validate() throws {
            guard person.count == 1 else {
                throw ValidationError("name whom to invite with exactly one of --email, --phone and --user (one person per call)")
            }
        }

        @Option(help: "privateUser (default) or administrator.")
        var role: Share.Participant.Role = .privateUser

        @Option(name: .customLong("if-change-tag"), help: "Change the share only if it still has this change tag.")
        var ifChangeTag: String?

        func run() async throws {
            let lookup = person.lookupInfo ?? LookupInfo(userRecordID: RecordID(userRecordName: ""))
            let (options, permission, role, tag) = (share, permission, role, ifChangeTag)
            let updated = try await ledger.acting(as: share.user, in: share.container) { handle, _ throws(LedgerError) in
                try await handle.addParticipant(lookup, permission: permission, role: role, to: try options.shareURL(), ifChangeTag: tag)
            }
            let invited = updated.participants.first(where: person.matches)
            let report = Report(
                action: "invited", participant: invited.map(MetadataReport.ParticipantReport.init),
                share: MetadataReport.ShareReport(updated))
            let who = report.participant?.name ?? lookup.description
            ShareCommand.emit(
                report, headline: "invited \(who) as \(role) with \(permission) permission (participant "
                    + "\(report.participant?.participantID ?? "?"), \(report.participant?.status ?? "?"))",
                json: ledger.json)
        }
    }

    struct SetPermission: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-permission",
            abstract: "Change a participant's permission, and role with --role (owner or administrator).")

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var share: ShareActorOptions
        @OptionGroup var participant: ParticipantOptions

        @Option(help: "readOnly or readWrite.")
        var permission: Share.Participant.Permission

        @Option(help: "privateUser or administrator (default: unchanged).")
        var role: Share.Participant.Role?

        @Option(name: .customLong("if-change-tag"), help: "Change the share only if it still has this change tag.")
        var ifChangeTag: String?

        func run() async throws {
            let (options, who, permission, role, tag) = (share, participant, permission, role, ifChangeTag)
            let (id, updated) = try await ledger.acting(as: share.user, in: share.container) { handle, _ throws(LedgerError) in
                let url = try options.shareURL()
                let id = try who.participantID(in: handle, url)
                return (id, try await handle.setPermission(permission, role: role, forParticipant: id, in: url, ifChangeTag: tag))
            }
            let changed = updated.participants.first { $0.participantID == id }.map(MetadataReport.ParticipantReport.init)
            let report = Report(action: "permissionSet", participant: changed, share: MetadataReport.ShareReport(updated))
            ShareCommand.emit(
                report, headline: "participant \(changed?.name ?? id) is now \(changed?.role ?? "?") with "
                    + "\(changed?.permission ?? "?") permission", json: ledger.json)
        }
    }

    struct SetPublic: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-public",
            abstract: "Set what anyone with the URL may do (owner only).",
            discussion: """
                readOnly or readWrite make the share public: anyone signed in may join through the URL. Any \
                change drops the pending participants; back to none drops the public users too.
                """)

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var share: ShareActorOptions

        @Option(help: "none, readOnly or readWrite.")
        var permission: Share.Participant.Permission

        @Option(name: .customLong("if-change-tag"), help: "Change the share only if it still has this change tag.")
        var ifChangeTag: String?

        func run() async throws {
            let (options, permission, tag) = (share, permission, ifChangeTag)
            let (updated, completed) = try await ledger.acting(as: share.user, in: share.container) {
                handle, sharing throws(LedgerError) in
                let since = try sharing.log.head().position
                let updated = try await handle.setPublicPermission(permission, for: try options.shareURL(), ifChangeTag: tag)
                return (updated, try await ResidualTaskDrain.drain(sharing, since: since))
            }
            let report = Report(
                action: "publicPermissionSet", share: MetadataReport.ShareReport(updated), residualTasksCompleted: completed)
            ShareCommand.emit(
                report, headline: "public permission is now \(permission)"
                    + (permission == .none ? " (the share is private)" : " (anyone with the URL may join)"),
                json: ledger.json)
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "remove",
            abstract: "Remove a participant (owner or administrator); they lose the share's zone.")

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var share: ShareActorOptions
        @OptionGroup var participant: ParticipantOptions

        @Option(name: .customLong("if-change-tag"), help: "Change the share only if it still has this change tag.")
        var ifChangeTag: String?

        func run() async throws {
            let (options, who, tag) = (share, participant, ifChangeTag)
            let (id, updated, completed) = try await ledger.acting(as: share.user, in: share.container) {
                handle, sharing throws(LedgerError) in
                let since = try sharing.log.head().position
                let url = try options.shareURL()
                let id = try who.participantID(in: handle, url)
                let updated = try await handle.removeParticipant(id, from: url, ifChangeTag: tag)
                return (id, updated, try await ResidualTaskDrain.drain(sharing, since: since))
            }
            let removed = updated.participants.first { $0.participantID == id }.map(MetadataReport.ParticipantReport.init)
            let report = Report(
                action: "removed", participant: removed, share: MetadataReport.ShareReport(updated),
                residualTasksCompleted: completed)
            ShareCommand.emit(
                report, headline: "removed participant \(removed?.name ?? id); residual tasks completed \(completed)",
                json: ledger.json)
        }
    }

    struct Leave: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "leave",
            abstract: "Leave a share as a participant (CloudKit: delete the share from your shared database).")

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var share: ShareActorOptions

        func run() async throws {
            let options = share
            let completed = try await ledger.acting(as: share.user, in: share.container) { handle, sharing throws(LedgerError) in
                let since = try sharing.log.head().position
                try await handle.leaveShare(try options.shareURL())
                return try await ResidualTaskDrain.drain(sharing, since: since)
            }
            let report = Report(action: "left", residualTasksCompleted: completed)
            ShareCommand.emit(
                report, headline: "\(share.user) left the share; residual tasks completed \(completed)", json: ledger.json)
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "delete",
            abstract: "Delete a share (owner only): every participant loses it; the records stay.")

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var share: ShareActorOptions

        @Option(name: .customLong("if-change-tag"), help: "Delete the share only if it still has this change tag.")
        var ifChangeTag: String?

        func run() async throws {
            let (options, tag) = (share, ifChangeTag)
            let completed = try await ledger.acting(as: share.user, in: share.container) { handle, sharing throws(LedgerError) in
                let since = try sharing.log.head().position
                try await handle.deleteShare(try options.shareURL(), ifChangeTag: tag)
                return try await ResidualTaskDrain.drain(sharing, since: since)
            }
            let report = Report(action: "deleted", residualTasksCompleted: completed)
            ShareCommand.emit(report, headline: "deleted the share; residual tasks completed \(completed)", json: ledger.json)
        }
    }
}
