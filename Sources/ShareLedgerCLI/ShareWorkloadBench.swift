import Foundation
import ShareLedger
import ShareLedgerAudit
import ShareLedgerBaselines

/// The share-action workload of `share-ledger bench`: per caller an owner with a zone of records and
/// three invitees; one *cycle* is the life of one share at realistic proportions:
///
/// 1 create share, 3 invitations, 3 metadata fetches (one per invitee, each logged), 2 accepts
/// — 9 durable actions, each appending one event.
struct ShareWorkload: Sendable {
    static let container = "iCloud.com.example.bench"
    static let actionsPerCycle = 9
    let ledger: ShareLedger
    let callers: Int
    /// Invitations go to the invitees' registered email addresses (sealed under the address's key,
    /// matched by keyed hash) instead of their user record names (`bench --invite-by-email`).
    var invitesByEmail = false
    let zone = RecordZoneID(zoneName: "Bench")

    func ownerName(_ caller: Int) -> String { "_owner\(caller)" }
    func inviteeName(_ caller: Int, _ index: Int) -> String { "_invitee\(caller)_\(index)" }
    func inviteeEmail(_ caller: Int, _ index: Int) -> String { "invitee\(caller)_\(index)@example.com" }
    func owner(_ caller: Int) -> Container { ledger.container(Self.container, userRecordName: ownerName(caller)) }
    func invitee(_ caller: Int, _ index: Int) -> Container {
        ledger.container(Self.container, userRecordName: inviteeName(caller, index))
    }

    /// Registers every user, saves every owner's zone and `records` root records per owner (not measured).
    static func setUp(_ ledger: ShareLedger, callers: Int, records: Int, invitesByEmail: Bool = false) async throws
        -> ShareWorkload
    {
        let workload = ShareWorkload(ledger: ledger, callers: callers, invitesByEmail: invitesByEmail)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for caller in 0..<callers {
                group.addTask {
                    try await ledger.registerUser(workload.ownerName(caller), in: container)
                    for index in 0..<3 {
                        try await ledger.registerUser(
                            workload.inviteeName(caller, index), in: container, emailAddress: workload.inviteeEmail(caller, index))
                    }
                    _ = try await workload.owner(caller).save(RecordZone(zoneID: workload.zone))
                }
            }
            try await group.waitForAll()
        }
        try await workload.addRecords(0..<records)
        return workload
    }

    /// Saves root records `range` in every caller's zone (not measured), for cycles beyond `setUp`'s.
    func addRecords(_ range: Range<Int>) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for caller in 0..<callers {
                group.addTask {
                    for record in range {
                        _ = try await owner(caller).save(Record(recordType: "Doc", recordID: RecordID(recordName: "doc\(record)", zoneID: zone)))
                    }
                }
            }
            try await group.waitForAll()
        }
    }

    /// One cycle on root record `record` of `caller`'s zone: 9 actions.
    @discardableResult
    func cycle(caller: Int, record: Int) async throws -> URL {
        let owner = owner(caller)
        let url = try await owner.share(rootRecord: RecordID(recordName: "doc\(record)", zoneID: zone)).url
        for index in 0..<3 {
            let lookup =
                invitesByEmail
                ? LookupInfo(emailAddress: inviteeEmail(caller, index))
                : LookupInfo(userRecordID: RecordID(userRecordName: inviteeName(caller, index)))
            _ = try await owner.addParticipant(lookup, permission: .readWrite, to: url)
        }
        var metadatas: [Share.Metadata] = []
        for index in 0..<3 { metadatas.append(try await invitee(caller, index).shareMetadata(for: url)) }
        for index in 0..<2 { _ = try await invitee(caller, index).accept(metadatas[index]) }
        return url
    }
}

/// The mean stored size of the events at `positions` (sampled), in bytes.
func meanStoredSize(_ log: EventLog, _ positions: ClosedRange<UInt64>) throws -> Int {
    let step = max(1, (positions.upperBound - positions.lowerBound) / 500)
    var total = 0
    var count = 0
    for position in stride(from: positions.lowerBound, through: positions.upperBound, by: Int(step)) {
        if let size = try log.storedSize(at: LogPosition(position)) {
            total += size
            count += 1
        }
    }
    return count == 0 ? 0 : total / count
}

/// Share actions from N concurrent callers (and from one), measured in segments interleaved with
/// their raw LMDB replays, like ``AppendBench``.
struct ShareActionBench {
    let directory: URL
    let durability: Durability
    let writerPoll: Int
    /// Whether personal data is sealed (crypto-shredding; `bench --plaintext-personal-data` turns it off).
    var sealsPersonalData = true
    /// Whether the share actions invite by email address (`bench --invite-by-email`).
    var invitesByEmail = false
    /// Whether derived state is written behind the commit (`bench --derived-behind`).
    var writesDerivedStateBehind = false

    struct Figures {
        var perSecond: Double
        var rawPerSecond: Double
        var meanCommitSize: Double
        var valueSize: Int
        /// The writer thread's CPU time per action, in microseconds (user space and kernel).
        var writerCPUMicrosPerAction: Double
        /// The writer thread's CPU time in user space per action (deciding, applying, encoding).
        var writerUserMicrosPerAction: Double
        /// 4 KiB pages the process wrote to storage per action while the ledger ran.
        var pagesPerAction: Double
    }

    private func openLedger(_ name: String) throws -> ShareLedger {
        var configuration = ShareLedger.Configuration(
            path: directory.appendingPathComponent("\(name)-ledger").path, durability: durability, initialMapSize: 1 << 30)
        configuration.recordsCommitSizes = true
        configuration.writerPollMicroseconds = writerPoll
        configuration.sealsPersonalData = sealsPersonalData
        configuration.writesDerivedStateBehind = writesDerivedStateBehind
        // The worker's zone creations are measured by the residual part; here only the actions.
        configuration.residualTaskWorker = nil
        return try ShareLedger.open(configuration)
    }

    /// `callers` tasks, each running `cycles` share cycles (9 actions each), in segments; after each
    /// ledger segment its commit pattern is replayed on a bare LMDB environment.
    func mixed(name: String, callers: Int, cycles: Int, progress: (Int, Int) -> Void) async throws -> Figures {
        let ledger = try openLedger(name)
        let workload = try await ShareWorkload.setUp(ledger, callers: callers, records: cycles, invitesByEmail: invitesByEmail)
        return try await interleaved(ledger, rawName: "\(name)-raw", rounds: cycles, progress: progress) { first, count in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for caller in 0..<callers {
                    group.addTask {
                        for record in first..<(first + count) { try await workload.cycle(caller: caller, record: record) }
                    }
                }
                try await group.waitForAll()
            }
            return callers * count * ShareWorkload.actionsPerCycle
        }
    }

    /// 64 callers, each fetching the metadata of its own share over and over (every fetch appends a
    /// `ShareMetadataFetched` event), next to the raw replay of the same commits.
    func fetches(callers: Int, perCaller: Int, progress: (Int, Int) -> Void) async throws -> Figures {
        let ledger = try openLedger("fetch")
        let workload = try await ShareWorkload.setUp(ledger, callers: callers, records: 1, invitesByEmail: invitesByEmail)
        var urls: [URL] = []
        for caller in 0..<callers { urls.append(try await workload.cycle(caller: caller, record: 0)) }
        let shareURLs = urls
        return try await interleaved(ledger, rawName: "fetch-raw", rounds: perCaller, progress: progress) { _, count in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for caller in 0..<callers {
                    group.addTask {
                        let invitee = workload.invitee(caller, 2)
                        for _ in 0..<count { _ = try await invitee.shareMetadata(for: shareURLs[caller]) }
                    }
                }
                try await group.waitForAll()
            }
            return callers * count
        }
    }

    /// ``interleavedSegments(_:raws:rounds:progress:_:)`` with one raw baseline; closes the ledger.
    private func interleaved(
        _ ledger: ShareLedger, rawName: String, rounds: Int, progress: (Int, Int) -> Void,
        _ segment: (_ first: Int, _ count: Int) async throws -> Int
    ) async throws -> Figures {
        let raw = try RawReplayer(path: directory.appendingPathComponent(rawName).path, durability: durability)
        let run = try await interleavedSegments(ledger.log, raws: [raw], rounds: rounds, progress: progress, segment)
        await ledger.close()
        raw.close()
        return Figures(
            perSecond: run.perSecond, rawPerSecond: run.rawPerSecond[0], meanCommitSize: run.meanCommitSize,
            valueSize: run.valueSize, writerCPUMicrosPerAction: run.writerCPUMicrosPerAction,
            writerUserMicrosPerAction: run.writerUserMicrosPerAction, pagesPerAction: run.pagesPerAction)
    }
}

/// Runs `rounds` rounds of `segment` (given the first round's index and the count; it returns the
/// actions done) in ``AppendBench/segments`` segments on `log`; after each segment, replays its
/// commits (their sizes, the events' mean stored size) on each raw baseline. Returns the ledger's
/// rate, each baseline's rate, the mean commit size, the value size replayed, and (ledger segments
/// only) the writer thread's CPU microseconds (all, and user space alone) and the 4 KiB pages written
/// to storage per action.
func interleavedSegments(
    _ log: EventLog, raws: [RawReplayer], rounds: Int, progress: (Int, Int) -> Void,
    _ segment: (_ first: Int, _ count: Int) async throws -> Int
) async throws -> (
    perSecond: Double, rawPerSecond: [Double], meanCommitSize: Double, valueSize: Int, writerCPUMicrosPerAction: Double,
    writerUserMicrosPerAction: Double, pagesPerAction: Double
) {
    let segments = min(AppendBench.segments, rounds)
    var ledgerSeconds = 0.0
    var rawSeconds = [Double](repeating: 0, count: raws.count)
    var actions = 0
    var valueSize = 0
    var next = 0
    var measuredSizes: [Int] = []
    var writerNanoseconds: UInt64 = 0
    var writerUserNanoseconds: UInt64 = 0
    var writtenBytes: UInt64 = 0
    for index in 0..<segments {
        progress(index + 1, segments)
        let count = rounds / segments + (index < rounds % segments ? 1 : 0)
        let commitsBefore = log.commitSizes().count
        let headBefore = try log.head().position.rawValue
        let cpuBefore = log.writerCPUNanoseconds
        let writtenBefore = processWrittenBytes()
        let started = ContinuousClock.now
        actions += try await segment(next, count)
        ledgerSeconds += (ContinuousClock.now - started).seconds
        let cpuAfter = log.writerCPUNanoseconds
        writerNanoseconds += (cpuAfter.user &- cpuBefore.user) &+ (cpuAfter.system &- cpuBefore.system)
        writerUserNanoseconds += cpuAfter.user &- cpuBefore.user
        writtenBytes += processWrittenBytes() &- writtenBefore
        next += count
        let head = try log.head().position.rawValue
        if valueSize == 0 { valueSize = try meanStoredSize(log, (headBefore + 1)...head) }
        let sizes = Array(log.commitSizes()[commitsBefore...])
        measuredSizes += sizes
        for (slot, raw) in raws.enumerated() { rawSeconds[slot] += try raw.replay(sizes, valueSize: valueSize) }
    }
    return (
        Double(actions) / ledgerSeconds, rawSeconds.map { Double(actions) / $0 },
        Double(measuredSizes.reduce(0, +)) / Double(max(1, measuredSizes.count)), valueSize,
        Double(writerNanoseconds) / 1_000 / Double(max(1, actions)),
        Double(writerUserNanoseconds) / 1_000 / Double(max(1, actions)), Double(writtenBytes) / 4_096 / Double(max(1, actions))
    )
}

/// Bytes this process has caused to be written to storage (`write_bytes` of `/proc/self/io`; 0 where
/// there is no such file).
func processWrittenBytes() -> UInt64 {
    guard let text = try? String(contentsOfFile: "/proc/self/io", encoding: .utf8) else { return 0 }
    for line in text.split(separator: "\n") where line.hasPrefix("write_bytes:") {
        return UInt64(line.dropFirst("write_bytes:".count).trimmingCharacters(in: .whitespaces)) ?? 0
    }
    return 0
}

/// Latency percentiles of a closure called `count` times, in microseconds.
func latencyMicros(count: Int, _ body: (Int) throws -> Void) rethrows -> (p50: Double, p99: Double) {
    var samples: [Double] = []
    samples.reserveCapacity(count)
    let clock = ContinuousClock()
    for index in 0..<count {
        let started = clock.now
        try body(index)
        samples.append((clock.now - started).seconds * 1_000_000)
    }
    samples.sort()
    return (samples[samples.count / 2], samples[min(samples.count - 1, samples.count * 99 / 100)])
}

/// Metadata queries, replay speeds and how they scale with the ledger's size: a ledger is grown to
/// each size with the share workload (no-sync: only its contents matter here), and measured at each.
struct ScaleBench {
    let directory: URL

    struct Point {
        var events: UInt64
        var metadataP50Micros: Double
        var metadataP99Micros: Double
        var uncachedP50Micros: Double
        var rawPointReadP50Micros: Double
    }

    struct Figures {
        var points: [Point]
        var rebuildPerSecond: Double
        var snapshotSeconds: Double
        var snapshotWorstSeconds: Double
        var snapshotSaveSeconds: Double
        var snapshotInterval: UInt64
        var verifyPerSecond: Double
        var scanPerSecond: Double
        var rebuildPeakAnonMB: Double
        var rebuildAnonGrowthMB: Double
        /// Entries the rebuild's last transaction changed (0 for a ledger whose read models were right).
        var rebuildChangedEntries: Int
        /// The same rebuild rewriting every read model whole (what a rebuild that changes them all costs).
        var rewriteRebuildPerSecond: Double
        var rewriteRebuildPeakAnonMB: Double
        /// The same rebuild run as `share-ledger rebuild` in a process of its own (what an operator
        /// runs): its peak anonymous memory, without this process's heap from the parts before.
        var processRebuildPeakAnonMB: Double
        /// The same in a process of its own, rewriting every read model whole (`rebuild --rewrite-all`).
        var processRewriteRebuildPeakAnonMB: Double
        var participants10P50Micros: Double
        var participants100P50Micros: Double
        var events: UInt64
    }

    /// Grows one ledger through `sizes` (events), measuring the metadata query at each; at the last
    /// size measures the raw scan, chain verification, rebuild (in place and into a scratch ledger)
    /// and the rebuild's peak anonymous memory.
    func run(sizes: [UInt64], queries: Int, snapshotInterval: UInt64, progress: (String) -> Void) async throws -> Figures {
        let path = directory.appendingPathComponent("scale-ledger").path
        var configuration = ShareLedger.Configuration(path: path, durability: .unsafeNoSync, initialMapSize: 1 << 30)
        configuration.residualTaskWorker = ResidualTaskWorker.Configuration(batchSize: 512)
        var ledger = try ShareLedger.open(configuration)
        let callers = 64
        var workload = try await ShareWorkload.setUp(ledger, callers: callers, records: 0)
        var owner = workload.owner(0)
        var urls: [URL] = []
        var points: [Point] = []
        var nextRecord = 0
        let rawPath = directory.appendingPathComponent("scale-raw").path
        let raw = try RawReplayer(path: rawPath, durability: .unsafeNoSync)
        defer { raw.close() }
        var nextSnapshot = snapshotInterval
        var saveSeconds: [Double] = []
        for size in sizes {
            // Grow: each round is one cycle per caller on a new root record; a read-model snapshot is
            // saved every `snapshotInterval` events, as an operator's cron would.
            while try ledger.log.head().position.rawValue < size {
                if try ledger.log.head().position.rawValue >= nextSnapshot {
                    let started = ContinuousClock.now
                    try ledger.saveReadModelSnapshot()
                    saveSeconds.append((ContinuousClock.now - started).seconds)
                    nextSnapshot += snapshotInterval
                }
                progress("scale: growing the ledger to \(size) events (\(try ledger.log.head().position.rawValue))")
                let record = nextRecord
                nextRecord += 1
                let made = try await withThrowingTaskGroup(of: URL.self) { [workload] group in
                    for caller in 0..<callers {
                        group.addTask {
                            _ = try await workload.owner(caller).save(
                                Record(recordType: "Doc", recordID: RecordID(recordName: "doc\(record)", zoneID: workload.zone)))
                            return try await workload.cycle(caller: caller, record: record)
                        }
                    }
                    var made: [URL] = []
                    for try await url in group { made.append(url) }
                    return made
                }
                urls += made.filter { _ in urls.count < 4_096 }
            }
            try await ledger.waitForResidualTasks(timeout: .seconds(120))
            let events = try ledger.log.head().position.rawValue
            progress("scale: metadata queries at \(events) events")
            // The owner of caller 0 asks for the metadata of its shares (owner-relative metadata).
            let ownerURLs = try owner.ownedShares().compactMap(\.url)
            var generator = SeededGenerator(seed: events)
            let query = try latencyMicros(count: queries) { _ in
                _ = try owner.shareMetadataWithoutLogging(for: ownerURLs[Int(generator.next() % UInt64(ownerURLs.count))])
            }
            // The same queries with the metadata cache off (the ledger reopened without it).
            await ledger.close()
            var uncachedConfiguration = configuration
            uncachedConfiguration.metadataCacheCapacity = 0
            uncachedConfiguration.residualTaskWorker = nil
            let uncachedLedger = try ShareLedger.open(uncachedConfiguration)
            let uncachedOwner = uncachedLedger.container(ShareWorkload.container, userRecordName: workload.ownerName(0))
            let uncached = try latencyMicros(count: queries) { _ in
                _ = try uncachedOwner.shareMetadataWithoutLogging(for: ownerURLs[Int(generator.next() % UInt64(ownerURLs.count))])
            }
            await uncachedLedger.close()
            ledger = try ShareLedger.open(configuration)
            workload = ShareWorkload(ledger: ledger, callers: callers)
            owner = workload.owner(0)
            // The same number of raw point reads, of random keys of a raw log holding as many entries.
            try raw.fill(upTo: events, valueSize: 64)
            let point = try latencyMicros(count: queries) { _ in
                try raw.pointRead(UInt64(generator.next() % events) + 1)
            }
            points.append(
                Point(
                    events: events, metadataP50Micros: query.p50, metadataP99Micros: query.p99,
                    uncachedP50Micros: uncached.p50, rawPointReadP50Micros: point.p50))
        }

        // Participants per share: a share with 10 and one with 100 participants, owner-relative metadata.
        progress("scale: shares with 10 and 100 participants")
        var participantP50: [Int: Double] = [:]
        for count in [10, 100] {
            let name = "wide\(count)"
            _ = try await owner.save(Record(recordType: "Doc", recordID: RecordID(recordName: name, zoneID: workload.zone)))
            let url = try await owner.share(rootRecord: RecordID(recordName: name, zoneID: workload.zone)).url
            for index in 0..<(count - 1) {
                _ = try await owner.addParticipant(
                    LookupInfo(emailAddress: "wide\(count)_\(index)@example.com"), permission: .readOnly, to: url)
            }
            participantP50[count] = try latencyMicros(count: queries) { [owner] _ in
                _ = try owner.shareMetadataWithoutLogging(for: url)
            }.p50
        }

        let events = try ledger.log.head().position.rawValue
        progress("scale: raw scan of \(events) events")
        var started = ContinuousClock.now
        _ = try ledger.log.rawScan()
        let scanSeconds = (ContinuousClock.now - started).seconds
        progress("scale: verifying the chain of \(events) events")
        started = ContinuousClock.now
        let verification = try ledger.log.verifyChain()
        let verifySeconds = (ContinuousClock.now - started).seconds
        guard verification.isValid else { throw BenchFailure("the chain does not verify: \(verification.problem ?? "")") }

        progress("scale: rebuilding the read models of \(events) events")
        let memory = AnonymousMemorySampler()
        memory.start()
        started = ContinuousClock.now
        let rebuilt = try await ledger.rebuildReadModels(rewritingEverything: false)
        let rebuildSeconds = (ContinuousClock.now - started).seconds
        let (peak, baseline) = memory.stop()

        progress("scale: rebuilding the read models of \(events) events, rewriting every one whole")
        let rewriteMemory = AnonymousMemorySampler()
        rewriteMemory.start()
        started = ContinuousClock.now
        _ = try await ledger.rebuildReadModels(rewritingEverything: true)
        let rewriteSeconds = (ContinuousClock.now - started).seconds
        let (rewritePeak, _) = rewriteMemory.stop()

        progress("scale: views of the read models as of the head and of the point before the last snapshot")
        let snapshots = ledger.readModelSnapshots()
        var snapshotSeconds = 0.0
        var worst = 0.0
        for (index, point) in [events, (snapshots.last?.position ?? events) - 1].enumerated() {
            let scratch = directory.appendingPathComponent("scale-snapshot-\(index)").path
            started = ContinuousClock.now
            let view = try ledger.snapshot(at: .position(LogPosition(point)), path: scratch)
            let seconds = (ContinuousClock.now - started).seconds
            await view.close()
            if index == 0 { snapshotSeconds = seconds }
            worst = max(worst, seconds)
        }
        await ledger.close()
        progress("scale: rebuilding the read models of \(events) events in a process of its own")
        let processPeak = try Self.rebuildInOwnProcess(path: path)
        progress("scale: rebuilding the read models of \(events) events in a process of its own, rewriting every one whole")
        let processRewritePeak = try Self.rebuildInOwnProcess(path: path, rewriteAll: true)

        return Figures(
            points: points, rebuildPerSecond: Double(events) / rebuildSeconds,
            snapshotSeconds: snapshotSeconds, snapshotWorstSeconds: worst,
            snapshotSaveSeconds: saveSeconds.max() ?? 0, snapshotInterval: snapshotInterval,
            verifyPerSecond: Double(verification.eventsChecked) / verifySeconds,
            scanPerSecond: Double(events) / scanSeconds,
            rebuildPeakAnonMB: Double(peak) / 1_048_576, rebuildAnonGrowthMB: Double(peak - baseline) / 1_048_576,
            rebuildChangedEntries: rebuilt.changedEntries, rewriteRebuildPerSecond: Double(events) / rewriteSeconds,
            rewriteRebuildPeakAnonMB: Double(rewritePeak) / 1_048_576,
            processRebuildPeakAnonMB: Double(processPeak) / 1_048_576,
            processRewriteRebuildPeakAnonMB: Double(processRewritePeak) / 1_048_576,
            participants10P50Micros: participantP50[10] ?? 0, participants100P50Micros: participantP50[100] ?? 0,
            events: events)
    }
}

extension ScaleBench {
    /// Runs `share-ledger rebuild --path PATH` (this executable) in a child process, in that process
    /// itself (not in a supervised child of its own), sampling its `RssAnon` every 5 ms; returns the
    /// peak in bytes.
    static func rebuildInOwnProcess(path: String, rewriteAll: Bool = false) throws -> Int {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Bundle.main.executablePath ?? CommandLine.arguments[0])
        process.arguments = ["rebuild", "--path", path, "--json"] + (rewriteAll ? ["--rewrite-all"] : [])
        var environment = ProcessInfo.processInfo.environment
        environment[CommandSupervisor.childVariable] = "1"
        environment[CommandSupervisor.pipeVariable] = nil  // this process's pipe is not the child's
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        var peak = 0
        while process.isRunning {
            peak = max(peak, AnonymousMemorySampler.current(pid: process.processIdentifier))
            usleep(5_000)
        }
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw BenchFailure("share-ledger rebuild in a process of its own exited with \(process.terminationStatus)")
        }
        return peak
    }
}

/// A failed bench precondition.
struct BenchFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Samples the process's anonymous resident memory (`RssAnon` in /proc/self/status) every 5 ms on
/// a thread of its own; `stop()` returns the peak and the value when sampling started, in bytes.
final class AnonymousMemorySampler: @unchecked Sendable {
    // @unchecked: `peak`, `baseline` and `running` are read and written only under `lock`.
    private let lock = NSLock()
    private var peak = 0
    private var baseline = 0
    private var running = false
    private var thread: Thread?

    static func current() -> Int { current(path: "/proc/self/status") }

    /// The `RssAnon` of process `pid`, in bytes (0 once it is gone).
    static func current(pid: Int32) -> Int { current(path: "/proc/\(pid)/status") }

    private static func current(path: String) -> Int {
        guard let status = try? String(contentsOfFile: path, encoding: .utf8) else { return 0 }
        for line in status.split(separator: "\n") where line.hasPrefix("RssAnon:") {
            let digits = line.split(separator: " ").compactMap { Int($0) }
            return (digits.first ?? 0) * 1024
        }
        return 0
    }

    func start() {
        let now = Self.current()
        lock.withLock {
            baseline = now
            peak = now
            running = true
        }
        let thread = Thread { [self] in
            while lock.withLock({ running }) {
                let value = Self.current()
                lock.withLock { peak = max(peak, value) }
                usleep(5_000)
            }
        }
        self.thread = thread
        thread.start()
    }

    func stop() -> (peak: Int, baseline: Int) {
        let value = Self.current()
        return lock.withLock {
            running = false
            peak = max(peak, value)
            return (peak, baseline)
        }
    }
}
