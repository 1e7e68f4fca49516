import Foundation
import ShareLedger
import ShareLedgerAudit
import ShareLedgerBaselines

/// Metadata queries, replay speeds and how they scale with the ledger's size: a ledger is grown to
/// each size with the share workload (no-sync: only its contents matter here), and measured at each.
struct ScaleBench {
    let directory: URL
    static let callers = 64

    struct Point {
        var events: UInt64
        var metadataP50Micros: Double
        var metadataP99Micros: Double
        var uncachedP50Micros: Double
        var rawPointReadP50Micros: Double
    }

    struct Figures {
        var points: [Point]
        var snapshotSeconds: Double
        var snapshotWorstSeconds: Double
        var snapshotSaveSeconds: Double
        var snapshotInterval: UInt64
        var replays: Replays
        /// The same rebuild run as `share-ledger rebuild` in a process of its own (what an operator
        /// runs): its peak anonymous memory, without this process's heap from the parts before.
        var processRebuildPeakAnonMB: Double
        /// The same in a process of its own, rewriting every read model whole (`rebuild --rewrite-all`).
        var processRewriteRebuildPeakAnonMB: Double
        var participants10P50Micros: Double
        var participants100P50Micros: Double
    }

    /// The ledger being grown, and where its growth stands.
    struct Growth {
        var ledger: ShareLedger
        var configuration: ShareLedger.Configuration
        var nextRecord = 0
        var nextSnapshot: UInt64
        let snapshotInterval: UInt64
        var saveSeconds: [Double] = []
        var workload: ShareWorkload { ShareWorkload(ledger: ledger, callers: ScaleBench.callers) }
    }

    /// Opens a new ledger (`name` under the directory) and registers the workload's users (not measured).
    func open(_ name: String, snapshotInterval: UInt64) async throws -> Growth {
        let path = directory.appendingPathComponent(name).path
        var configuration = ShareLedger.Configuration(path: path, durability: .unsafeNoSync, initialMapSize: 1 << 30)
        configuration.residualTaskWorker = ResidualTaskWorker.Configuration(batchSize: 512)
        let ledger = try ShareLedger.open(configuration)
        _ = try await ShareWorkload.setUp(ledger, callers: Self.callers, records: 0)
        return Growth(
            ledger: ledger, configuration: configuration, nextSnapshot: snapshotInterval, snapshotInterval: snapshotInterval)
    }

    /// Grows one ledger through `sizes` (events), measuring the metadata query at each; at the last
    /// size measures the raw scan, chain verification, rebuild (in place and into a scratch ledger)
    /// and the rebuild's peak anonymous memory.
    func run(sizes: [UInt64], queries: Int, snapshotInterval: UInt64, progress: (String) -> Void) async throws -> Figures {
        var growth = try await open("scale-ledger", snapshotInterval: snapshotInterval)
        let raw = try RawReplayer(path: directory.appendingPathComponent("scale-raw").path, durability: .unsafeNoSync)
        defer { raw.close() }
        var points: [Point] = []
        for size in sizes {
            try await grow(&growth, to: size, progress: progress)
            points.append(try await queryPoint(&growth, raw: raw, queries: queries, progress: progress))
        }
        let ledger = growth.ledger
        let owner = growth.workload.owner(0)
        progress("scale: shares with 10 and 100 participants")
        let participants10 = try await participantsP50(owner, count: 10, queries: queries)
        let participants100 = try await participantsP50(owner, count: 100, queries: queries)
        let replays = try await Self.replays(ledger, progress: progress)
        progress("scale: views of the read models as of the head and of the point before the last snapshot")
        let views = try await snapshotViews(ledger, events: replays.events)
        await ledger.close()
        let path = growth.configuration.path
        progress("scale: rebuilding the read models of \(replays.events) events in a process of its own")
        let processPeak = try Self.rebuildInOwnProcess(path: path)
        progress("scale: rebuilding the read models of \(replays.events) events in a process of its own, rewriting every one whole")
        let processRewritePeak = try Self.rebuildInOwnProcess(path: path, rewriteAll: true)
        return Figures(
            points: points, snapshotSeconds: views.atHead, snapshotWorstSeconds: views.worst,
            snapshotSaveSeconds: growth.saveSeconds.max() ?? 0, snapshotInterval: snapshotInterval, replays: replays,
            processRebuildPeakAnonMB: Double(processPeak) / 1_048_576,
            processRewriteRebuildPeakAnonMB: Double(processRewritePeak) / 1_048_576,
            participants10P50Micros: participants10, participants100P50Micros: participants100)
    }

    /// Grows the ledger to at least `size` events: each round is one cycle per caller on a new root
    /// record; a read-model snapshot is saved every `snapshotInterval` events, as an operator's cron
    /// would. Waits for the residual tasks at the end.
    func grow(_ growth: inout Growth, to size: UInt64, progress: (String) -> Void) async throws {
        let ledger = growth.ledger
        let workload = growth.workload
        while try ledger.log.head().position.rawValue < size {
            if try ledger.log.head().position.rawValue >= growth.nextSnapshot {
                let started = ContinuousClock.now
                try ledger.saveReadModelSnapshot()
                growth.saveSeconds.append((ContinuousClock.now - started).seconds)
                growth.nextSnapshot += growth.snapshotInterval
            }
            progress("scale: growing the ledger to \(size) events (\(try ledger.log.head().position.rawValue))")
            let record = growth.nextRecord
            growth.nextRecord += 1
            try await withThrowingTaskGroup(of: Void.self) { group in
                for caller in 0..<Self.callers {
                    group.addTask {
                        _ = try await workload.owner(caller).save(
                            Record(recordType: "Doc", recordID: RecordID(recordName: "doc\(record)", zoneID: workload.zone)))
                        try await workload.cycle(caller: caller, record: record)
                    }
                }
                try await group.waitForAll()
            }
        }
        try await ledger.waitForResidualTasks(timeout: .seconds(120))
    }

    /// The metadata queries at the ledger's size: the owner of caller 0 asks for the metadata of its
    /// shares (owner-relative), with the cache and without it (the ledger reopened without it, then
    /// reopened as before), and as many raw point reads of a raw log of the same size.
    func queryPoint(_ growth: inout Growth, raw: RawReplayer, queries: Int, progress: (String) -> Void) async throws -> Point {
        let events = try growth.ledger.log.head().position.rawValue
        progress("scale: metadata queries at \(events) events")
        let owner = growth.workload.owner(0)
        let ownerURLs = try owner.ownedShares().compactMap(\.url)
        var generator = SeededGenerator(seed: events)
        let query = try latencyMicros(count: queries) { _ in
            _ = try owner.shareMetadataWithoutLogging(for: ownerURLs[Int(generator.next() % UInt64(ownerURLs.count))])
        }
        await growth.ledger.close()
        var uncachedConfiguration = growth.configuration
        uncachedConfiguration.metadataCacheCapacity = 0
        uncachedConfiguration.residualTaskWorker = nil
        let uncachedLedger = try ShareLedger.open(uncachedConfiguration)
        let uncachedOwner = uncachedLedger.container(ShareWorkload.container, userRecordName: growth.workload.ownerName(0))
        let uncached = try latencyMicros(count: queries) { _ in
            _ = try uncachedOwner.shareMetadataWithoutLogging(for: ownerURLs[Int(generator.next() % UInt64(ownerURLs.count))])
        }
        await uncachedLedger.close()
        growth.ledger = try ShareLedger.open(growth.configuration)
        try raw.fill(upTo: events, valueSize: 64)
        let point = try latencyMicros(count: queries) { _ in
            try raw.pointRead(UInt64(generator.next() % events) + 1)
        }
        return Point(
            events: events, metadataP50Micros: query.p50, metadataP99Micros: query.p99,
            uncachedP50Micros: uncached.p50, rawPointReadP50Micros: point.p50)
    }

    /// The p50 of owner-relative metadata queries of a new share with `count` participants.
    func participantsP50(_ owner: Container, count: Int, queries: Int) async throws -> Double {
        let zone = RecordZoneID(zoneName: "Bench")
        let name = "wide\(count)"
        _ = try await owner.save(Record(recordType: "Doc", recordID: RecordID(recordName: name, zoneID: zone)))
        let url = try await owner.share(rootRecord: RecordID(recordName: name, zoneID: zone)).url
        for index in 0..<(count - 1) {
            _ = try await owner.addParticipant(
                LookupInfo(emailAddress: "wide\(count)_\(index)@example.com"), permission: .readOnly, to: url)
        }
        return try latencyMicros(count: queries) { _ in _ = try owner.shareMetadataWithoutLogging(for: url) }.p50
    }

    /// Views of the read models (`snapshot(at:path:)`) at the head and at the position just before
    /// the last saved snapshot (the longest replay): seconds at the head, and the worst.
    func snapshotViews(_ ledger: ShareLedger, events: UInt64) async throws -> (atHead: Double, worst: Double) {
        let snapshots = ledger.readModelSnapshots()
        var atHead = 0.0
        var worst = 0.0
        for (index, point) in [events, (snapshots.last?.position ?? events) - 1].enumerated() {
            let scratch = directory.appendingPathComponent("scale-snapshot-\(index)").path
            let started = ContinuousClock.now
            let view = try LedgerAudit(ledger).snapshot(at: .position(LogPosition(point)), path: scratch)
            let seconds = (ContinuousClock.now - started).seconds
            await view.close()
            if index == 0 { atHead = seconds }
            worst = max(worst, seconds)
        }
        return (atHead, worst)
    }
}

extension ScaleBench {
    /// The replays of the grown ledger: the raw cursor scan, the chain verification on one core and
    /// on every core, and the rebuild (keeping what is right, then rewriting every read model whole),
    /// each with the process's CPU time per event.
    struct Replays {
        var events: UInt64
        var scanPerSecond: Double
        var scanCPU: CPUCost
        var verify: VerifyFigures
        var rebuildPerSecond: Double
        var rebuildCPU: CPUCost
        var rebuildPeakAnonMB: Double
        var rebuildAnonGrowthMB: Double
        /// Entries the rebuild's last transaction changed (0 for a ledger whose read models were right).
        var rebuildChangedEntries: Int
        /// The same rebuild rewriting every read model whole (what a rebuild that changes them all costs).
        var rewriteRebuildPerSecond: Double
        var rewriteRebuildCPU: CPUCost
        var rewriteRebuildPeakAnonMB: Double
    }

    /// The chain verification of one ledger, on one core and on every core, measured side by side.
    struct VerifyFigures {
        var events: UInt64
        /// The threads of the every-core verification (the active processor count).
        var threads: Int
        var perSecond: Double
        var oneCorePerSecond: Double
        var cpu: CPUCost
        var oneCoreCPU: CPUCost
        var speedup: Double { perSecond / oneCorePerSecond }
    }

    static func replays(_ ledger: ShareLedger, progress: (String) -> Void) async throws -> Replays {
        let events = try ledger.log.head().position.rawValue
        progress("scale: raw scan of \(events) events")
        var cpu = ProcessCPUTime.now()
        var started = ContinuousClock.now
        _ = try ledger.log.rawScan()
        let scanSeconds = (ContinuousClock.now - started).seconds
        let scanCPU = CPUCost(time: ProcessCPUTime.now() - cpu, units: Int(events))
        progress("scale: verifying the chain of \(events) events, on one core and on every core")
        let verify = try verifyFigures(ledger.log, alternations: 2)

        progress("scale: rebuilding the read models of \(events) events")
        let memory = AnonymousMemorySampler()
        memory.start()
        cpu = ProcessCPUTime.now()
        started = ContinuousClock.now
        let rebuilt = try await LedgerAudit(ledger).rebuildReadModels(rewritingEverything: false)
        let rebuildSeconds = (ContinuousClock.now - started).seconds
        let rebuildCPU = CPUCost(time: ProcessCPUTime.now() - cpu, units: Int(events))
        let (peak, baseline) = memory.stop()

        progress("scale: rebuilding the read models of \(events) events, rewriting every one whole")
        let rewriteMemory = AnonymousMemorySampler()
        rewriteMemory.start()
        cpu = ProcessCPUTime.now()
        started = ContinuousClock.now
        _ = try await LedgerAudit(ledger).rebuildReadModels(rewritingEverything: true)
        let rewriteSeconds = (ContinuousClock.now - started).seconds
        let rewriteCPU = CPUCost(time: ProcessCPUTime.now() - cpu, units: Int(events))
        let (rewritePeak, _) = rewriteMemory.stop()
        return Replays(
            events: events, scanPerSecond: Double(events) / scanSeconds, scanCPU: scanCPU, verify: verify,
            rebuildPerSecond: Double(events) / rebuildSeconds, rebuildCPU: rebuildCPU,
            rebuildPeakAnonMB: Double(peak) / 1_048_576, rebuildAnonGrowthMB: Double(peak - baseline) / 1_048_576,
            rebuildChangedEntries: rebuilt.changedEntries, rewriteRebuildPerSecond: Double(events) / rewriteSeconds,
            rewriteRebuildCPU: rewriteCPU, rewriteRebuildPeakAnonMB: Double(rewritePeak) / 1_048_576)
    }

    /// Verifies the chain `alternations` times on one thread and as often on one thread per active
    /// core, alternating, so that the machine's load touches both alike; the rates are over all runs.
    static func verifyFigures(_ log: EventLog, alternations: Int) throws -> VerifyFigures {
        let threads = ProcessInfo.processInfo.activeProcessorCount
        var seconds = [0.0, 0.0]
        var cpu = [ProcessCPUTime.zero, .zero]
        var events: UInt64 = 0
        for _ in 0..<alternations {
            for (slot, parallelism) in [1, threads].enumerated() {
                let before = ProcessCPUTime.now()
                let started = ContinuousClock.now
                let result = try log.verifyChain(parallelism: parallelism)
                seconds[slot] += (ContinuousClock.now - started).seconds
                cpu[slot] = cpu[slot] + (ProcessCPUTime.now() - before)
                guard result.isValid else { throw BenchFailure("the chain does not verify: \(result.problem ?? "")") }
                events = result.eventsChecked
            }
        }
        let checked = Int(events) * alternations
        return VerifyFigures(
            events: events, threads: threads, perSecond: Double(checked) / seconds[1],
            oneCorePerSecond: Double(checked) / seconds[0], cpu: CPUCost(time: cpu[1], units: checked),
            oneCoreCPU: CPUCost(time: cpu[0], units: checked))
    }

    /// `bench --only verify`: grows a ledger of `events` events with the share workload (not
    /// measured), then measures ``verifyFigures(_:alternations:)`` on it.
    func verifyOnly(events: UInt64, progress: (String) -> Void) async throws -> VerifyFigures {
        var growth = try await open("verify-ledger", snapshotInterval: .max)
        try await grow(&growth, to: events, progress: progress)
        progress("verify: the chain of \(try growth.ledger.log.head().position.rawValue) events, on one core and on every core")
        let figures = try Self.verifyFigures(growth.ledger.log, alternations: 3)
        await growth.ledger.close()
        return figures
    }
}
