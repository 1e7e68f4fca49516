import Foundation
import ShareLedger
import ShareLedgerBaselines
import Synchronization

/// The residual-task latency benchmark: accepts arrive at a steady rate (open loop) on a durable
/// ledger with its in-process worker; for each accept, the time from the accept's return (its
/// commit) to the moment a subscriber sees its `ParticipantZoneCreated` commit.
struct AcceptResidualBench {
    let directory: URL
    let durability: Durability
    /// Accepts per second the load offers.
    let rate: Int
    /// How long the load lasts.
    let seconds: Double

    static let container = "iCloud.com.example.bench"

    struct Figures {
        var p50Millis: Double
        var p99Millis: Double
        var maxMillis: Double
        var acceptsPerSecond: Double
        var accepts: Int
        var commitsPerSecond: Double
        var meanCommitEvents: Double
        /// The whole process's CPU time from the first accept until every residual task was done
        /// (callers, writer, worker), per accept.
        var processCPU: CPUCost
    }

    func run(progress: (String) -> Void) async throws -> Figures {
        let total = Int(Double(rate) * seconds)
        var configuration = ShareLedger.Configuration(
            path: directory.appendingPathComponent("accept-residual").path, durability: durability, initialMapSize: 1 << 30)
        configuration.residualTaskWorker = ResidualTaskWorker.Configuration(batchSize: 512)
        configuration.writerProbe = CommitSizeRecorder()
        let ledger = try ShareLedger.open(configuration)
        progress("accept.residual: setting up \(total) users")
        let metadatas = try await Self.setUp(ledger, users: total)
        try await ledger.waitForResidualTasks()

        // Watch the log for zone completions, from the current head on.
        let accepted = Locked<[String: ContinuousClock.Instant]>([:])
        let latencies = Locked<[Double]>([])
        let watcher = try Self.watch(ledger, completions: total, accepted: accepted, latencies: latencies)

        progress("accept.residual: \(rate) accepts/s for \(seconds) s")
        let commitsBefore = ledger.log.commitSizes().count
        let cpuBefore = ProcessCPUTime.now()
        let elapsed = try await offer(metadatas, to: ledger, accepted: accepted)
        let loadCommits = Array(ledger.log.commitSizes().dropFirst(commitsBefore))
        try await ledger.waitForResidualTasks(timeout: .seconds(60))
        let cpu = CPUCost(time: ProcessCPUTime.now() - cpuBefore, units: total)
        try await watcher.value
        await ledger.close()
        // A completion can be seen before its accept's caller resumed: those count as 0.
        var values = latencies.withLock { $0 }.map { max(0, $0) }.sorted()
        let missing = total - values.count
        if missing > 0 { values = [Double](repeating: 0, count: missing) + values }
        func percentile(_ p: Double) -> Double { values.isEmpty ? 0 : values[min(values.count - 1, Int(Double(values.count) * p))] }
        return Figures(
            p50Millis: percentile(0.50), p99Millis: percentile(0.99), maxMillis: values.last ?? 0,
            acceptsPerSecond: Double(total) / elapsed, accepts: total,
            commitsPerSecond: Double(loadCommits.count) / elapsed,
            meanCommitEvents: Double(loadCommits.reduce(0, +)) / Double(max(1, loadCommits.count)), processCPU: cpu)
    }

    /// Setup (not measured): an owner with enough public shares (a share holds 100 participants),
    /// `users` users, and each user's metadata fetched ahead of time, by user index.
    static func setUp(_ ledger: ShareLedger, users total: Int) async throws -> [Share.Metadata] {
        try await ledger.registerUser("_owner", in: container)
        let owner = ledger.container(container, userRecordName: "_owner")
        let zone = RecordZoneID(zoneName: "Board")
        _ = try await owner.save(RecordZone(zoneID: zone))
        var shareURLs: [URL] = []
        for index in 0..<(total + 89) / 90 {
            let root = RecordID(recordName: "board\(index)", zoneID: zone)
            _ = try await owner.save(Record(recordType: "Board", recordID: root))
            shareURLs.append(try await owner.share(rootRecord: root, publicPermission: .readOnly).url)
        }
        let urls = shareURLs
        return try await withThrowingTaskGroup(of: [(Int, Share.Metadata)].self) { group in
            for slice in 0..<32 {
                group.addTask {
                    var out: [(Int, Share.Metadata)] = []
                    for index in stride(from: slice, to: total, by: 32) {
                        let name = "_u\(index)"
                        try await ledger.registerUser(name, in: container)
                        out.append((index, try await ledger.container(container, userRecordName: name).shareMetadata(for: urls[index / 90])))
                    }
                    return out
                }
            }
            var all = [Share.Metadata?](repeating: nil, count: total)
            for try await part in group { for (index, metadata) in part { all[index] = metadata } }
            return all.map { $0! }
        }
    }

    /// A task that follows the log from its head and, for each `ParticipantZoneCreated` of a user
    /// in `accepted`, records the milliseconds since the accept returned; ends after `completions`.
    static func watch(
        _ ledger: ShareLedger, completions total: Int, accepted: Locked<[String: ContinuousClock.Instant]>,
        latencies: Locked<[Double]>
    ) throws -> Task<Void, any Error> {
        let start = try ledger.log.head().position
        return Task {
            var seen = 0
            for try await event in ledger.log.events(after: start) {
                guard let user = event.participantZoneCreatedUser else { continue }
                let now = ContinuousClock.now
                if let at = accepted.withLock({ $0[user] }) {
                    latencies.withLock { $0.append((now - at).seconds * 1_000) }
                }
                seen += 1
                if seen == total { break }
            }
        }
    }

    /// The load: accept i is due at t0 + i / rate; 64 callers take the next due accept. Returns the
    /// seconds it took.
    func offer(
        _ metadatas: [Share.Metadata], to ledger: ShareLedger, accepted: Locked<[String: ContinuousClock.Instant]>
    ) async throws -> Double {
        let container = Self.container
        let total = metadatas.count
        let next = Locked(0)
        let began = ContinuousClock.now
        let interval = Duration.nanoseconds(1_000_000_000 / rate)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<64 {
                group.addTask {
                    while true {
                        let index = next.withLock { value -> Int in
                            defer { value += 1 }
                            return value
                        }
                        guard index < total else { return }
                        let due = began + interval * index
                        if due > ContinuousClock.now { try await Task.sleep(until: due, clock: .continuous) }
                        let user = ledger.container(container, userRecordName: "_u\(index)")
                        _ = try await user.accept(metadatas[index])
                        accepted.withLock { $0["_u\(index)"] = ContinuousClock.now }
                    }
                }
            }
            try await group.waitForAll()
        }
        return (ContinuousClock.now - began).seconds
    }
}

/// A value behind a mutex, shareable between tasks.
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<R>(_ body: (inout Value) -> R) -> R { mutex.withLock { body(&$0) } }
}
