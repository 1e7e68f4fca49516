import ArgumentParser
import Foundation
import ShareLedger
import ShareLedgerAudit
import ShareLedgerReports

/// `share-ledger report`: pictures of the history for auditors, as self-contained HTML files.
struct ReportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "report",
        abstract: "Write access timelines and access reviews as self-contained HTML (or CSV) files.",
        discussion: """
            Each page is one file with inline SVG and CSS and no script: it opens offline and prints. \
            People appear by user record name; an email or phone only with --show-contact, and only while \
            the person's key exists (a forgotten person shows as erased).
            """,
        subcommands: [ReportShareCommand.self, ReportUserCommand.self, ReportAccessReviewCommand.self])
}

/// What every report writes and says.
enum ReportOutput {
    /// Writes `text` to `path` (replacing it); exits 1 with a clear message when it cannot.
    static func write(_ text: String, to path: String, json: Bool) throws {
        do {
            try Data(text.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            Output.failure(LedgerError(.invalidArguments, "cannot write \(path): \(error.localizedDescription)"), json: json)
            throw ExitCode(1)
        }
    }

    /// A bound given as a position or an ISO 8601 time, refused with a clear message otherwise.
    static func bound(_ text: String?, _ option: String) throws -> HistoryBound? {
        guard let text else { return nil }
        guard let bound = HistoryCommand.bound(text) else {
            throw ValidationError("\(option) \(text) is neither a position nor an ISO 8601 time")
        }
        return bound
    }

    struct Written: Encodable {
        var file: String
        var lanes: Int
        var events: Int
        var chainHolds: Bool
        var verifiedThrough: UInt64
        var checkpoint: UInt64?
        var readMillis: Double
        var renderMillis: Double
    }
}

/// How a drawn report words its `--from`.
protocol ReportWindowWording {
    /// The help of `--from`.
    static var fromHelp: String { get }
}

/// `--html`, `--as-of`, `--from` and `--to`, as the drawn reports take them: the file to write and
/// the window drawn.
struct ReportWindowOptions<Wording: ReportWindowWording>: ParsableArguments {
    @Option(help: "The HTML file to write.")
    var html: String

    @Option(name: .customLong("as-of"), help: "The report's end: a position or an ISO 8601 time (default: the head).")
    var asOf: String?

    @Option(help: ArgumentHelp(Wording.fromHelp))
    var from: String?

    @Option(help: "Draw up to this position or time.")
    var to: String?

    /// The bounds, each refused with a clear message when it is neither a position nor an ISO 8601
    /// time.
    func bounds() throws -> (asOf: HistoryBound?, from: HistoryBound?, to: HistoryBound?) {
        (try ReportOutput.bound(asOf, "--as-of"), try ReportOutput.bound(from, "--from"), try ReportOutput.bound(to, "--to"))
    }
}

/// `--trusted-key`, as every report takes it: the keys whose checkpoints count in the header.
struct TrustedKeyOptions: ParsableArguments {
    @Option(name: .customLong("trusted-key"), help: "A public key file: only a checkpoint signed by a trusted key counts in the header. Repeatable.")
    var trustedKeys: [String] = []

    /// The keys read from the files; exits 2 with a clear message when one cannot be read.
    func keys(json: Bool) throws -> [CheckpointPublicKey] {
        try CheckpointPublicKey.read(trustedKeys, json: json)
    }
}

/// `share-ledger report share URL --html FILE`: one share's access timeline.
struct ReportShareCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share",
        abstract: "Draw a share's access timeline: a lane per person, marks linked to the events, the chain's state.")

    @OptionGroup var ledger: LedgerOptions

    @Argument(help: "The share URL.")
    var url: String

    @OptionGroup var window: ReportWindowOptions<Wording>

    /// The share report's `--from`: events before it still decide who stood where.
    enum Wording: ReportWindowWording {
        static let fromHelp = "Draw from this position or time (earlier events still count for who stood where)."
    }

    @Flag(name: .customLong("show-contact"), help: "Show each person's email or phone while their key exists (personal data: only when asked).")
    var showContact = false

    @OptionGroup var trusted: TrustedKeyOptions

    @Option(name: .customLong("max-lanes"), help: "Lanes drawn one by one; the rest collapse into one lane (2...1000).")
    var maxLanes = ShareReport.defaultMaxLanes

    func validate() throws {
        guard URL(string: url) != nil else { throw ValidationError("\(url) is not a URL") }
        guard (2...1_000).contains(maxLanes) else { throw ValidationError("--max-lanes must be 2...1000") }
        _ = try window.bounds()
    }

    func run() async throws {
        let bounds = try window.bounds()
        var options = ShareReport.Options(
            asOf: bounds.asOf, from: bounds.from, to: bounds.to, showContact: showContact,
            trustedKeys: try trusted.keys(json: ledger.json))
        options.now = Date()
        let (report, started) = try await ledger.withLedger(readOnly: true) { shareLedger in
            let started = ContinuousClock.now
            return (try ShareReport.make(ledger: shareLedger, url: URL(string: url)!, options: options), started)
        }
        let read = ContinuousClock.now
        let page = report.html(maxLanes: maxLanes)
        let rendered = ContinuousClock.now
        try ReportOutput.write(page, to: window.html, json: ledger.json)
        let written = ReportOutput.Written(
            file: window.html, lanes: report.timeline.lanes.count, events: report.timeline.window.count, chainHolds: report.chain.holds,
            verifiedThrough: report.chain.verifiedThrough, checkpoint: report.chain.checkpoint?.position,
            readMillis: (read - started).seconds * 1_000, renderMillis: (rendered - read).seconds * 1_000)
        if ledger.json {
            Output.printJSON(written)
        } else {
            print(
                "wrote \(window.html): \(written.lanes) lanes, \(written.events) events drawn; "
                    + (written.chainHolds ? "chain verified to \(written.verifiedThrough)" : "chain BROKEN after \(written.verifiedThrough)")
                    + (written.checkpoint.map { ", checkpoint at \($0)" } ?? ", no checkpoint")
                    + String(format: " (read %.0f ms, render %.0f ms)", written.readMillis, written.renderMillis))
        }
    }
}

/// `share-ledger report user NAME --container C --html FILE`: a lane per share the person stood in.
struct ReportUserCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "user",
        abstract: "Draw a person's access over time: a lane per share they owned, were invited to, requested or were blocked from.")

    @OptionGroup var ledger: LedgerOptions

    @Argument(help: "The user record name.")
    var user: String

    @Option(help: "The container.")
    var container: String

    @OptionGroup var window: ReportWindowOptions<Wording>

    /// The user report's `--from`.
    enum Wording: ReportWindowWording {
        static let fromHelp = "Draw from this position or time."
    }

    @OptionGroup var trusted: TrustedKeyOptions

    func validate() throws {
        _ = try window.bounds()
    }

    func run() async throws {
        let bounds = try window.bounds()
        let options = ShareReport.Options(
            asOf: bounds.asOf, from: bounds.from, to: bounds.to, trustedKeys: try trusted.keys(json: ledger.json))
        let report = try await ledger.withLedger(readOnly: true) { shareLedger in
            try UserReport.make(ledger: shareLedger, user: user, container: container, options: options)
        }
        try ReportOutput.write(report.html(), to: window.html, json: ledger.json)
        if ledger.json {
            Output.printJSON(["file": window.html, "shares": "\(report.shares.count)", "events": "\(report.axis.count)"])
        } else {
            print("wrote \(window.html): \(report.shares.count) shares, \(report.axis.count) events drawn")
        }
    }
}

/// `share-ledger report access-review --container C --from T1 --to T2 (--html FILE | --csv FILE)`.
struct ReportAccessReviewCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "access-review",
        abstract: "List everyone who had access to anything in a container during a window: permission, positions, how they got it.")

    @OptionGroup var ledger: LedgerOptions

    @Option(help: "The container.")
    var container: String

    @Option(help: "The window's start: a position or an ISO 8601 time.")
    var from: String

    @Option(help: "The window's end: a position or an ISO 8601 time.")
    var to: String

    @Option(help: "Write the review as an HTML page to this file.")
    var html: String?

    @Option(help: "Write the review as CSV to this file.")
    var csv: String?

    @OptionGroup var trusted: TrustedKeyOptions

    func validate() throws {
        guard html != nil || csv != nil else { throw ValidationError("give --html FILE, --csv FILE or both") }
        _ = try ReportOutput.bound(from, "--from")
        _ = try ReportOutput.bound(to, "--to")
    }

    func run() async throws {
        let keys = try trusted.keys(json: ledger.json)
        let from = try ReportOutput.bound(from, "--from")!
        let to = try ReportOutput.bound(to, "--to")!
        let review = try await ledger.withLedger(readOnly: true) { shareLedger in
            try AccessReview.make(ledger: shareLedger, container: container, from: from, to: to, trustedKeys: keys)
        }
        if let html { try ReportOutput.write(review.html(), to: html, json: ledger.json) }
        if let csv { try ReportOutput.write(review.csv(), to: csv, json: ledger.json) }
        let files = [html, csv].compactMap { $0 }.joined(separator: " and ")
        if ledger.json {
            Output.printJSON(["files": files, "rows": "\(review.rows.count)", "from": "\(review.fromPosition)", "to": "\(review.toPosition)"])
        } else {
            print("wrote \(files): \(review.rows.count) accesses, positions \(review.fromPosition)–\(review.toPosition)")
        }
    }
}

/// `bench --html`: the page of one run, or of saved runs side by side.
enum BenchPage {
    static func write(files: [String], to path: String) throws {
        var runs: [BenchRun] = []
        for file in files {
            do {
                let data = try Data(contentsOf: URL(fileURLWithPath: file))
                runs.append(try BenchRun.decode(data, name: (file as NSString).lastPathComponent))
            } catch {
                Output.failure(
                    LedgerError(.invalidArguments, "\(file) is not the JSON of `bench --json` (figures, minimum, maximum): \(error.localizedDescription)"),
                    json: false)
                throw ExitCode(1)
            }
        }
        try write(runs: runs, to: path)
    }

    static func write(runs: [BenchRun], to path: String) throws {
        try ReportOutput.write(BenchReport(runs: runs).html(), to: path, json: false)
        FileHandle.standardError.write(Data("bench: wrote \(path)\n".utf8))
    }
}
