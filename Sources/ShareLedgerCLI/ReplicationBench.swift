import Foundation
import Logging
import ShareLedger
import ShareLedgerReplication

/// The `replicate` part of `share-ledger bench`: the 64-caller share workload on a primary while a
/// shipper ships to a JetStream stream and a follower applies it into a replica, all in this process
/// against the cluster at `servers`; then the same log shipped and applied again as a backlog.
struct ReplicationBench {
    let directory: URL
    let durability: Durability
    let servers: [String]
    let logger: Logger

    struct Figures {
        var actionsPerSecond: Double
        var events: UInt64
        var liveShippedPerSecond: Double
        var liveAppliedPerSecond: Double
        var lagP99Positions: Double
        var lagMaxPositions: Double
        var lagP99Millis: Double
        var drainMillis: Double
        var backlogShippedPerSecond: Double
        var backlogAppliedPerSecond: Double
    }

    func run(callers: Int, cycles: Int, progress: (String) -> Void) async throws -> Figures {
        let primary = try open("replicate-primary")
        let replica = try open("replicate-replica")
        let tag = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let live = try ShardNames(shard: "bench\(tag)")
        let shipper = LedgerShipper(log: primary.log, configuration: ShipperConfiguration(servers: servers, shard: live, logger: logger))
        let follower = LedgerFollower(ledger: replica, configuration: FollowerConfiguration(servers: servers, shard: live, logger: logger))
        progress("replicate: setting up \(callers) callers")
        let workload = try await ShareWorkload.setUp(primary, callers: callers, records: cycles)
        // Ship and apply the set-up first, so the live figures cover the workload alone.
        try await shipper.shipAvailable()
        try await follower.catchUp(timeout: .seconds(120))
        let startPosition = try primary.log.head().position
        let shipping = Task { try await shipper.run() }
        let following = Task { try await follower.run() }

        let sampling = sampleLag(primary, follower)
        progress("replicate: \(callers) callers × \(cycles) share cycles while shipping and following")
        let started = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for caller in 0..<callers {
                group.addTask { for record in 0..<cycles { try await workload.cycle(caller: caller, record: record) } }
            }
            try await group.waitForAll()
        }
        let workloadDone = ContinuousClock.now
        let head = try primary.log.head().position
        try await shipper.waitUntilShipped(head, timeout: .seconds(300))
        let shippedAt = ContinuousClock.now
        try await follower.waitUntilApplied(head, timeout: .seconds(300))
        let appliedAt = ContinuousClock.now
        sampling.cancel()
        let samples = try await sampling.value
        shipping.cancel()
        following.cancel()
        _ = try? await shipping.value
        _ = try? await following.value
        let events = head.rawValue - startPosition.rawValue

        // The whole log again as a backlog: shipped to a new stream, applied into a new replica.
        progress("replicate: the log as a backlog")
        let backlog = try ShardNames(shard: "bench\(tag)b")
        let backlogShipper = LedgerShipper(
            log: primary.log, configuration: ShipperConfiguration(servers: servers, shard: backlog, logger: logger))
        let shipStart = ContinuousClock.now
        try await backlogShipper.shipAvailable()
        let shipSeconds = seconds(ContinuousClock.now - shipStart)
        backlogShipper.close()
        let fresh = try open("replicate-backlog-replica")
        let backlogFollower = LedgerFollower(
            ledger: fresh, configuration: FollowerConfiguration(servers: servers, shard: backlog, logger: logger))
        let applyStart = ContinuousClock.now
        try await backlogFollower.catchUp(timeout: .seconds(600))
        let applySeconds = seconds(ContinuousClock.now - applyStart)
        backlogFollower.close()
        let total = Double(head.rawValue)
        let equal = try fresh.readModelDigest().digest == primary.readModelDigest().digest
            && replica.readModelDigest().digest == primary.readModelDigest().digest
        shipper.close()
        follower.close()
        await fresh.close()
        await replica.close()
        await primary.close()
        guard equal else { throw BenchFailure("a replica's read models differ from the primary's") }
        let positions = samples.map(\.positions).sorted()
        let millis = samples.map(\.millis).sorted()
        return Figures(
            actionsPerSecond: Double(callers * cycles * ShareWorkload.actionsPerCycle) / seconds(workloadDone - started),
            events: events,
            liveShippedPerSecond: Double(events) / seconds(shippedAt - started),
            liveAppliedPerSecond: Double(events) / seconds(appliedAt - started),
            lagP99Positions: percentile(positions, 0.99), lagMaxPositions: positions.last ?? 0,
            lagP99Millis: percentile(millis, 0.99), drainMillis: seconds(appliedAt - workloadDone) * 1000,
            backlogShippedPerSecond: total / shipSeconds, backlogAppliedPerSecond: total / applySeconds)
    }

    /// One window of ``long(callers:seconds:window:progress:)``.
    struct Window {
        /// Whether the shipper and the follower ran during it.
        var replicating: Bool
        var actionsPerSecond: Double
        var lagP99Positions: Double
        var lagMaxPositions: Double
        var lagP99Millis: Double
    }

    /// The long run: `seconds` of the share workload in windows of `window` seconds, alternately
    /// without replication (no shipper, no follower: the primary alone) and with the shipper and the
    /// follower running, so that the primary's rate with and without shipping is measured side by
    /// side under the same drift (the ledger grows all along), and the lag of every replicating
    /// window shows whether it stays flat. Between windows (not measured) the next window's records
    /// are saved and, before a replicating window, the backlog of the one before is shipped and applied.
    func long(callers: Int, seconds total: Int, window: Int, progress: (String) -> Void) async throws -> [Window] {
        let primary = try open("replicate-long-primary")
        let replica = try open("replicate-long-replica")
        let shard = try ShardNames(shard: "benchlong\(String(UInt32.random(in: 0...UInt32.max), radix: 36))")
        let shipper = LedgerShipper(log: primary.log, configuration: ShipperConfiguration(servers: servers, shard: shard, logger: logger))
        let follower = LedgerFollower(ledger: replica, configuration: FollowerConfiguration(servers: servers, shard: shard, logger: logger))
        // At most 12 cycles per caller and second (the primary did about half of that with 64 callers).
        let perWindow = max(1, window * 768 / callers)
        progress("replicate --long: setting up \(callers) callers")
        let workload = try await ShareWorkload.setUp(primary, callers: callers, records: 0)
        var windows: [Window] = []
        var nextRecord = 0
        for index in 0..<max(2, total / window) {
            let replicating = index % 2 == 1
            try await workload.addRecords(nextRecord..<(nextRecord + perWindow))
            var shipping: Task<Void, any Error>?
            var following: Task<Void, any Error>?
            if replicating {
                try await shipper.shipAvailable()
                try await follower.catchUp(timeout: .seconds(600))
                shipping = Task { try await shipper.run() }
                following = Task { try await follower.run() }
            }
            progress("replicate --long: window \(index + 1) of \(max(2, total / window)), \(replicating ? "replicating" : "primary alone")")
            let sampling = replicating ? sampleLag(primary, follower) : nil
            let first = nextRecord
            let started = ContinuousClock.now
            let end = started + .seconds(window)
            let cycles = try await withThrowingTaskGroup(of: Int.self) { group in
                for caller in 0..<callers {
                    group.addTask {
                        var record = first
                        while ContinuousClock.now < end && record < first + perWindow {
                            try await workload.cycle(caller: caller, record: record)
                            record += 1
                        }
                        return record - first
                    }
                }
                return try await group.reduce(0, +)
            }
            let elapsed = seconds(ContinuousClock.now - started)
            nextRecord += perWindow
            sampling?.cancel()
            let samples = try await sampling?.value ?? []
            shipping?.cancel()
            following?.cancel()
            _ = try? await shipping?.value
            _ = try? await following?.value
            let positions = samples.map(\.positions).sorted()
            let millis = samples.map(\.millis).sorted()
            windows.append(
                Window(
                    replicating: replicating, actionsPerSecond: Double(cycles * ShareWorkload.actionsPerCycle) / elapsed,
                    lagP99Positions: percentile(positions, 0.99), lagMaxPositions: positions.last ?? 0,
                    lagP99Millis: percentile(millis, 0.99)))
        }
        try await shipper.shipAvailable()
        try await follower.catchUp(timeout: .seconds(600))
        let equal = try replica.readModelDigest().digest == primary.readModelDigest().digest
        shipper.close()
        follower.close()
        await replica.close()
        await primary.close()
        guard equal else { throw BenchFailure("the replica's read models differ from the primary's") }
        return windows
    }

    /// Lag samples every 5 ms until cancelled: positions the replica lacks, and how long ago the
    /// primary committed the first of them.
    private func sampleLag(_ primary: ShareLedger, _ follower: LedgerFollower) -> Task<[(positions: Double, millis: Double)], any Error> {
        Task {
            var samples: [(positions: Double, millis: Double)] = []
            while !Task.isCancelled {
                let head = try primary.log.head().position
                let applied = follower.appliedPosition
                var millis = 0.0
                if applied < head, let first = try primary.log.event(at: applied.advanced(by: 1)) {
                    millis = max(0, Date().timeIntervalSince1970 * 1000 - Double(first.recordedAtMicros) / 1000)
                }
                samples.append((Double(head.rawValue &- min(head.rawValue, applied.rawValue)), millis))
                try? await Task.sleep(for: .milliseconds(5))
            }
            return samples
        }
    }

    private func open(_ name: String) throws -> ShareLedger {
        var configuration = ShareLedger.Configuration(
            path: directory.appendingPathComponent(name).path, durability: durability, initialMapSize: 1 << 30)
        configuration.residualTaskWorker = nil
        configuration.logger = logger
        return try ShareLedger.open(configuration)
    }

    private func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    private func percentile(_ sorted: [Double], _ p: Double) -> Double {
        guard !sorted.isEmpty else { return 0 }
        return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
    }
}
