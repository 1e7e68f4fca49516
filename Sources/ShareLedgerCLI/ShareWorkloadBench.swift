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
        /// The whole process's CPU time (every thread) while the ledger ran, and the actions done.
        var processCPU: CPUCost
    }

    private func openLedger(_ name: String) throws -> ShareLedger {
        var configuration = ShareLedger.Configuration(
            path: directory.appendingPathComponent("\(name)-ledger").path, durability: durability, initialMapSize: 1 << 30)
        configuration.writerProbe = CommitSizeRecorder()
        configuration.writerPollMicroseconds = writerPoll
        configuration.sealsPersonalData = sealsPersonalData
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
            writerUserMicrosPerAction: run.writerUserMicrosPerAction, pagesPerAction: run.pagesPerAction,
            processCPU: run.processCPU)
    }
}

/// What ``interleavedSegments(_:raws:rounds:progress:_:)`` measured: the ledger's rate, each
/// baseline's rate, the mean commit size, the value size replayed, and (ledger segments only) the
/// writer thread's CPU microseconds per action (all, and user space alone), the 4 KiB pages written
/// to storage per action and the whole process's CPU time.
struct SegmentedRun {
    var perSecond: Double
    var rawPerSecond: [Double]
    var meanCommitSize: Double
    var valueSize: Int
    var writerCPUMicrosPerAction: Double
    var writerUserMicrosPerAction: Double
    var pagesPerAction: Double
    var processCPU: CPUCost
}

/// Runs `rounds` rounds of `segment` (given the first round's index and the count; it returns the
/// actions done) in ``AppendBench/segments`` segments on `log`; after each segment, replays its
/// commits (their sizes, the events' mean stored size) on each raw baseline.
func interleavedSegments(
    _ log: EventLog, raws: [RawReplayer], rounds: Int, progress: (Int, Int) -> Void,
    _ segment: (_ first: Int, _ count: Int) async throws -> Int
) async throws -> SegmentedRun {
    let segments = min(AppendBench.segments, rounds)
    var ledgerSeconds = 0.0
    var rawSeconds = [Double](repeating: 0, count: raws.count)
    var actions = 0
    var valueSize = 0
    var next = 0
    var measuredSizes: [Int] = []
    var writerNanoseconds: UInt64 = 0
    // The writer's exact CPU time, and its tick-sampled user and whole times, whose ratio splits it.
    var writerSampledUser: UInt64 = 0
    var writerSampled: UInt64 = 0
    var writtenBytes: UInt64 = 0
    var processCPU = ProcessCPUTime.zero
    for index in 0..<segments {
        progress(index + 1, segments)
        let count = rounds / segments + (index < rounds % segments ? 1 : 0)
        let commitsBefore = log.commitSizes().count
        let headBefore = try log.head().position.rawValue
        let cpuBefore = log.writerCPUNanoseconds
        let writtenBefore = processWrittenBytes()
        let processBefore = ProcessCPUTime.now()
        let started = ContinuousClock.now
        actions += try await segment(next, count)
        ledgerSeconds += (ContinuousClock.now - started).seconds
        processCPU = processCPU + (ProcessCPUTime.now() - processBefore)
        let cpuAfter = log.writerCPUNanoseconds
        writerNanoseconds += cpuAfter.total &- cpuBefore.total
        writerSampledUser += cpuAfter.user &- cpuBefore.user
        writerSampled += (cpuAfter.user &- cpuBefore.user) &+ (cpuAfter.system &- cpuBefore.system)
        writtenBytes += processWrittenBytes() &- writtenBefore
        next += count
        let head = try log.head().position.rawValue
        if valueSize == 0 { valueSize = try meanStoredSize(log, (headBefore + 1)...head) }
        let sizes = Array(log.commitSizes()[commitsBefore...])
        measuredSizes += sizes
        for (slot, raw) in raws.enumerated() { rawSeconds[slot] += try raw.replay(sizes, valueSize: valueSize) }
    }
    return SegmentedRun(
        perSecond: Double(actions) / ledgerSeconds, rawPerSecond: rawSeconds.map { Double(actions) / $0 },
        meanCommitSize: Double(measuredSizes.reduce(0, +)) / Double(max(1, measuredSizes.count)), valueSize: valueSize,
        writerCPUMicrosPerAction: Double(writerNanoseconds) / 1_000 / Double(max(1, actions)),
        writerUserMicrosPerAction: Double(writerNanoseconds) * (writerSampled == 0 ? 0 : Double(writerSampledUser) / Double(writerSampled))
            / 1_000 / Double(max(1, actions)),
        pagesPerAction: Double(writtenBytes) / 4_096 / Double(max(1, actions)),
        processCPU: CPUCost(time: processCPU, units: actions))
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
