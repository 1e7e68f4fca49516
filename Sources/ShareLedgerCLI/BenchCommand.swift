import ArgumentParser
import Foundation
import LMDB
import ShareLedger

/// `share-ledger bench`: throughput figures, each measured next to the raw LMDB baseline that bounds it.
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Measure append throughput next to a raw LMDB baseline, in one process.",
        discussion: """
            Each figure is measured on a fresh ledger under --path, then the same commit pattern (the \
            same number of records per commit, the same record sizes, the same durability) is replayed \
            with bare LMDB cursor puts. Ratios compare the two measured side by side in this run.
            """)

    @Option(help: "A directory for the scratch ledgers (created; emptied of bench-* folders first).")
    var path = "./.share-ledger-bench"

    @Flag(help: "A short run (under a minute).")
    var quick = false

    @Option(help: "Repeat every measurement this many times; figures are medians, with min and max.")
    var repeats = 1

    @Flag(help: "Print {\"figures\": {NAME: number}} as JSON.")
    var json = false

    func validate() throws {
        guard (1...50).contains(repeats) else { throw ValidationError("--repeats must be 1...50") }
    }

    struct Report: Encodable {
        var figures: [String: Double]
        var minimum: [String: Double]
        var maximum: [String: Double]
        var repeats: Int
        var quick: Bool
    }

    func run() async throws {
        let root = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let callers = 64
        let perCaller = quick ? 200 : 1_000
        let singleAppends = quick ? 2_000 : 10_000
        var samples: [String: [Double]] = [:]
        for round in 1...repeats {
            let bench = AppendBench(root: root, round: round)
            Output.progress("round \(round)/\(repeats): 64 concurrent callers")
            let concurrent = try await bench.concurrent(callers: callers, perCaller: perCaller)
            Output.progress("round \(round)/\(repeats): raw replay of \(concurrent.commitSizes.count) commits")
            let concurrentRaw = try bench.rawReplay(
                name: "concurrent-raw", commitSizes: concurrent.commitSizes, valueSize: concurrent.valueSize)
            Output.progress("round \(round)/\(repeats): single caller")
            let single = try await bench.concurrent(callers: 1, perCaller: singleAppends)
            Output.progress("round \(round)/\(repeats): raw one-record commits")
            let singleRaw = try bench.rawReplay(
                name: "single-raw", commitSizes: single.commitSizes, valueSize: single.valueSize)
            Output.endProgress()
            let round: [String: Double] = [
                "append.concurrent64.perSecond": concurrent.perSecond,
                "append.concurrent64.rawPerSecond": concurrentRaw,
                "append.concurrent64.ratio": concurrent.perSecond / concurrentRaw,
                "append.concurrent64.meanCommitSize": concurrent.meanCommitSize,
                "append.single.perSecond": single.perSecond,
                "append.single.rawPerSecond": singleRaw,
                "append.single.ratio": single.perSecond / singleRaw,
                "append.storedBytesPerEvent": Double(concurrent.valueSize),
            ]
            for (name, value) in round { samples[name, default: []].append(value) }
            try? FileManager.default.removeItem(at: bench.directory)
        }
        let report = Report(
            figures: samples.mapValues { median($0) }, minimum: samples.mapValues { $0.min() ?? 0 },
            maximum: samples.mapValues { $0.max() ?? 0 }, repeats: repeats, quick: quick)
        if json {
            Output.printJSON(report)
        } else {
            print("figure                                    median          min          max")
            for name in report.figures.keys.sorted() {
                let cells = [report.figures[name]!, report.minimum[name]!, report.maximum[name]!].map {
                    Output.grouped($0).leftPad(12)
                }
                print(name.rightPad(38) + cells.joined(separator: " "))
            }
        }
    }

    private func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return 0 }
        return sorted.count % 2 == 1
            ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
    }
}

/// The append measurements of one round.
struct AppendBench {
    let directory: URL

    init(root: URL, round: Int) {
        directory = root.appendingPathComponent("bench-\(ProcessInfo.processInfo.processIdentifier)-\(round)")
        try? FileManager.default.removeItem(at: directory)
    }

    struct LedgerFigures {
        var perSecond: Double
        var commitSizes: [Int]
        var valueSize: Int
        var meanCommitSize: Double { Double(commitSizes.reduce(0, +)) / Double(max(1, commitSizes.count)) }
    }

    /// `callers` tasks, each awaiting `perCaller` durable appends of one 200-byte event.
    func concurrent(callers: Int, perCaller: Int) async throws -> LedgerFigures {
        var configuration = EventLog.Configuration(
            path: directory.appendingPathComponent("ledger-\(callers)").path, durability: .durable,
            initialMapSize: 1 << 30)
        configuration.recordsCommitSizes = true
        let log = try EventLog.open(configuration)
        let payload = (0..<200).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 7) }
        let started = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for caller in 0..<callers {
                group.addTask {
                    let metadataBase = CommandMetadata(container: "iCloud.com.example.bench", actor: "caller-\(caller)")
                    for _ in 0..<perCaller {
                        var metadata = metadataBase
                        metadata.commandID = UUID()
                        try await log.append(
                            [EventDraft(type: "shareledger.bench.Payload", payload: payload)],
                            to: "bench/\(caller)", metadata: metadata)
                    }
                }
            }
            try await group.waitForAll()
        }
        let seconds = (ContinuousClock.now - started).seconds
        let sizes = log.commitSizes()
        let valueSize = try log.storedSize(at: 1) ?? 0
        await log.close()
        return LedgerFigures(
            perSecond: Double(callers * perCaller) / seconds, commitSizes: sizes, valueSize: valueSize)
    }

    /// Replays `commitSizes` against a bare LMDB environment: one durable write transaction per commit,
    /// `MDB_APPEND` cursor puts of `valueSize`-byte values under 8-byte big-endian keys.
    func rawReplay(name: String, commitSizes: [Int], valueSize: Int) throws -> Double {
        let path = directory.appendingPathComponent(name).path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let environment = try Environment(
            options: EnvironmentOptions(path: path, mapSize: 1 << 30, durability: .durable))
        defer { environment.close() }
        let log = try environment.openDatabases([("log", [])])[0]
        let value = [UInt8](repeating: 0xA5, count: valueSize)
        var position: UInt64 = 0
        let started = ContinuousClock.now
        try value.withUnsafeBytes { valueBytes in
            for size in commitSizes {
                try environment.write { txn in
                    try txn.withCursor(log) { cursor in
                        for _ in 0..<size {
                            position += 1
                            try BigEndian.withBytes(of: position) { try cursor.put(key: $0, value: valueBytes, flags: .append) }
                        }
                    }
                }
            }
        }
        let seconds = (ContinuousClock.now - started).seconds
        return Double(commitSizes.reduce(0, +)) / seconds
    }
}

extension String {
    func leftPad(_ width: Int) -> String { count >= width ? self : String(repeating: " ", count: width - count) + self }
    func rightPad(_ width: Int) -> String { count >= width ? self : self + String(repeating: " ", count: width - count) }
}
