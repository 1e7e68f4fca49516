import ArgumentParser
import Foundation
import ShareLedger
import ShareLedgerAudit

/// `share-ledger audit`: the chain, every event, the log's own indexes, and every read model
/// against a rebuild from the log.
struct AuditCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audit",
        abstract: "Verify the chain, decode every event, and compare the read models with a rebuild from the log.",
        discussion: """
            Exit 0 when everything holds; 1 with the first bad position and what is wrong when anything \
            does not (a checkpoint not signed by a --trusted-key, or not matching the log; an \
            --expect-head the log does not hold); 2 when the ledger or a key file cannot be read. Audit a quiet ledger (or a copy): changes made \
            during the audit can show as differences.
            """)

    @OptionGroup var ledger: LedgerOptions

    @Option(
        name: .customLong("trusted-key"),
        help: "A public key file (PREFIX.pub from `share-ledger keygen`); every checkpoint must be signed by a trusted key and still match the log. Repeatable.")
    var trustedKeys: [String] = []

    @Option(
        name: .customLong("expect-head"),
        help: "POS:HASH pinned outside the ledger; the event at POS must have HASH (64 hex digits). Repeatable.")
    var expectHeads: [String] = []

    @Flag(help: "Require a checkpoint signed by a trusted key that still matches the log (needs --trusted-key). The chain is recomputed from the first event all the same: a checkpoint vouches for the history before it only while that history still hashes to it.")
    var fromCheckpoint = false

    func validate() throws {
        if fromCheckpoint && trustedKeys.isEmpty {
            throw ValidationError("--from-checkpoint needs --trusted-key: the checkpoint's signature is what vouches for the history before it")
        }
        for text in expectHeads where ExpectedHead(text) == nil {
            throw ValidationError("--expect-head \(text) is not POS:HASH (a position, a colon, 64 hex digits)")
        }
    }

    func run() async throws {
        var options = AuditOptions(expectedHeads: expectHeads.compactMap(ExpectedHead.init), fromCheckpoint: fromCheckpoint)
        options.trustedKeys = try CheckpointPublicKey.read(trustedKeys, json: ledger.json)
        let shareLedger = try ledger.openWithoutWorker(readOnly: true)
        let scratch = FileManager.default.temporaryDirectory
            .appendingPathComponent("share-ledger-audit-\(ProcessInfo.processInfo.processIdentifier)").path
        let report: AuditReport
        do {
            report = try LedgerAudit(shareLedger).audit(scratchPath: scratch, options: options) { done, total in
                Output.progress("audit: \(done) of \(total) events")
            }
        } catch {
            Output.endProgress()
            Output.failure(error, json: ledger.json)
            await shareLedger.close()
            throw Output.exitCode(unreadable: error)
        }
        Output.endProgress()
        await shareLedger.close()
        if ledger.json {
            Output.printJSON(report)
        } else if report.ok {
            print(
                "audit ok: \(report.events) events, chain holds to \(report.headPosition) \(report.headHash); "
                    + "indexes and read models match the log"
                    + (trustedKeys.isEmpty ? "" : "; \(report.checkpointsVerified) signed checkpoints verified")
                    + (expectHeads.isEmpty ? "" : "; \(report.expectedHeadsVerified) expected heads hold"))
            if let derived = report.derivedPosition {
                print(
                    "note: derived/ (a cache of the log) reflects the log up to position \(derived) and matches it there (compared "
                        + "as of \(derived)); the next open for writing brings it up to the head")
            }
            if report.eventsWithPlaintextPersonalData > 0 {
                print(
                    "note: \(report.eventsWithPlaintextPersonalData) events hold personal data in plaintext (written before "
                        + "it was sealed, or with sealing off); `share-ledger import --reseal-personal-data --from` this ledger "
                        + "re-encrypts it into a new one (docs/operations.md)")
            }
        } else {
            print("audit FAILED" + (report.firstBadPosition.map { " (first bad position \($0))" } ?? "") + ":")
            for problem in report.problems { print("  \(problem)") }
        }
        if !report.ok { throw ExitCode(1) }
    }
}

/// `share-ledger rebuild`: every read model again from the log, in one transaction.
struct RebuildCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rebuild",
        abstract: "Rebuild every read model from the log (all or nothing: a crash half way leaves the old ones).",
        discussion: """
            A few differences are changed in place in one transaction. Many (or with --rewrite-all), the read \
            models' second copies are filled in transactions of about 8 MiB while writes go on, then switched in \
            with one: the memory it takes does not grow with the ledger.
            """)

    @OptionGroup var ledger: LedgerOptions

    @Flag(
        name: .customLong("rewrite-all"),
        help: "Rewrite every read model whole, even where nothing differs (into their second copies, then switched in): after an upgrade whose notes say so, or to compact them.")
    var rewriteAll = false

    struct Summary: Encodable {
        var events: UInt64
        var seconds: Double
        var eventsPerSecond: Double
        /// Entries put or deleted in read models changed in place.
        var changedEntries: Int
        /// Whether the read models were rewritten into their second copies and switched in.
        var switchedCopies: Bool
    }

    func run() async throws {
        let (outcome, started) = try await ledger.withLedger { shareLedger in
            let started = ContinuousClock.now
            let outcome = try await LedgerAudit(shareLedger).rebuildReadModels(rewritingEverything: rewriteAll) { done, total in
                Output.progress("rebuild: \(done) of \(total) events")
            }
            Output.endProgress()
            return (outcome, started)
        }
        let seconds = (ContinuousClock.now - started).seconds
        let summary = Summary(
            events: outcome.events, seconds: seconds, eventsPerSecond: Double(outcome.events) / max(seconds, 1e-6),
            changedEntries: outcome.changedEntries, switchedCopies: outcome.switchedCopies)
        if ledger.json {
            Output.printJSON(summary)
        } else {
            let how =
                outcome.switchedCopies
                ? "rewritten into their second copies and switched in"
                : "\(outcome.changedEntries) entries changed in place"
            print("rebuilt the read models from \(outcome.events) events in \(String(format: "%.2f", seconds)) s (\(how))")
        }
    }
}

/// `share-ledger history`: the timeline of a share, a user or a container.
struct HistoryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "history",
        abstract: "Print the timeline of a share, a user or a container, from the history indexes.")

    @OptionGroup var ledger: LedgerOptions

    @Option(help: "A share URL.")
    var share: String?

    @Option(help: "A user record name (with --container).")
    var user: String?

    @Option(help: "A container identifier.")
    var container: String?

    @Option(help: "From this position, or this time (ISO 8601).")
    var since: String?

    @Option(help: "Up to this position, or this time (ISO 8601).")
    var until: String?

    @Option(help: "At most this many events.")
    var limit = 10_000

    func validate() throws {
        let subjects = [share != nil, user != nil, container != nil && user == nil].filter { $0 }.count
        guard subjects == 1 else { throw ValidationError("give one of --share URL, --user ID --container ID, --container ID") }
        if user != nil && container == nil { throw ValidationError("--user needs --container") }
        if limit < 1 { throw ValidationError("--limit must be 1 or more") }
        for bound in [since, until].compactMap({ $0 }) where HistoryCommand.bound(bound) == nil {
            throw ValidationError("\(bound) is neither a position nor an ISO 8601 time")
        }
    }

    static func bound(_ text: String) -> HistoryBound? {
        if let position = UInt64(text) { return .position(LogPosition(position)) }
        if let date = ISO8601DateFormatter().date(from: text) { return .time(date) }
        return nil
    }

    struct Entry: Encodable {
        var position: UInt64
        var recordedAt: String
        var container: String
        var actor: String
        var stream: String
        var event: String
        var payload: String
    }

    func run() async throws {
        let subject: HistorySubject
        if let share {
            guard let url = URL(string: share) else { throw ValidationError("\(share) is not a URL") }
            subject = .share(url)
        } else if let user, let container {
            subject = .user(user, container: container)
        } else {
            subject = .container(container ?? "")
        }
        let entries = try await ledger.withLedger(readOnly: true) { shareLedger in
            try LedgerAudit(shareLedger).history(
                of: subject, since: since.flatMap(HistoryCommand.bound), until: until.flatMap(HistoryCommand.bound),
                limit: limit)
        }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if ledger.json {
            Output.printJSON(
                entries.map {
                    Entry(
                        position: $0.envelope.position.rawValue, recordedAt: formatter.string(from: $0.envelope.recordedAt),
                        container: $0.envelope.container, actor: $0.envelope.actor, stream: $0.envelope.stream,
                        event: $0.name, payload: $0.payloadJSON)
                })
            return
        }
        if entries.isEmpty { print("no events") }
        for entry in entries {
            print(
                "\(String(entry.envelope.position.rawValue).leftPad(8))  \(formatter.string(from: entry.envelope.recordedAt))  "
                    + "\(entry.envelope.actor.rightPad(12)) \(entry.name.rightPad(24)) \(entry.summary)")
        }
    }
}

/// `share-ledger access`: who could access a share at a past point, with which permission.
struct AccessCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "access",
        abstract: "Show who could access a share at a past position or time, and with which permission.")

    @OptionGroup var ledger: LedgerOptions

    @Option(help: "The share URL.")
    var share: String

    @Option(help: "A log position, or an ISO 8601 time.")
    var at: String

    func validate() throws {
        guard HistoryCommand.bound(at) != nil else { throw ValidationError("\(at) is neither a position nor an ISO 8601 time") }
        guard URL(string: share) != nil else { throw ValidationError("\(share) is not a URL") }
    }

    func run() async throws {
        let access = try await ledger.withLedger(readOnly: true) { shareLedger in
            try LedgerAudit(shareLedger).access(to: URL(string: share)!, at: HistoryCommand.bound(at)!)
        }
        if ledger.json {
            Output.printJSON(AccessJSON(access))
            return
        }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        print("as of position \(access.position) (\(formatter.string(from: access.recordedAt))):")
        guard access.existed else {
            print("  the share did not exist")
            return
        }
        print("  public permission  \(access.publicPermission)")
        if access.allowsAccessRequests { print("  access requests    allowed") }
        if !access.requesters.isEmpty { print("  requesters         \(access.requesters.joined(separator: ", "))") }
        if !access.blockedIdentities.isEmpty { print("  blocked            \(access.blockedIdentities.joined(separator: ", "))") }
        for entry in access.participants {
            let who = (entry.userRecordName ?? "(no account yet)") + (entry.isApprovedRequester ? " (approved request)" : "")
            print(
                "  \((entry.hadAccess ? "access" : "no access").rightPad(10)) \(entry.role.description.rightPad(14)) "
                    + "\(entry.acceptanceStatus.description.rightPad(9)) \(entry.permission.description.rightPad(10)) \(who)")
        }
    }
}

/// `share-ledger snapshot`: save a copy of the read models as of the head (or list the saved ones),
/// so that state-as-of queries replay only the events after the nearest snapshot.
struct SnapshotCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "snapshot",
        abstract: "Save a read-model snapshot at the head (for fast state-as-of views), or list them.",
        discussion: "Run it periodically, e.g. every 100,000 events. Snapshots live in DIR/snapshots.")

    @OptionGroup var ledger: LedgerOptions

    @Flag(help: "List the saved snapshots instead of saving one.")
    var list = false

    func run() async throws {
        let (result, started) = try await ledger.withLedger(readOnly: list) { shareLedger in
            let started = ContinuousClock.now
            let result = try list ? shareLedger.readModelSnapshots() : [shareLedger.saveReadModelSnapshot()]
            return (result, started)
        }
        let seconds = (ContinuousClock.now - started).seconds
        if ledger.json {
            if list { Output.printJSON(result) } else if let info = result.first { Output.printJSON(info) }
        } else if list {
            if result.isEmpty { print("no read-model snapshots") }
            for info in result { print("position \(info.position)  \(info.entries) entries  \(info.path)") }
        } else if let info = result.first {
            print(
                "saved the read models at position \(info.position) (\(info.entries) entries) to \(info.path) in "
                    + String(format: "%.2f s", seconds))
        }
    }
}
