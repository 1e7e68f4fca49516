import ArgumentParser
import Foundation
import ShareLedger

// Access requests by hand: `share allow-requests`, `share request-access`, `share approve`,
// `share deny`, `share block`, `share unblock` (CloudKit's allowsAccessRequests,
// CKShareRequestAccessOperation, denyRequesters, blockRequesters, unblockIdentities).
extension ShareCommand {
    /// The accounts a request command is about.
    struct IdentityOptions: ParsableArguments {
        @Option(name: .customLong("user"), help: "A user record name (repeat for several).")
        var users: [String] = []

        func validate() throws {
            guard !users.isEmpty else { throw ValidationError("name at least one user with --user") }
        }

        /// The users as identities.
        var identities: [UserIdentity] { users.map(UserIdentity.account) }

        /// The users as requesters.
        var requesters: [Share.AccessRequester] {
            zip(users, identities).map { name, identity in
                Share.AccessRequester(userIdentity: identity, participantLookupInfo: LookupInfo(userRecordID: RecordID(userRecordName: name)))
            }
        }
    }

    /// Runs one share change as the acting user and prints the share afterwards.
    static func change(
        _ ledger: LedgerOptions, _ share: ShareActorOptions, action: String, headline: String,
        _ body: @escaping (Container, URL) async throws(LedgerError) -> Share
    ) async throws {
        let options = share
        let updated = try await ledger.acting(as: share.user, in: share.container) { handle, _ throws(LedgerError) in
            try await body(handle, try options.shareURL())
        }
        emit(Report(action: action, share: MetadataReport.ShareReport(updated)), headline: headline, json: ledger.json)
    }

    struct AllowRequests: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "allow-requests",
            abstract: "Let people with the URL ask to join (owner or administrator); --off stops it.",
            discussion: """
                Off by default. While off, a request gets the answer of an unknown URL. Turning it off keeps \
                the pending requests.
                """)

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var share: ShareActorOptions

        @Flag(help: "Stop accepting access requests.")
        var off = false

        @Option(name: .customLong("if-change-tag"), help: "Change the share only if it still has this change tag.")
        var ifChangeTag: String?

        func run() async throws {
            let (allowed, tag) = (!off, ifChangeTag)
            try await ShareCommand.change(
                ledger, share, action: allowed ? "accessRequestsAllowed" : "accessRequestsStopped",
                headline: allowed ? "access requests are allowed" : "access requests are not allowed"
            ) { handle, url throws(LedgerError) in
                try await handle.setAllowsAccessRequests(allowed, for: url, ifChangeTag: tag)
            }
        }
    }

    struct RequestAccess: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "request-access",
            abstract: "Ask to join a share you have the URL of (CloudKit's CKShareRequestAccessOperation).",
            discussion: """
                A share that does not allow access requests, or has blocked you, answers as an unknown URL \
                does (exit 1, unknownItem). Asking again while a request is pending changes nothing.
                """)

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var share: ShareActorOptions

        /// What `--json` prints.
        struct Summary: Encodable {
            var action = "accessRequested"
            var url: String
        }

        func run() async throws {
            let options = share
            try await ledger.acting(as: share.user, in: share.container) { handle, _ throws(LedgerError) in
                let url = try options.shareURL()
                guard let result = try await handle.requestShareAccess(for: [url])[url] else {
                    throw LedgerError(.serverRejectedRequest, "the request got no answer; try again")
                }
                try result.get()
            }
            if ledger.json {
                Output.printJSON(Summary(url: share.url))
            } else {
                print("\(share.user) asked to join the share; its owner or an administrator answers")
            }
        }
    }

    struct Approve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "approve",
            abstract: "Approve access requests (owner or administrator): the requesters are invited, marked approved.")

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var share: ShareActorOptions
        @OptionGroup var who: IdentityOptions

        @Option(help: "readOnly (default) or readWrite.")
        var permission: Share.Participant.Permission = .readOnly

        func run() async throws {
            let (requesters, permission) = (who.requesters, permission)
            try await ShareCommand.change(
                ledger, share, action: "approved", headline: "approved \(who.users.joined(separator: ", "))"
            ) { handle, url throws(LedgerError) in
                try await handle.approveRequesters(requesters, permission: permission, for: url)
            }
        }
    }

    struct Deny: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "deny", abstract: "Deny access requests (owner or administrator); the users may ask again.")

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var share: ShareActorOptions
        @OptionGroup var who: IdentityOptions

        func run() async throws {
            let requesters = who.requesters
            try await ShareCommand.change(
                ledger, share, action: "denied", headline: "denied \(who.users.joined(separator: ", "))"
            ) { handle, url throws(LedgerError) in
                try await handle.denyRequesters(requesters, for: url)
            }
        }
    }

    struct Block: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "block",
            abstract: "Block users from a share (owner or administrator): removes them if they are participants.",
            discussion: """
                A blocked user's requests, fetches and accepts get the answer of an unknown URL until \
                `share unblock`.
                """)

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var share: ShareActorOptions
        @OptionGroup var who: IdentityOptions

        func run() async throws {
            let identities = who.identities
            try await ShareCommand.change(
                ledger, share, action: "blocked", headline: "blocked \(who.users.joined(separator: ", "))"
            ) { handle, url throws(LedgerError) in
                try await handle.blockIdentities(identities, for: url)
            }
        }
    }

    struct Unblock: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "unblock", abstract: "Unblock users (owner or administrator); they may ask to join again.")

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var share: ShareActorOptions
        @OptionGroup var who: IdentityOptions

        func run() async throws {
            let blocked = who.identities.map(Share.BlockedIdentity.init)
            try await ShareCommand.change(
                ledger, share, action: "unblocked", headline: "unblocked \(who.users.joined(separator: ", "))"
            ) { handle, url throws(LedgerError) in
                try await handle.unblockIdentities(blocked, for: url)
            }
        }
    }

    struct InviteOneTime: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "invite-one-time",
            abstract: "Invite a one-time URL participant (owner or administrator); prints its URL last.",
            discussion: """
                CloudKit's Participant.oneTimeURLParticipant() and CKShare.oneTimeURL(for:): an invitation to \
                no email address, phone number or account. The first signed-in user who fetches and accepts \
                the printed URL becomes the participant. The URL stays that participant's until they are \
                removed or leave: it then answers as the share's URL to the share's owner and participants, \
                and as an unknown one to anyone else. The last line of the text output is the URL alone.
                """)

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var share: ShareActorOptions

        @Option(help: "readOnly (default) or readWrite.")
        var permission: Share.Participant.Permission = .readOnly

        @Option(help: "privateUser (default) or administrator.")
        var role: Share.Participant.Role = .privateUser

        /// What `--json` prints.
        struct Summary: Encodable {
            var action = "invitedOneTime"
            var participantID: String
            var oneTimeURL: String
            var share: MetadataReport.ShareReport
        }

        func run() async throws {
            let (options, permission, role) = (share, permission, role)
            let updated = try await ledger.acting(as: share.user, in: share.container) { handle, _ throws(LedgerError) in
                var participant = Share.Participant.oneTimeURLParticipant()
                participant.permission = permission
                participant.role = role
                return try await handle.addParticipant(participant, to: try options.shareURL())
            }
            // The newest unused one-time URL is this one: participant ids are random, so take the
            // participant added last among those not taken yet.
            let candidates = updated.participants.filter {
                $0.userIdentity.userRecordID == nil && updated.oneTimeURL(for: $0.participantID) != nil
            }
            guard let added = candidates.max(by: { ($0.dateAddedToShare ?? .distantPast) < ($1.dateAddedToShare ?? .distantPast) }),
                let url = updated.oneTimeURL(for: added.participantID)
            else {
                Output.failure(LedgerError(.serverRejectedRequest, "the invitation was made but its URL is not visible; fetch the share"), json: ledger.json)
                throw ExitCode(1)
            }
            if ledger.json {
                Output.printJSON(
                    Summary(participantID: added.participantID, oneTimeURL: url.absoluteString, share: MetadataReport.ShareReport(updated)))
                return
            }
            print("invited a one-time URL participant (\(role), \(permission), participant \(added.participantID))")
            print(url.absoluteString)
        }
    }
}
