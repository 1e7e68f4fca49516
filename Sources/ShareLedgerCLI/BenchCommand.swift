import ArgumentParser
import Foundation
import Logging
import ShareLedger
import ShareLedgerBaselines
import ShareLedgerReports

/// `share-ledger bench`: throughput figures, each measured next to the raw LMDB baseline that bounds it.
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Measure the ledger's throughput and latencies next to raw LMDB baselines, in one process.",
        discussion: """
            Each write figure is measured on a fresh ledger under --path, then the same commit pattern \
            (the same number of records per commit, the same record sizes, the same durability) is \
            replayed with bare LMDB cursor puts. Reads are measured next to raw point reads and raw \
            cursor scans. Ratios compare figures measured side by side in this run.

            Parts (--only): append (share actions: 64 callers and one), events (bare event appends), \
            fetch (logged metadata fetches), residual (accept to zone latency), scale (metadata \
            queries at growing ledger sizes, raw scan, chain verification, rebuild, snapshot, memory). \
            Beside each rate: the whole process's CPU time per action (or per event), every thread counted. \
            Only when asked: verify (the chain verification of the scale part alone, on one core and on every \
            core, on a ledger of 250,000 events; --quick: 50,000), replicate (the share workload while shipping to NATS JetStream and following \
            into a replica; needs --nats), http (`serve` on loopback driven by wrk with 64 keep-alive \
            connections: resolves per second and accept p99, next to the same work in-process; needs wrk).
            """)

    @Option(help: "A directory for the scratch ledgers (created; emptied of bench-* folders first).")
    var path = "./.share-ledger-bench"

    @Flag(help: "A short run (under a minute).")
    var quick = false

    @Option(help: "durable (default), relaxed or unsafeNoSync, for the ledger and its raw baseline alike.")
    var durability: Durability = .durable

    @Option(help: "How long the writer polls for work before it sleeps, in microseconds, after a group commit of more than one command.")
    var writerPoll = 50

    @Option(help: "Repeat every measurement this many times; figures are medians, with min and max.")
    var repeats = 1

    @Flag(help: "Print {\"figures\": {NAME: number}} as JSON.")
    var json = false

    @Option(help: "Also write the figures as an HTML page (bars beside their baselines, whiskers, the machine) to this file.")
    var html: String?

    @Option(
        name: .customLong("from-json"),
        help: "Run nothing: draw these saved `bench --json` (or PeerComparison --json) files side by side into --html. Repeatable.")
    var fromJSON: [String] = []

    @Option(
        help: "Run only these parts, comma-separated: append, events, fetch, residual, scale, verify, http, replicate (default: all but verify, http and replicate).")
    var only: String?

    @Option(
        help: "Concurrent callers in the share-action part (figures append.concurrentN.*; the goals in docs/benchmarks.md are for 64).")
    var callers = 64

    @Option(help: "Accepts per second offered in the residual-task latency part.")
    var acceptRate = 5_000

    @Option(help: "NATS servers for the replicate part, comma-separated (scripts/cluster start prints them).")
    var nats: String?

    @Option(
        help: ArgumentHelp(
            "With --only replicate: instead of the standard part, this many seconds of the workload in windows alternately "
                + "without and with shipping and following (lag over time; the primary's rate with and without the shipper).",
            valueName: "seconds"))
    var replicateSeconds: Int?

    @Option(help: "With --replicate-seconds: the length of one window, in seconds.")
    var replicateWindow = 20

    @Flag(help: "Share actions write personal data in plaintext (as before crypto-shredding), to compare with the default, sealed.")
    var plaintextPersonalData = false

    @Flag(
        help: """
            Share actions invite by the invitees' email addresses (sealed, matched by keyed hash) instead of \
            their user record names.
            """)
    var inviteByEmail = false

    func validate() throws {
        if !fromJSON.isEmpty && html == nil { throw ValidationError("--from-json needs --html FILE to draw into") }
        if let replicateSeconds, !(2...7_200).contains(replicateSeconds) { throw ValidationError("--replicate-seconds must be 2...7200") }
        guard (1...600).contains(replicateWindow) else { throw ValidationError("--replicate-window must be 1...600") }
        guard (1...50).contains(repeats) else { throw ValidationError("--repeats must be 1...50") }
        guard (100...50_000).contains(acceptRate) else { throw ValidationError("--accept-rate must be 100...50000") }
        guard (1...1_024).contains(callers) else { throw ValidationError("--callers must be 1...1024") }
        for part in parts where !Self.allParts.contains(part) && part != "replicate" {
            throw ValidationError("unknown part \(part); the parts are \(Self.allParts.joined(separator: ", ")), replicate")
        }
        if parts.contains("replicate") && nats == nil {
            throw ValidationError("the replicate part needs --nats URL[,URL…] (scripts/cluster start prints them)")
        }
    }

    static let allParts = ["append", "events", "fetch", "residual", "scale", "verify", "http"]
    /// The parts run without --only (http needs wrk and a free port).
    static let defaultParts = ["append", "events", "fetch", "residual", "scale"]

    private var parts: Set<String> {
        Set((only ?? Self.defaultParts.joined(separator: ",")).split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
    }

    struct Report: Encodable {
        var figures: [String: Double]
        var minimum: [String: Double]
        var maximum: [String: Double]
        var repeats: Int
        var quick: Bool
        var machine = MachineFacts.current()
    }

    func run() async throws {
        if let html, !fromJSON.isEmpty {
            try BenchPage.write(files: fromJSON, to: html)
            return
        }
        #if DEBUG
            // scripts/run builds for debugging (the build the tests reuse); its figures say little.
            FileHandle.standardError.write(
                Data(
                    ("bench: this share-ledger is a debug build, several times slower than a release build; for figures: "
                        + "swift build -c release --product share-ledger, then .build/release/share-ledger bench\n").utf8))
        #endif
        let root = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        var samples: [String: [Double]] = [:]
        for round in 1...repeats {
            let bench = AppendBench(root: root, round: round, durability: durability, writerPoll: writerPoll)
            let figures = try await roundFigures(bench) { Output.progress("round \(round)/\(repeats): \($0)") }
            for (name, value) in figures { samples[name, default: []].append(value) }
            try? FileManager.default.removeItem(at: bench.directory)
        }
        let report = Report(
            figures: samples.mapValues { median($0) }, minimum: samples.mapValues { $0.min() ?? 0 },
            maximum: samples.mapValues { $0.max() ?? 0 }, repeats: repeats, quick: quick)
        if let html {
            try BenchPage.write(
                runs: [BenchRun(name: "this run", figures: report.figures, minimum: report.minimum, maximum: report.maximum, repeats: repeats, quick: quick, machine: report.machine)],
                to: html)
        }
        if json {
            Output.printJSON(report)
        } else {
            printTable(report)
        }
    }

    /// The figures of one round: each part asked for, in order; `say` shows progress.
    private func roundFigures(_ bench: AppendBench, say: (String) -> Void) async throws -> [String: Double] {
        var figures: [String: Double] = [:]
        func add(_ part: [String: Double]) {
            figures.merge(part) { $1 }
            Output.endProgress()
        }
        if parts.contains("append") { add(try await shareActionFigures(bench, say: say)) }
        if parts.contains("events") { add(try await eventFigures(bench, say: say)) }
        if parts.contains("fetch") { add(try await fetchFigures(bench, say: say)) }
        if parts.contains("scale") { add(try await scaleFigures(bench, say: say)) }
        if parts.contains("verify") && !parts.contains("scale") { add(try await verifyFigures(bench, say: say)) }
        if parts.contains("replicate"), let nats {
            let servers = try NATSOptions.parse(["--nats", nats]).servers()
            if let replicateSeconds {
                add(try await longReplicationFigures(bench, servers: servers, seconds: replicateSeconds, say: say))
            } else {
                add(try await replicationFigures(bench, servers: servers, say: say))
            }
        }
        if parts.contains("residual") { add(try await residualFigures(bench, say: say)) }
        if parts.contains("http") { add(try await httpFigures(bench, say: say)) }
        return figures
    }

    private func shareActionBench(_ bench: AppendBench) -> ShareActionBench {
        ShareActionBench(
            directory: bench.directory, durability: durability, writerPoll: writerPoll,
            sealsPersonalData: !plaintextPersonalData, invitesByEmail: inviteByEmail)
    }

    /// `append.*`: the share workload with `callers` callers (the same number of actions whatever
    /// the callers: 64 × 16 cycles in all) and with one.
    private func shareActionFigures(_ bench: AppendBench, say: (String) -> Void) async throws -> [String: Double] {
        let actions = shareActionBench(bench)
        let cycles = max(1, (quick ? 4 : 16) * 64 / callers)
        let concurrent = try await actions.mixed(name: "actions-concurrent", callers: callers, cycles: cycles) {
            say("share actions, \(callers) concurrent callers, segment \($0)/\($1)")
        }
        let single = try await actions.mixed(name: "actions-single", callers: 1, cycles: quick ? 60 : 300) {
            say("share actions, one caller, segment \($0)/\($1)")
        }
        let name = "append.concurrent\(callers)"
        var figures = [
            "\(name).perSecond": concurrent.perSecond,
            "\(name).rawPerSecond": concurrent.rawPerSecond,
            "\(name).ratio": concurrent.perSecond / concurrent.rawPerSecond,
            "\(name).meanCommitSize": concurrent.meanCommitSize,
            "append.single.perSecond": single.perSecond,
            "append.single.rawPerSecond": single.rawPerSecond,
            "append.single.ratio": single.perSecond / single.rawPerSecond,
            "append.storedBytesPerEvent": Double(concurrent.valueSize),
            "append.writerCpuMicrosPerAction": concurrent.writerCPUMicrosPerAction,
            "append.writerUserCpuMicrosPerAction": concurrent.writerUserMicrosPerAction,
            "append.pagesPerAction": concurrent.pagesPerAction,
            "append.single.writerCpuMicrosPerAction": single.writerCPUMicrosPerAction,
            "append.single.writerUserCpuMicrosPerAction": single.writerUserMicrosPerAction,
            "append.single.pagesPerAction": single.pagesPerAction,
        ]
        figures.merge(concurrent.processCPU.figures("append", per: "Action")) { $1 }
        figures.merge(single.processCPU.figures("append.single", per: "Action")) { $1 }
        return figures
    }

    /// `appendEvent.*`: bare event appends, 64 callers and one.
    private func eventFigures(_ bench: AppendBench, say: (String) -> Void) async throws -> [String: Double] {
        let concurrent = try await bench.interleaved(name: "concurrent", callers: 64, perCaller: quick ? 200 : 1_000) {
            say("bare events, 64 concurrent callers, segment \($0)/\($1)")
        }
        let single = try await bench.interleaved(name: "single", callers: 1, perCaller: quick ? 2_000 : 10_000) {
            say("bare events, one caller, segment \($0)/\($1)")
        }
        var figures: [String: Double] = [:]
        for (name, run) in [("appendEvent.concurrent64", concurrent), ("appendEvent.single", single)] {
            figures["\(name).perSecond"] = run.perSecond
            figures["\(name).rawPerSecond"] = run.rawPerSecond
            figures["\(name).rawSameWritesPerSecond"] = run.rawSameWritesPerSecond
            figures["\(name).ratio"] = run.perSecond / run.rawPerSecond
            figures["\(name).ratioToSameWrites"] = run.perSecond / run.rawSameWritesPerSecond
            figures.merge(run.processCPU.figures(name, per: "Action")) { $1 }
        }
        figures["appendEvent.concurrent64.meanCommitSize"] = concurrent.meanCommitSize
        figures["appendEvent.storedBytesPerEvent"] = Double(concurrent.valueSize)
        return figures
    }

    /// `fetch.logged.*`: 64 callers fetching metadata, every fetch logged.
    private func fetchFigures(_ bench: AppendBench, say: (String) -> Void) async throws -> [String: Double] {
        let fetch = try await shareActionBench(bench).fetches(callers: 64, perCaller: quick ? 60 : 300) {
            say("logged fetches, 64 callers, segment \($0)/\($1)")
        }
        var figures = [
            "fetch.logged.perSecond": fetch.perSecond,
            "fetch.logged.rawPerSecond": fetch.rawPerSecond,
            "fetch.logged.ratio": fetch.perSecond / fetch.rawPerSecond,
            "fetch.logged.meanCommitSize": fetch.meanCommitSize,
        ]
        figures.merge(fetch.processCPU.figures("fetch.logged", per: "Action")) { $1 }
        return figures
    }

    /// `scale.*`, `query.*`, `scan.*`, `verify.*`, `rebuild.*`, `snapshot.*`, `memory.*`.
    private func scaleFigures(_ bench: AppendBench, say: (String) -> Void) async throws -> [String: Double] {
        let sizes: [UInt64] = quick ? [10_000, 100_000] : [10_000, 100_000, 1_000_000]
        let scale = try await ScaleBench(directory: bench.directory).run(
            sizes: sizes, queries: quick ? 5_000 : 20_000, snapshotInterval: quick ? 25_000 : 100_000, progress: say)
        var figures: [String: Double] = [:]
        for point in scale.points {
            let size = point.events >= 1_000_000 ? "1M" : point.events >= 100_000 ? "100k" : "10k"
            figures["scale.\(size).events"] = Double(point.events)
            figures["scale.\(size).metadataP50Micros"] = point.metadataP50Micros
            figures["scale.\(size).metadataP99Micros"] = point.metadataP99Micros
            figures["scale.\(size).metadataUncachedP50Micros"] = point.uncachedP50Micros
            figures["scale.\(size).rawPointReadP50Micros"] = point.rawPointReadP50Micros
        }
        if let small = scale.points.first, let large = scale.points.last {
            figures["query.metadata.p50Micros"] = small.metadataP50Micros
            figures["query.rawPointRead.p50Micros"] = small.rawPointReadP50Micros
            figures["query.metadata.uncachedP50Micros"] = small.uncachedP50Micros
            figures["scale.metadataQueryRatio"] = large.metadataP50Micros / small.metadataP50Micros
            figures["scale.metadataUncachedQueryRatio"] = large.uncachedP50Micros / small.uncachedP50Micros
        }
        figures["scale.participants10.metadataP50Micros"] = scale.participants10P50Micros
        figures["scale.participants100.metadataP50Micros"] = scale.participants100P50Micros
        figures["snapshot.atHeadSeconds"] = scale.snapshotSeconds
        figures["snapshot.worstSeconds"] = scale.snapshotWorstSeconds
        figures["snapshot.saveSeconds"] = scale.snapshotSaveSeconds
        figures["snapshot.intervalEvents"] = Double(scale.snapshotInterval)
        figures["memory.rebuildProcessPeakAnonMB"] = scale.processRebuildPeakAnonMB
        figures["memory.rebuildRewriteAllProcessPeakAnonMB"] = scale.processRewriteRebuildPeakAnonMB
        return figures.merging(Self.replayFigures(scale.replays)) { $1 }
    }

    /// The figures of the scale part's replays: scan, verify, rebuild.
    private static func replayFigures(_ replays: ScaleBench.Replays) -> [String: Double] {
        var figures = verifyFigures(replays.verify)
        figures["scan.rawPerSecond"] = replays.scanPerSecond
        figures["verify.ratioToScan"] = replays.verify.perSecond / replays.scanPerSecond
        figures["rebuild.perSecond"] = replays.rebuildPerSecond
        figures["rebuild.ratioToScan"] = replays.rebuildPerSecond / replays.scanPerSecond
        figures["rebuild.events"] = Double(replays.events)
        figures["memory.rebuildPeakAnonMB"] = replays.rebuildPeakAnonMB
        figures["memory.rebuildAnonGrowthMB"] = replays.rebuildAnonGrowthMB
        figures["rebuild.changedEntries"] = Double(replays.rebuildChangedEntries)
        figures["rebuild.rewriteAll.perSecond"] = replays.rewriteRebuildPerSecond
        figures["memory.rebuildRewriteAllPeakAnonMB"] = replays.rewriteRebuildPeakAnonMB
        figures.merge(replays.scanCPU.figures("scan", per: "Event")) { $1 }
        figures.merge(replays.rebuildCPU.figures("rebuild", per: "Event")) { $1 }
        figures.merge(replays.rewriteRebuildCPU.figures("rebuild.rewriteAll", per: "Event")) { $1 }
        return figures
    }

    /// `verify.*`: the chain verification on one core and on every core, side by side.
    private static func verifyFigures(_ verify: ScaleBench.VerifyFigures) -> [String: Double] {
        var figures = [
            "verify.perSecond": verify.perSecond,
            "verify.perSecond.oneCore": verify.oneCorePerSecond,
            "verify.speedup": verify.speedup,
            "verify.threads": Double(verify.threads),
            "verify.events": Double(verify.events),
        ]
        figures.merge(verify.cpu.figures("verify", per: "Event")) { $1 }
        figures.merge(verify.oneCoreCPU.figures("verify.oneCore", per: "Event")) { $1 }
        return figures
    }

    /// `--only verify` (without scale): the verification alone, on a ledger of its own.
    private func verifyFigures(_ bench: AppendBench, say: (String) -> Void) async throws -> [String: Double] {
        let figures = try await ScaleBench(directory: bench.directory).verifyOnly(
            events: quick ? 50_000 : 250_000, progress: say)
        return Self.verifyFigures(figures)
    }

    /// `replicate.long.*`: windows alternately without and with shipping and following.
    private func longReplicationFigures(
        _ bench: AppendBench, servers: [String], seconds: Int, say: (String) -> Void
    ) async throws -> [String: Double] {
        let windows = try await ReplicationBench(
            directory: bench.directory, durability: durability, servers: servers, logger: Logger(label: "bench") { _ in SwiftLogNoOpLogHandler() }
        ).long(callers: callers, seconds: seconds, window: replicateWindow, progress: say)
        var figures: [String: Double] = [:]
        for (index, window) in windows.enumerated() {
            let name = String(format: "replicate.long.w%02d.", index + 1) + (window.replicating ? "replicating." : "alone.")
            figures[name + "actionsPerSecond"] = window.actionsPerSecond
            if window.replicating {
                figures[name + "lagP99Positions"] = window.lagP99Positions
                figures[name + "lagMaxPositions"] = window.lagMaxPositions
                figures[name + "lagP99Millis"] = window.lagP99Millis
            }
        }
        let alone = windows.filter { !$0.replicating }.map(\.actionsPerSecond)
        let replicating = windows.filter(\.replicating).map(\.actionsPerSecond)
        let aloneMean = alone.reduce(0, +) / Double(max(1, alone.count))
        let replicatingMean = replicating.reduce(0, +) / Double(max(1, replicating.count))
        figures["replicate.long.alone.actionsPerSecond"] = aloneMean
        figures["replicate.long.replicating.actionsPerSecond"] = replicatingMean
        figures["replicate.long.shippingOverheadPercent"] = aloneMean > 0 ? (1 - replicatingMean / aloneMean) * 100 : 0
        return figures
    }

    /// `replicate.*`: the share workload while shipping to JetStream and following into a replica.
    private func replicationFigures(_ bench: AppendBench, servers: [String], say: (String) -> Void) async throws -> [String: Double] {
        let cycles = max(1, (quick ? 4 : 16) * 64 / callers)
        let replicate = try await ReplicationBench(
            directory: bench.directory, durability: durability, servers: servers, logger: Logger(label: "bench") { _ in SwiftLogNoOpLogHandler() }
        ).run(callers: callers, cycles: cycles, progress: say)
        return [
            "replicate.primary.actionsPerSecond": replicate.actionsPerSecond,
            "replicate.events": Double(replicate.events),
            "replicate.live.shippedPerSecond": replicate.liveShippedPerSecond,
            "replicate.live.appliedPerSecond": replicate.liveAppliedPerSecond,
            "replicate.lag.p99Positions": replicate.lagP99Positions,
            "replicate.lag.maxPositions": replicate.lagMaxPositions,
            "replicate.lag.p99Millis": replicate.lagP99Millis,
            "replicate.drainMillis": replicate.drainMillis,
            "replicate.backlog.shippedPerSecond": replicate.backlogShippedPerSecond,
            "replicate.backlog.appliedPerSecond": replicate.backlogAppliedPerSecond,
        ]
    }

    /// `accept.residual.*`: accept to zone latency at the offered rate.
    private func residualFigures(_ bench: AppendBench, say: (String) -> Void) async throws -> [String: Double] {
        let residual = try await AcceptResidualBench(
            directory: bench.directory, durability: durability, rate: acceptRate, seconds: quick ? 1 : 3
        ).run(progress: say)
        var figures = [
            "accept.residual.p50Millis": residual.p50Millis,
            "accept.residual.p99Millis": residual.p99Millis,
            "accept.residual.maxMillis": residual.maxMillis,
            "accept.residual.acceptsPerSecond": residual.acceptsPerSecond,
            "accept.residual.commitsPerSecond": residual.commitsPerSecond,
            "accept.residual.meanCommitEvents": residual.meanCommitEvents,
        ]
        figures.merge(residual.processCPU.figures("accept.residual", per: "Action")) { $1 }
        return figures
    }

    /// `http.*`: the server on loopback under wrk, next to the same work in-process.
    private func httpFigures(_ bench: AppendBench, say: (String) -> Void) async throws -> [String: Double] {
        let http = try await HTTPBench(directory: bench.directory, durability: durability, seconds: quick ? 2 : 5).run(progress: say)
        return [
            "http.resolve.perSecond": http.httpResolvePerSecond,
            "http.resolve.inProcessPerSecond": http.inProcessResolvePerSecond,
            "http.resolve.ratio": http.httpResolvePerSecond / http.inProcessResolvePerSecond,
            "http.accept.p99Millis": http.httpAcceptP99Millis,
            "http.accept.p50Millis": http.httpAcceptP50Millis,
            "http.accept.perSecond": http.httpAcceptPerSecond,
            "http.accept.inProcessP99Millis": http.inProcessAcceptP99Millis,
            "http.accept.inProcessP50Millis": http.inProcessAcceptP50Millis,
            "http.accept.inProcessPerSecond": http.inProcessAcceptPerSecond,
            "http.errors": Double(http.httpErrors),
            "http.resolve.commandsPerCommit": http.httpResolveCommandsPerCommit,
            "http.resolve.inProcessCommandsPerCommit": http.inProcessResolveCommandsPerCommit,
        ]
    }

    /// The text output: every figure (median, min, max), then the machine's CPU.
    private func printTable(_ report: Report) {
        print("figure".rightPad(44) + "median".leftPad(12) + "min".leftPad(13) + "max".leftPad(13))
        for name in report.figures.keys.sorted() {
            let cells = [report.figures[name]!, report.minimum[name]!, report.maximum[name]!].map {
                Output.grouped($0).leftPad(12)
            }
            print(name.rightPad(44) + cells.joined(separator: " "))
        }
        let machine = report.machine
        print(
            "CPU: \(machine.cpuModel ?? "unknown"), \(machine.cores) cores, features: "
                + (machine.cpuFeatures.isEmpty ? "none of \(MachineFacts.interestingFeatures.joined(separator: ", "))" : machine.cpuFeatures.joined(separator: ", ")))
    }

    private func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return 0 }
        return sorted.count % 2 == 1
            ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
    }
}

/// The append measurements of one round: the ledger and its two raw LMDB baselines, run in
/// alternating segments so that drift in the machine's flush times touches all three alike.
struct AppendBench {
    let directory: URL
    let durability: Durability
    let writerPoll: Int
    static let segments = 8

    init(root: URL, round: Int, durability: Durability, writerPoll: Int) {
        self.durability = durability
        self.writerPoll = writerPoll
        directory = root.appendingPathComponent("bench-\(ProcessInfo.processInfo.processIdentifier)-\(round)")
        try? FileManager.default.removeItem(at: directory)
    }

    struct Figures {
        var perSecond: Double
        var rawPerSecond: Double
        var rawSameWritesPerSecond: Double
        var meanCommitSize: Double
        var valueSize: Int
        /// The whole process's CPU time while the ledger appended, and the appends.
        var processCPU: CPUCost
    }

    /// `callers` tasks, each awaiting `perCaller` appends of one 200-byte event to its own stream, in
    /// segments; after each ledger segment, its commits are replayed against both raw baselines.
    func interleaved(
        name: String, callers: Int, perCaller: Int, progress: (Int, Int) -> Void
    ) async throws -> Figures {
        var configuration = EventLog.Configuration(
            path: directory.appendingPathComponent("\(name)-ledger").path, durability: durability,
            initialMapSize: 1 << 30)
        configuration.writerProbe = CommitSizeRecorder()
        configuration.writerPollMicroseconds = writerPoll
        let log = try EventLog.open(configuration)
        let raw = try RawReplayer(path: directory.appendingPathComponent("\(name)-raw").path, durability: durability)
        let rawSame = try RawReplayer(
            path: directory.appendingPathComponent("\(name)-raw-same").path, durability: durability,
            sameWrites: true, streams: callers)
        let payload = (0..<200).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 7) }
        let run = try await interleavedSegments(log, raws: [raw, rawSame], rounds: perCaller, progress: progress) { _, count in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for caller in 0..<callers {
                    group.addTask {
                        for _ in 0..<count {
                            try await log.append(
                                [EventDraft(type: "shareledger.bench.Payload", payload: payload)],
                                to: "bench/\(caller)",
                                metadata: CommandMetadata(container: "iCloud.com.example.bench", actor: "caller-\(caller)"))
                        }
                    }
                }
                try await group.waitForAll()
            }
            return callers * count
        }
        await log.close()
        raw.close()
        rawSame.close()
        return Figures(
            perSecond: run.perSecond, rawPerSecond: run.rawPerSecond[0], rawSameWritesPerSecond: run.rawPerSecond[1],
            meanCommitSize: run.meanCommitSize, valueSize: run.valueSize, processCPU: run.processCPU)
    }
}

extension Durability: ExpressibleByArgument {}

extension String {
    func leftPad(_ width: Int) -> String { count >= width ? self : String(repeating: " ", count: width - count) + self }
    func rightPad(_ width: Int) -> String { count >= width ? self : self + String(repeating: " ", count: width - count) }
}
