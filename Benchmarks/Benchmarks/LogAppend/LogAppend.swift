import Benchmark
import Foundation
import ShareLedger

/// A scratch ledger in a fresh temporary directory.
private func scratchLedger(_ name: String, durability: Durability) throws -> (EventLog, URL) {
    let directory = FileManager.default.temporaryDirectory
        .appendingPathComponent("shareledger-benchmark-\(name)-\(UUID().uuidString)")
    let log = try EventLog.open(
        EventLog.Configuration(path: directory.path, durability: durability, initialMapSize: 1 << 30))
    return (log, directory)
}

private let payload = (0..<200).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 7) }
private let draft = EventDraft(type: "shareledger.bench.Payload", payload: payload)

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        warmupIterations: 10,
        scalingFactor: .kilo,
        maxDuration: .seconds(5),
        maxIterations: 1_000_000
    )

    // One caller awaiting each append of one 200-byte event, without fsync: the CPU and hand-off cost
    // of the append path (encode, hash, commit, resume).
    Benchmark("append.single.noSync") { benchmark in
        let (log, directory) = try scratchLedger("single", durability: .unsafeNoSync)
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            try await log.append(
                [draft], to: "bench/0", metadata: CommandMetadata(container: "iCloud.com.example.bench", actor: "b"))
        }
        benchmark.stopMeasurement()
        await log.close()
        try? FileManager.default.removeItem(at: directory)
    }

    // 64 concurrent callers, group-committed, without fsync.
    Benchmark("append.concurrent64.noSync") { benchmark in
        let (log, directory) = try scratchLedger("concurrent", durability: .unsafeNoSync)
        let perCaller = max(1, benchmark.scaledIterations.count / 64)
        benchmark.startMeasurement()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for caller in 0..<64 {
                group.addTask {
                    for _ in 0..<perCaller {
                        try await log.append(
                            [draft], to: "bench/\(caller)",
                            metadata: CommandMetadata(container: "iCloud.com.example.bench", actor: "b"))
                    }
                }
            }
            try await group.waitForAll()
        }
        benchmark.stopMeasurement()
        await log.close()
        try? FileManager.default.removeItem(at: directory)
    }

    // A point read of one event by position (decode included).
    Benchmark("read.eventAt") { benchmark in
        let (log, directory) = try scratchLedger("read", durability: .unsafeNoSync)
        try await log.append(
            Array(repeating: draft, count: 1_000), to: "bench/0",
            metadata: CommandMetadata(container: "iCloud.com.example.bench", actor: "b"))
        benchmark.startMeasurement()
        for index in benchmark.scaledIterations {
            blackHole(try log.event(at: LogPosition(UInt64(index % 1_000) + 1)))
        }
        benchmark.stopMeasurement()
        await log.close()
        try? FileManager.default.removeItem(at: directory)
    }

    // Chain verification of a 10,000-event log, per event.
    Benchmark("verify.chain", configuration: .init(scalingFactor: .one)) { benchmark in
        let (log, directory) = try scratchLedger("verify", durability: .unsafeNoSync)
        for _ in 0..<10 {
            try await log.append(
                Array(repeating: draft, count: 1_000), to: "bench/0",
                metadata: CommandMetadata(container: "iCloud.com.example.bench", actor: "b"))
        }
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            blackHole(try log.verifyChain())
        }
        benchmark.stopMeasurement()
        await log.close()
        try? FileManager.default.removeItem(at: directory)
    }
}
