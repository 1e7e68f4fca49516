import Foundation
import ShareLedger
import ShareLedgerBenchmarkSupport

// PeerComparison: the same share workload (see Workload.swift) against ShareLedger (durable) and
// SQLite through GRDB (WAL, synchronous=FULL), in one run, interleaved in segments so that drift in
// the machine's flush times touches both alike.
//
//   swift run -c release --package-path Benchmarks PeerComparison [--path DIR] [--repeats N] [--quick] [--json]

struct Options {
    var path = FileManager.default.temporaryDirectory.appendingPathComponent("peer-comparison").path
    var repeats = 3
    var quick = false
    var json = false
    var only: Set<String> = ["single", "concurrent"]
    /// ShareLedger's durability; `durable` is the one that matches SQLite's synchronous=FULL.
    var durability: Durability = .durable

    static func parse(_ arguments: [String]) -> Options {
        var options = Options()
        var iterator = arguments.makeIterator()
        func value(_ name: String) -> String {
            guard let value = iterator.next() else { fail("\(name) needs a value") }
            return value
        }
        while let argument = iterator.next() {
            switch argument {
            case "--path": options.path = value(argument)
            case "--repeats":
                guard let repeats = Int(value(argument)), (1...50).contains(repeats) else { fail("--repeats must be 1...50") }
                options.repeats = repeats
            case "--quick": options.quick = true
            case "--json": options.json = true
            case "--only": options.only = Set(value(argument).split(separator: ",").map(String.init))
            case "--durability":
                guard let durability = Durability(rawValue: value(argument)) else {
                    fail("--durability is durable, relaxed or unsafeNoSync")
                }
                options.durability = durability
            case "--help", "-h":
                print(
                    """
                    usage: PeerComparison [--path DIR] [--repeats N] [--quick] [--json] [--only single,concurrent]
                                          [--durability durable|relaxed|unsafeNoSync]
                      --path     scratch directory (default: $TMPDIR/peer-comparison; emptied first)
                      --repeats  rounds; figures are medians, with min and max (default 3)
                      --quick    a short run (about a minute a round instead of several)
                      --json     print {"figures": {NAME: number}, "minimum": ..., "maximum": ...}
                      --only     run only these parts (default: single,concurrent)
                      --durability  ShareLedger's durability (default durable, which matches SQLite's
                                 synchronous=FULL; relaxed flushes once per commit but a power loss may
                                 undo the last one; SQLite stays at FULL either way)
                    """)
                exit(0)
            default: fail("unknown argument \(argument); see --help")
            }
        }
        return options
    }
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("PeerComparison: \(message)\n".utf8))
    exit(2)
}

func progress(_ message: String, json: Bool) {
    FileHandle.standardError.write(Data("\(message)\n".utf8))
}

let segments = 4

/// Bytes this process has passed to write calls so far (`wchar` of /proc/self/io; 0 where there is
/// none). The sides run one after the other, so the difference over a side's segment is its writes:
/// pages of LMDB's copy-on-write B-trees, or pages appended to SQLite's WAL.
func writtenBytes() -> Double {
    guard let text = try? String(contentsOfFile: "/proc/self/io", encoding: .utf8) else { return 0 }
    for line in text.split(separator: "\n") where line.hasPrefix("wchar:") {
        return Double(line.dropFirst(6).trimmingCharacters(in: .whitespaces)) ?? 0
    }
    return 0
}

/// Runs `body`, adding its seconds to `seconds` and the bytes it wrote to `bytes`.
func measure(_ seconds: inout Double, _ bytes: inout Double, _ body: () async throws -> Double) async rethrows {
    let before = writtenBytes()
    seconds += try await body()
    bytes += writtenBytes() - before
}

/// One caller awaiting each action: one commit per action on both sides.
func single(round: Int, options: Options) async throws -> [String: Double] {
    let workload = Workload(callers: 1, lifecycles: options.quick ? 40 : 200)
    let directory = URL(fileURLWithPath: options.path).appendingPathComponent("round\(round)-single")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let ledger = try LedgerPeer(path: directory.appendingPathComponent("ledger").path, durability: options.durability)
    let sqlite = try SQLitePeer(path: directory.appendingPathComponent("peer.sqlite").path, mode: .transactionPerAction)
    try await ledger.setUp(workload)
    try await sqlite.setUp(workload)
    let ledgerEventsBefore = try ledger.eventCount()
    var ledgerSeconds = 0.0
    var sqliteSeconds = 0.0
    var ledgerBytes = 0.0
    var sqliteBytes = 0.0
    for segment in 0..<segments {
        progress("round \(round): one caller, segment \(segment + 1)/\(segments)", json: options.json)
        let range = workload.lifecycles * segment / segments..<workload.lifecycles * (segment + 1) / segments
        try await measure(&ledgerSeconds, &ledgerBytes) { try await ledger.run(workload, lifecycles: range) }
        try await measure(&sqliteSeconds, &sqliteBytes) { try await sqlite.run(workload, lifecycles: range) }
    }
    try check(sqlite, workload)
    try check(ledger, workload, before: ledgerEventsBefore)
    await ledger.close()
    await sqlite.close()
    try? FileManager.default.removeItem(at: directory)
    let actions = Double(workload.totalActions)
    return [
        "peer.single.shareLedgerPerSecond": actions / ledgerSeconds,
        "peer.single.sqlitePerSecond": actions / sqliteSeconds,
        "peer.single.ratio": sqliteSeconds / ledgerSeconds,
        "peer.single.shareLedgerWrittenBytesPerAction": ledgerBytes / actions,
        "peer.single.sqliteWrittenBytesPerAction": sqliteBytes / actions,
    ]
}

/// 64 concurrent callers: ShareLedger's group commit, against SQLite with the same group commit and
/// against SQLite with GRDB's one transaction per action.
func concurrent(round: Int, options: Options) async throws -> [String: Double] {
    let workload = Workload(callers: 64, lifecycles: options.quick ? 4 : 12)
    let directory = URL(fileURLWithPath: options.path).appendingPathComponent("round\(round)-concurrent")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let ledger = try LedgerPeer(path: directory.appendingPathComponent("ledger").path, durability: options.durability)
    let grouped = try SQLitePeer(path: directory.appendingPathComponent("grouped.sqlite").path, mode: .groupCommit)
    let perAction = try SQLitePeer(
        path: directory.appendingPathComponent("per-action.sqlite").path, mode: .transactionPerAction)
    try await ledger.setUp(workload)
    try await grouped.setUp(workload)
    try await perAction.setUp(workload)
    let ledgerCommitsBefore = ledger.commitCount
    let ledgerEventsBefore = try ledger.eventCount()
    var seconds = (ledger: 0.0, grouped: 0.0, perAction: 0.0)
    var bytes = (ledger: 0.0, grouped: 0.0, perAction: 0.0)
    for segment in 0..<segments {
        progress("round \(round): 64 callers, segment \(segment + 1)/\(segments)", json: options.json)
        let range = workload.lifecycles * segment / segments..<workload.lifecycles * (segment + 1) / segments
        try await measure(&seconds.ledger, &bytes.ledger) { try await ledger.run(workload, lifecycles: range) }
        try await measure(&seconds.grouped, &bytes.grouped) { try await grouped.run(workload, lifecycles: range) }
        try await measure(&seconds.perAction, &bytes.perAction) { try await perAction.run(workload, lifecycles: range) }
    }
    try check(grouped, workload)
    try check(perAction, workload)
    try check(ledger, workload, before: ledgerEventsBefore)
    let ledgerCommits = ledger.commitSizes(from: ledgerCommitsBefore)
    let groupedBatches = grouped.batchSizes(from: 0)
    await ledger.close()
    await grouped.close()
    await perAction.close()
    try? FileManager.default.removeItem(at: directory)
    let actions = Double(workload.totalActions)
    return [
        "peer.concurrent64.shareLedgerPerSecond": actions / seconds.ledger,
        "peer.concurrent64.sqlitePerSecond": actions / seconds.grouped,
        "peer.concurrent64.ratio": seconds.grouped / seconds.ledger,
        "peer.concurrent64.sqliteTransactionPerActionPerSecond": actions / seconds.perAction,
        "peer.concurrent64.ratioToTransactionPerAction": seconds.perAction / seconds.ledger,
        "peer.concurrent64.shareLedgerMeanCommitActions": mean(ledgerCommits),
        "peer.concurrent64.sqliteMeanCommitActions": mean(groupedBatches),
        "peer.concurrent64.shareLedgerWrittenBytesPerAction": bytes.ledger / actions,
        "peer.concurrent64.sqliteWrittenBytesPerAction": bytes.grouped / actions,
        "peer.concurrent64.sqliteTransactionPerActionWrittenBytesPerAction": bytes.perAction / actions,
    ]
}

/// Every action of the workload appended exactly one event on the SQLite side (a refusal would
/// have thrown), and the connection really is WAL with synchronous=FULL.
func check(_ sqlite: SQLitePeer, _ workload: Workload) throws {
    let events = try sqlite.eventCount()
    guard events == workload.totalActions else { fail("SQLite holds \(events) events, expected \(workload.totalActions)") }
    let pragmas = try sqlite.pragmas()
    guard pragmas.journalMode == "wal", pragmas.synchronous == 2 else {
        fail("SQLite runs journal_mode=\(pragmas.journalMode) synchronous=\(pragmas.synchronous), not wal/FULL(2)")
    }
}

/// Every action of the workload appended exactly one event on the ShareLedger side too.
func check(_ ledger: LedgerPeer, _ workload: Workload, before: UInt64) throws {
    let appended = try ledger.eventCount() - before
    guard appended == UInt64(workload.totalActions) else {
        fail("ShareLedger appended \(appended) events, expected \(workload.totalActions)")
    }
}

func mean(_ values: [Int]) -> Double { values.isEmpty ? 0 : Double(values.reduce(0, +)) / Double(values.count) }

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return 0 }
    return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

struct Report: Encodable {
    var figures: [String: Double]
    var minimum: [String: Double]
    var maximum: [String: Double]
    var repeats: Int
    var quick: Bool
    var sqlite = "WAL, synchronous=FULL, GRDB DatabasePool"
    var shareLedger: String
}

let options = Options.parse(Array(CommandLine.arguments.dropFirst()))
try? FileManager.default.removeItem(atPath: options.path)
try FileManager.default.createDirectory(atPath: options.path, withIntermediateDirectories: true)
var samples: [String: [Double]] = [:]
for round in 1...options.repeats {
    var figures: [String: Double] = [:]
    if options.only.contains("single") { figures.merge(try await single(round: round, options: options)) { $1 } }
    if options.only.contains("concurrent") { figures.merge(try await concurrent(round: round, options: options)) { $1 } }
    for (name, value) in figures { samples[name, default: []].append(value) }
}
let report = Report(
    figures: samples.mapValues(median), minimum: samples.mapValues { $0.min() ?? 0 },
    maximum: samples.mapValues { $0.max() ?? 0 }, repeats: options.repeats, quick: options.quick,
    shareLedger: options.durability.rawValue)
if options.json {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    print(String(decoding: try encoder.encode(report), as: UTF8.self))
} else {
    func cell(_ value: Double) -> String {
        let text = value >= 100 ? String(Int(value.rounded())) : String(format: "%.2f", value)
        return String(repeating: " ", count: max(0, 12 - text.count)) + text
    }
    let width = (report.figures.keys.map(\.count).max() ?? 0) + 2
    print("figure".padding(toLength: width, withPad: " ", startingAt: 0) + "      median         min         max")
    for name in report.figures.keys.sorted() {
        print(
            name.padding(toLength: width, withPad: " ", startingAt: 0) + cell(report.figures[name]!)
                + cell(report.minimum[name]!) + cell(report.maximum[name]!))
    }
    print(
        "ratio = ShareLedger / SQLite (actions per second); ShareLedger: \(options.durability.rawValue); "
            + "SQLite: WAL, synchronous=FULL, through GRDB.")
}
