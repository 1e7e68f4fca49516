import ArgumentParser
import Foundation
import ShareLedger

/// Options of the commands that act on one share URL as one user.
struct ShareActorOptions: ParsableArguments {
    @Argument(help: "The share URL (https://HOST/share/TOKEN#Title).")
    var url: String

    @OptionGroup var actor: ActorOptions

    /// The user record name to act as.
    var user: String { actor.user }

    /// The container the user acts in.
    var container: String { actor.container }

    /// The URL, or `invalidArguments` when the text is not one.
    func shareURL() throws(LedgerError) -> URL {
        guard let parsed = URL(string: url), parsed.scheme != nil else {
            throw LedgerError(.invalidArguments, "\"\(url.prefix(200))\" is not a URL; pass a share URL such as https://share.localhost/share/0…")
        }
        return parsed
    }
}

/// `share-ledger fetch`: a share URL's metadata as one user sees it (CloudKit's `shareMetadata(for:)`).
struct FetchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fetch",
        abstract: "Fetch the metadata of a share URL as a user.",
        discussion: """
            Prints what the user learns before accepting: the container, the owner, the user's role, \
            status and permission, the root record (with --root-record) and the participants the user \
            may see. Like every fetch, it is recorded in the log.
            """)

    @OptionGroup var ledger: LedgerOptions
    @OptionGroup var share: ShareActorOptions

    @Flag(help: "Include the root record of a hierarchy share.")
    var rootRecord = false

    @Option(help: "With --root-record, only these fields of it (comma-separated; an empty value for none).")
    var keys: String?

    func validate() throws {
        if keys != nil && !rootRecord { throw ValidationError("--keys needs --root-record") }
    }

    func run() async throws {
        let desired = keys.map { text in
            text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        let fetchRoot = rootRecord
        let options = share
        let metadata = try await ledger.acting(as: share.user, in: share.container) { handle, _ throws(LedgerError) in
            let url = try options.shareURL()
            guard let answer = try await handle.shareMetadatas(
                for: [url], shouldFetchRootRecord: fetchRoot, rootRecordDesiredKeys: desired)[url]
            else { throw LedgerError(.unknownItem, Output.shareNotFound) }
            return try answer.get()
        }
        let report = MetadataReport(metadata)
        if ledger.json { Output.printJSON(report) } else { report.printText() }
    }
}

/// `share-ledger accept`: fetches a share URL's metadata as a user, then accepts the share.
struct AcceptCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "accept",
        abstract: "Accept a share as a user (fetches its metadata first, as clients do).",
        discussion: """
            Accepting an invitation (or joining a public share) leaves a residual task behind: the \
            share's zone appears in the user's shared database when it runs. The command runs the due \
            residual tasks right after accepting, as the server's worker would, and prints the share as \
            the user now sees it.
            """)

    @OptionGroup var ledger: LedgerOptions
    @OptionGroup var share: ShareActorOptions
    @OptionGroup var replicationAck: ReplicationAckOptions

    /// What `accept --json` prints.
    struct Report: Encodable {
        /// The share as the user now sees it.
        var share: MetadataReport.ShareReport
        /// The user's participant id.
        var participantID: String?
        /// The user's role.
        var role: String
        /// The user's status (accepted).
        var status: String
        /// The user's permission.
        var permission: String
        /// Residual tasks run after the accept.
        var residualTasksCompleted: Int
        /// The zones in the user's shared database afterwards.
        var sharedDatabaseZones: [String]
        /// With `--replication replicated`: the position the shard's stream acknowledged (the
        /// accept's events and all before them).
        var replicatedThrough: UInt64?
    }

    func run() async throws {
        let sharing = try ledger.openSharing(create: false)
        let (user, container) = (share.user, share.container)
        let options = share
        let result: Result<Report, LedgerError>
        do throws(LedgerError) {
            let url = try options.shareURL()
            let handle = sharing.container(container, userRecordName: user)
            let since = try sharing.log.head().position
            let metadata = try await handle.shareMetadata(for: url)
            let accepted = try await handle.accept(metadata)
            let completed = try await ResidualTaskDrain.drain(sharing, since: since)
            let zones = try handle.sharedDatabaseZones().map { "\($0.zoneName) (owner \($0.ownerName))" }
            let me = accepted.currentUserParticipant
            result = .success(
                Report(
                    share: MetadataReport.ShareReport(accepted), participantID: me?.participantID,
                    role: (me?.role ?? metadata.participantRole).description,
                    status: (me?.acceptanceStatus ?? metadata.participantStatus).description,
                    permission: (me?.permission ?? metadata.participantPermission).description,
                    residualTasksCompleted: completed, sharedDatabaseZones: zones))
        } catch {
            result = .failure(error)
        }
        var replicatedThrough: UInt64?
        if case .success = result {
            do {
                replicatedThrough = try await runReportingReplicationErrors(json: ledger.json) {
                    try await replicationAck.acknowledge(sharing.log, logger: ledger.logger)
                }
            } catch {
                await sharing.close()
                throw error
            }
        }
        await sharing.close()
        switch result {
        case .success(var report):
            report.replicatedThrough = replicatedThrough
            if ledger.json {
                Output.printJSON(report)
            } else {
                print("accepted as \(report.role) with \(report.permission) permission (status \(report.status), participant \(report.participantID ?? "?"))")
                print("residual tasks completed \(report.residualTasksCompleted); shared database zones: "
                    + (report.sharedDatabaseZones.isEmpty ? "none" : report.sharedDatabaseZones.joined(separator: ", ")))
                report.share.printText()
                if let replicatedThrough { print("replicated: the stream acknowledged through position \(replicatedThrough)") }
            }
        case .failure(let error):
            Output.failure(error, json: ledger.json)
            throw ExitCode(1)
        }
    }
}

extension Output {
    /// CloudKit's answer for a share URL it cannot resolve.
    static let shareNotFound = "Share not found: the URL is unknown, or its share was deleted, or it is not shared with you"
}

/// Share metadata as the CLI prints it (text or JSON).
struct MetadataReport: Encodable {
    /// A share as the CLI prints it.
    struct ShareReport: Encodable {
        /// The share URL.
        var url: String
        /// The container that holds the share.
        var container: String
        /// The title.
        var title: String?
        /// The owner's user record name.
        var owner: String?
        /// The shared zone.
        var zoneName: String
        /// Whether the whole zone is shared.
        var zoneWide: Bool
        /// The root record of a hierarchy share.
        var rootRecordName: String?
        /// What anyone with the URL may do.
        var publicPermission: String
        /// The share's change tag.
        var recordChangeTag: String
        /// The participants the user may see, owner first.
        var participants: [ParticipantReport]
        /// True when people with the URL may ask to join (absent when they may not).
        var allowsAccessRequests: Bool?
        /// The user record names of the pending access requests (owner and administrators only; absent when none).
        var requesters: [String]?
        /// The user record names of the blocked identities (owner and administrators only; absent when none).
        var blockedIdentities: [String]?

        /// The report of `share`.
        init(_ share: Share) {
            url = share.url.absoluteString
            container = share.containerIdentifier
            title = share.title
            owner = share.owner.userIdentity.userRecordID?.recordName
            zoneName = share.recordID.zoneID.zoneName
            zoneWide = share.isZoneWide
            rootRecordName = share.hierarchicalRootRecordID?.recordName
            publicPermission = share.publicPermission.description
            recordChangeTag = share.recordChangeTag
            participants = share.participants.map(ParticipantReport.init)
                .sorted { ($0.roleOrder, $0.name) < ($1.roleOrder, $1.name) }
            allowsAccessRequests = share.allowsAccessRequests ? true : nil
            let requesterNames = share.requesters.map { $0.userIdentity.userRecordID?.recordName ?? "?" }
            requesters = requesterNames.isEmpty ? nil : requesterNames
            let blockedNames = share.blockedIdentities.map { $0.userIdentity.userRecordID?.recordName ?? "?" }
            blockedIdentities = blockedNames.isEmpty ? nil : blockedNames
        }

        /// Prints the share for people.
        func printText() {
            printHeader()
            printParticipants()
        }

        /// Prints what the share is.
        func printHeader() {
            print("share         \(url)")
            print("container     \(container)")
            if let title { print("title         \(title)") }
            print("owner         \(owner ?? "?")")
            print("shares        " + (zoneWide ? "zone \(zoneName), as a whole" : "record \(rootRecordName ?? "?") and below it, in zone \(zoneName)"))
            print("public        \(publicPermission)")
            if allowsAccessRequests == true { print("requests      allowed") }
            if let requesters { print("requesters    \(requesters.joined(separator: ", "))") }
            if let blockedIdentities { print("blocked       \(blockedIdentities.joined(separator: ", "))") }
        }

        /// Prints the participants.
        func printParticipants() {
            print("participants  \(participants.count) visible")
            for participant in participants {
                print(
                    "  " + participant.role.rightPad(15) + participant.status.rightPad(10) + participant.permission.rightPad(11)
                        + participant.name + (participant.approvedRequester == true ? " (approved request)" : ""))
            }
        }
    }

    /// A participant as the CLI prints it.
    struct ParticipantReport: Encodable {
        /// The participant id.
        var participantID: String
        /// The user record name, when an account is known.
        var user: String?
        /// The email the invitation went to.
        var email: String?
        /// The phone number the invitation went to.
        var phone: String?
        /// Whether an account is known.
        var hasAccount: Bool
        /// The role.
        var role: String
        /// The permission.
        var permission: String
        /// The acceptance status.
        var status: String
        /// True when the participant joined by the approval of their access request (absent otherwise).
        var approvedRequester: Bool?

        /// The report of `participant`.
        init(_ participant: Share.Participant) {
            participantID = participant.participantID
            user = participant.userIdentity.userRecordID?.recordName
            email = participant.userIdentity.lookupInfo?.emailAddress
            phone = participant.userIdentity.lookupInfo?.phoneNumber
            hasAccount = participant.userIdentity.hasiCloudAccount
            role = participant.role.description
            permission = participant.permission.description
            status = participant.acceptanceStatus.description
            approvedRequester = participant.isApprovedRequester ? true : nil
        }

        /// Who the participant is, for people.
        var name: String {
            let address = email ?? phone
            switch (user, address) {
            case (let user?, let address?): return "\(user) (\(address))"
            case (let user?, nil): return user
            case (nil, let address?): return "\(address) (no account yet)"
            case (nil, nil): return participantID
            }
        }

        /// Owner first, then administrators, private and public users.
        var roleOrder: Int { ["owner": 0, "administrator": 1, "privateUser": 2, "publicUser": 3][role] ?? 4 }
    }

    /// A record as the CLI prints it.
    struct RecordReport: Encodable {
        /// The record name.
        var recordName: String
        /// The record type.
        var recordType: String
        /// The parent's record name.
        var parent: String?
        /// The change tag.
        var recordChangeTag: String?
        /// The fields (only the desired keys).
        var fields: [String: FieldReport]

        /// The report of `record`.
        init(_ record: Record) {
            recordName = record.recordID.recordName
            recordType = record.recordType
            parent = record.parent?.recordName
            recordChangeTag = record.recordChangeTag
            fields = record.fields.mapValues(FieldReport.init)
        }
    }

    /// A field value as JSON: strings, numbers, dates (ISO 8601), bytes (base64), references (record
    /// names) and lists.
    indirect enum FieldReport: Encodable, CustomStringConvertible {
        /// A string.
        case string(String)
        /// A 64-bit integer.
        case int(Int64)
        /// A double.
        case double(Double)
        /// A date, bytes or reference, as text.
        case text(String)
        /// A list.
        case list([FieldReport])

        /// The report of `value`.
        init(_ value: FieldValue) {
            switch value {
            case .string(let s): self = .string(s)
            case .int64(let i): self = .int(i)
            case .double(let d): self = .double(d)
            case .date(let date): self = .text(ISO8601DateFormatter().string(from: date))
            case .bytes(let bytes): self = .text(Data(bytes).base64EncodedString())
            case .reference(let id): self = .text("→ \(id.recordName)")
            case .list(let values): self = .list(values.map(FieldReport.init))
            }
        }

        /// Encodes the plain JSON value.
        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .string(let s), .text(let s): try container.encode(s)
            case .int(let i): try container.encode(i)
            case .double(let d): try container.encode(d)
            case .list(let values): try container.encode(values)
            }
        }

        /// The value for people.
        var description: String {
            switch self {
            case .string(let s): return "\"\(s)\""
            case .text(let s): return s
            case .int(let i): return String(i)
            case .double(let d): return String(d)
            case .list(let values): return "[" + values.map(\.description).joined(separator: ", ") + "]"
            }
        }
    }

    /// The container that holds the share.
    var containerIdentifier: String
    /// The owner's user record name.
    var owner: String?
    /// The root record of a hierarchy share.
    var rootRecordName: String?
    /// The fetching user's role.
    var role: String
    /// The fetching user's status.
    var status: String
    /// The fetching user's permission.
    var permission: String
    /// The root record, when asked for.
    var rootRecord: RecordReport?
    /// The share as the user sees it.
    var share: ShareReport

    /// The report of `metadata`.
    init(_ metadata: Share.Metadata) {
        containerIdentifier = metadata.containerIdentifier
        owner = metadata.ownerIdentity.userRecordID?.recordName
        rootRecordName = metadata.hierarchicalRootRecordID?.recordName
        share = ShareReport(metadata.share)
        role = metadata.participantRole.description
        status = metadata.participantStatus.description
        permission = metadata.participantPermission.description
        rootRecord = metadata.rootRecord.map(RecordReport.init)
    }

    /// Prints the metadata for people.
    func printText() {
        share.printHeader()
        print("you           \(role), \(status), \(permission)")
        if let rootRecord {
            print("root record   \(rootRecord.recordName) (\(rootRecord.recordType)), change tag \(rootRecord.recordChangeTag ?? "?")")
            for (key, value) in rootRecord.fields.sorted(by: { $0.key < $1.key }) {
                print("  " + key.rightPad(12) + value.description)
            }
        }
        share.printParticipants()
    }
}
