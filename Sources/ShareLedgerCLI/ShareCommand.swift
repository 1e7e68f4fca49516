import ArgumentParser
import Foundation
import ShareLedger

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
