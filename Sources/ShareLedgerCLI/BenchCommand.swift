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

    @Option(help: "durable (default), relaxed or unsafeNoSync, for the ledger and its raw baseline alike.")
    var durability: Durability = .durable

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
            let bench = AppendBench(root: root, round: round, durability: durability)
            Output.progress("round \(round)/\(repeats): 64 concurrent callers")
            let concurrent = try await bench.concurrent(callers: callers, perCaller: perCaller)
            Output.progress("round \(round)/\(repeats): raw replay of \(concurrent.commitSizes.count) commits")
            let concurrentRaw = try bench.rawReplay(
                name: "concurrent-raw", commitSizes: concurrent.commitSizes, valueSize: concurrent.valueSize)
            let concurrentRawSame = try bench.rawReplay(
                name: "concurrent-raw-same", commitSizes: concurrent.commitSizes, valueSize: concurrent.valueSize,
                sameWrites: true)
            Output.progress("round \(round)/\(repeats): single caller")
            let single = try await bench.concurrent(callers: 1, perCaller: singleAppends)
            Output.progress("round \(round)/\(repeats): raw one-record commits")
            let singleRaw = try bench.rawReplay(
                name: "single-raw", commitSizes: single.commitSizes, valueSize: single.valueSize)
            let singleRawSame = try bench.rawReplay(
                name: "single-raw-same", commitSizes: single.commitSizes, valueSize: single.valueSize,
                sameWrites: true, streams: 1)
            Output.endProgress()
            let round: [String: Double] = [
                "append.concurrent64.perSecond": concurrent.perSecond,
                "append.concurrent64.rawPerSecond": concurrentRaw,
                "append.concurrent64.ratio": concurrent.perSecond / concurrentRaw,
                "append.concurrent64.meanCommitSize": concurrent.meanCommitSize,
                "append.concurrent64.rawSameWritesPerSecond": concurrentRawSame,
                "append.single.rawSameWritesPerSecond": singleRawSame,
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
    let durability: Durability

    init(root: URL, round: Int, durability: Durability) {
        self.durability = durability
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
            path: directory.appendingPathComponent("ledger-\(callers)").path, durability: durability,
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
                        metadata.commandID = CommandID.make()
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

    /// Replays `commitSizes` against a bare LMDB environment: one write transaction per commit (same
    /// durability), `MDB_APPEND` cursor puts of `valueSize`-byte values under 8-byte big-endian keys.
    ///
    /// With `sameWrites`, each record also gets the other writes the ledger makes for it, as bare puts:
    /// a 20-byte idempotency record under a time-ordered 41-byte key, a 16-byte stream record under one
    /// of `streams` keys, and per commit a 48-byte head record.
    func rawReplay(
        name: String, commitSizes: [Int], valueSize: Int, sameWrites: Bool = false, streams: Int = 64
    ) throws -> Double {
        let path = directory.appendingPathComponent(name).path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let environment = try Environment(
            options: EnvironmentOptions(path: path, mapSize: 1 << 30, durability: durability.rawSyncMode))
        defer { environment.close() }
        let databases = try environment.openDatabases([("log", []), ("meta", []), ("commands", []), ("streams", [])])
        let (log, meta, commands, streamsDB) = (databases[0], databases[1], databases[2], databases[3])
        let value = [UInt8](repeating: 0xA5, count: valueSize)
        let commandValue = [UInt8](repeating: 1, count: 20)
        let streamValue = [UInt8](repeating: 2, count: 16)
        let headValue = [UInt8](repeating: 3, count: 48)
        let prefix = Array("iCloud.com.example.bench".utf8) + [0]
        let streamKeys = (0..<streams).map { prefix + Array("bench/\($0)".utf8) }
        var position: UInt64 = 0
        let started = ContinuousClock.now
        try value.withUnsafeBytes { valueBytes in
            for size in commitSizes {
                try environment.write { txn in
                    try txn.withCursor(log) { cursor in
                        for _ in 0..<size {
                            position += 1
                            try BigEndian.withBytes(of: position) { try cursor.put(key: $0, value: valueBytes, flags: .append) }
                            if sameWrites {
                                let commandKey = prefix + BigEndian.bytes(of: position) + BigEndian.bytes(of: position)
                                try txn.put(commands, key: commandKey, value: commandValue)
                                try txn.put(streamsDB, key: streamKeys[Int(position) % streams], value: streamValue)
                            }
                        }
                    }
                    if sameWrites { try txn.put(meta, key: Array("head".utf8), value: headValue) }
                }
            }
        }
        let seconds = (ContinuousClock.now - started).seconds
        return Double(commitSizes.reduce(0, +)) / seconds
    }
}

extension Durability: ExpressibleByArgument {
    var rawSyncMode: SyncMode {
        switch self {
        case .durable: return .durable
        case .relaxed: return .relaxed
        case .unsafeNoSync: return .unsafeNoSync
        }
    }
}

extension String {
    func leftPad(_ width: Int) -> String { count >= width ? self : String(repeating: " ", count: width - count) + self }
    func rightPad(_ width: Int) -> String { count >= width ? self : self + String(repeating: " ", count: width - count) }
}
