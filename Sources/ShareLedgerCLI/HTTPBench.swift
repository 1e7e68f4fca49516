import Foundation
import Logging
import ServiceLifecycle
import ShareLedger
import ShareLedgerServer
import Synchronization

/// `bench --only http`: the server's throughput on loopback next to the same work in-process, in
/// one run on one ledger. wrk (Debian's package) drives the server with 64 keep-alive connections;
/// 64 concurrent tasks do the in-process side.
///
/// - resolve: `records/resolve` of one shortGUID per request (each a logged metadata fetch) against
///   `shareMetadatas(for:)` in-process.
/// - accept: `records/accept` of a fresh (user, public share) pair per request against
///   `shareMetadataWithoutLogging(for:)` + `accept(_:)` in-process (what the endpoint does), p99.
struct HTTPBench {
    let directory: URL
    let durability: Durability
    let seconds: Int

    static let container = "iCloud.com.example.httpbench"
    /// Users per public share (a share holds at most 100 participants).
    static let users = 90
    static let connections = 64

    struct Figures {
        var httpResolvePerSecond: Double
        var inProcessResolvePerSecond: Double
        var httpAcceptP99Millis: Double
        var httpAcceptP50Millis: Double
        var httpAcceptPerSecond: Double
        var inProcessAcceptP99Millis: Double
        var inProcessAcceptP50Millis: Double
        var inProcessAcceptPerSecond: Double
        /// Non-2xx answers, and accepts answered without a new acceptance.
        var httpErrors: Int
        /// Commands per group commit of the writer during each resolve phase (how well the callers'
        /// fetches batch: each commit costs one fsync in durable mode).
        var httpResolveCommandsPerCommit: Double
        var inProcessResolveCommandsPerCommit: Double
    }

    /// Commands per commit between two readings of the writer's counters.
    static func commandsPerCommit(_ before: EventLog.GroupCommits, _ after: EventLog.GroupCommits) -> Double {
        let commits = after.commits - before.commits
        return commits == 0 ? 0 : Double(after.commands - before.commands) / Double(commits)
    }

    struct WrkResult {
        var requests: Int
        var perSecond: Double
        var p50Micros: Double
        var p99Micros: Double
        var errors: Int
    }

    static var wrkPath: String? {
        ["/usr/bin/wrk", "/usr/local/bin/wrk"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    func run(progress: (String) -> Void) async throws -> Figures {
        guard let wrk = Self.wrkPath else {
            throw LedgerError(.invalidArguments, "bench --only http needs wrk (apt-get install -y wrk)")
        }
        let path = directory.appendingPathComponent("http").path
        var configuration = ShareLedger.Configuration(path: path, durability: durability, initialMapSize: 1 << 30)
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        let sharesPerSide = max(50, seconds * 8_000 / Self.users)

        progress("http: setting up \(Self.users) users and \(2 * sharesPerSide) public shares")
        try await ledger.registerUser("_owner", in: Self.container)
        for index in 0..<Self.users { try await ledger.registerUser("_u\(index)", in: Self.container) }
        let owner = ledger.container(Self.container, userRecordName: "_owner")
        let zone = RecordZoneID(zoneName: "Bench")
        _ = try await owner.save(RecordZone(zoneID: zone))
        var shares: [Share] = []
        for index in 0..<(2 * sharesPerSide) {
            let root = RecordID(recordName: "r\(index)", zoneID: zone)
            _ = try await owner.save(Record(recordType: "Doc", recordID: root))
            shares.append(try await owner.share(rootRecord: root, publicPermission: .readOnly))
        }
        let httpShares = Array(shares[..<sharesPerSide])
        let inProcessShares = Array(shares[sharesPerSide...])

        let credentials = ServerCredentials(ledgerPath: path)
        let api = try credentials.createAPIToken(container: Self.container)
        var tokens: [String] = []
        for index in 0..<Self.users {
            tokens.append(
                try credentials.createWebAuthToken(
                    container: Self.container, userRecordName: "_u\(index)", expiresAt: Date().addingTimeInterval(3600)
                ).token)
        }

        // The server, in this process, on a free loopback port; its log lines off (as for the in-process side).
        let logger = Logger(label: "bench.http") { _ in SwiftLogNoOpLogHandler() }
        let (ports, portContinuation) = AsyncStream.makeStream(of: Int.self)
        let server = LedgerServer(
            ledger: ledger, credentials: credentials, configuration: .init(host: "127.0.0.1", port: 0), logger: logger,
            onServerRunning: { portContinuation.yield($0) })
        let group = ServiceGroup(services: [server], logger: logger)
        let figures = try await withThrowingTaskGroup(of: Void.self) { tasks -> Figures in
            tasks.addTask { try await group.run() }
            var iterator = ports.makeAsyncIterator()
            guard let port = await iterator.next() else { throw LedgerError(.closed, "the server did not start") }
            let script = directory.appendingPathComponent("http-bench.lua")
            try luaScript(
                endpointPrefix: "/database/1/\(Self.container)/development/public/records/", apiToken: api.token, tokens: tokens,
                guids: httpShares.map(\.token.text)
            ).write(to: script, atomically: true, encoding: .utf8)

            progress("http: in-process resolve, 64 tasks, \(seconds) s")
            let beforeInProcess = ledger.log.groupCommits
            let inProcessResolve = try await inProcessResolves(ledger, shares: httpShares)
            progress("http: HTTP resolve, wrk, 64 connections, \(seconds) s")
            let beforeHTTP = ledger.log.groupCommits
            let resolve = try runWrk(wrk, port: port, script: script, endpoint: "resolve")
            let afterHTTP = ledger.log.groupCommits
            progress("http: in-process accept, 64 tasks")
            let inProcessAccept = try await inProcessAccepts(ledger, shares: inProcessShares)
            progress("http: HTTP accept, wrk, 64 connections, \(seconds) s")
            let acceptedBefore = try ledger.statistics().acceptedParticipants
            let accept = try runWrk(wrk, port: port, script: script, endpoint: "accept")
            // Every answered accept must have accepted a fresh pair (a per-item error is still a 200).
            let accepted = Int(try ledger.statistics().acceptedParticipants - acceptedBefore)
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            return Figures(
                httpResolvePerSecond: resolve.perSecond, inProcessResolvePerSecond: inProcessResolve,
                httpAcceptP99Millis: accept.p99Micros / 1_000, httpAcceptP50Millis: accept.p50Micros / 1_000,
                httpAcceptPerSecond: accept.perSecond, inProcessAcceptP99Millis: inProcessAccept.p99Millis,
                inProcessAcceptP50Millis: inProcessAccept.p50Millis, inProcessAcceptPerSecond: inProcessAccept.perSecond,
                httpErrors: resolve.errors + accept.errors + max(0, accept.requests - accepted),
                httpResolveCommandsPerCommit: Self.commandsPerCommit(beforeHTTP, afterHTTP),
                inProcessResolveCommandsPerCommit: Self.commandsPerCommit(beforeInProcess, beforeHTTP))
        }
        await ledger.close()
        return figures
    }

    /// The wrk script: request k goes to user k mod 90 and share k / 90, so that no (user, share)
    /// pair repeats until all are used; each wrk thread takes every other k.
    private func luaScript(endpointPrefix: String, apiToken: String, tokens: [String], guids: [String]) -> String {
        """
        local tokens = {\(tokens.map { "\"\($0)\"" }.joined(separator: ","))}
        local guids = {\(guids.map { "\"\($0)\"" }.joined(separator: ","))}
        local endpoint = os.getenv("SL_ENDPOINT")
        local nextThread = 0
        function setup(thread)
            thread:set("first", nextThread)
            nextThread = nextThread + 1
        end
        local k = nil
        function request()
            if k == nil then k = first end
            local user = k % #tokens
            local share = math.floor(k / #tokens) % #guids
            k = k + 2
            local path = "\(endpointPrefix)" .. endpoint .. "?ckAPIToken=\(apiToken)&ckWebAuthToken=" .. tokens[user + 1]
            local body = '{"shortGUIDs":[{"value":"' .. guids[share + 1] .. '"}]}'
            return wrk.format("POST", path, {["Content-Type"] = "application/json"}, body)
        end
        function done(summary, latency, requests)
            local errors = summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
            io.write(string.format("RESULT %d %d %d %d\\n", summary.requests, latency:percentile(50), latency:percentile(99), errors))
        end
        """
    }

    private func runWrk(_ wrk: String, port: Int, script: URL, endpoint: String) throws -> WrkResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: wrk)
        process.arguments = ["-t2", "-c\(Self.connections)", "-d\(seconds)s", "-s", script.path, "http://127.0.0.1:\(port)"]
        process.environment = ["SL_ENDPOINT": endpoint]
        // wrk writes to a file, read after it exits: a read from a pipe can be interrupted by the
        // child's SIGCHLD (EINTR), which Foundation's readDataToEndOfFile turns into a trap.
        let outputPath = script.deletingLastPathComponent().appendingPathComponent("wrk-\(endpoint).out").path
        guard FileManager.default.createFile(atPath: outputPath, contents: nil),
            let output = FileHandle(forWritingAtPath: outputPath)
        else { throw LedgerError(.invalidArguments, "cannot write \(outputPath)") }
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        try? output.close()
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("RESULT ") }) else {
            throw LedgerError(.invalidArguments, "wrk printed no result: \(text.prefix(400))")
        }
        // Read from wrk's output: finite and clamped, so that a strange line cannot trap.
        let numbers = line.split(separator: " ").dropFirst().compactMap { Double($0) }.filter(\.isFinite)
        guard numbers.count == 4 else { throw LedgerError(.invalidArguments, "wrk's result line is malformed: \(line)") }
        return WrkResult(
            requests: CheckedConversion.int(clamping: numbers[0]), perSecond: numbers[0] / Double(seconds), p50Micros: numbers[1],
            p99Micros: numbers[2], errors: CheckedConversion.int(clamping: numbers[3]))
    }

    /// 64 tasks fetching metadata (logged) for `seconds`; fetches per second.
    private func inProcessResolves(_ ledger: ShareLedger, shares: [Share]) async throws -> Double {
        let deadline = ContinuousClock.now + .seconds(seconds)
        let started = ContinuousClock.now
        let total = try await withThrowingTaskGroup(of: Int.self) { group in
            for task in 0..<Self.connections {
                group.addTask {
                    var done = 0
                    var k = task
                    while ContinuousClock.now < deadline {
                        let user = ledger.container(Self.container, userRecordName: "_u\(k % Self.users)")
                        _ = try await user.shareMetadatas(for: [shares[(k / Self.users) % shares.count].url])
                        done += 1
                        k += Self.connections
                    }
                    return done
                }
            }
            return try await group.reduce(0, +)
        }
        return Double(total) / (ContinuousClock.now - started).seconds
    }

    /// 64 tasks accepting fresh (user, share) pairs for `seconds`; latency percentiles and rate.
    private func inProcessAccepts(
        _ ledger: ShareLedger, shares: [Share]
    ) async throws
        -> (p50Millis: Double, p99Millis: Double, perSecond: Double)
    {
        let pairs = Self.users * shares.count
        let deadline = ContinuousClock.now + .seconds(seconds)
        let started = ContinuousClock.now
        let samples = try await withThrowingTaskGroup(of: [Double].self) { group in
            for task in 0..<Self.connections {
                group.addTask {
                    var latencies: [Double] = []
                    var k = task
                    while ContinuousClock.now < deadline, k < pairs {
                        let user = ledger.container(Self.container, userRecordName: "_u\(k % Self.users)")
                        let begin = ContinuousClock.now
                        let metadata = try user.shareMetadataWithoutLogging(for: shares[k / Self.users].url)
                        _ = try await user.accept([metadata])
                        latencies.append((ContinuousClock.now - begin).seconds * 1_000)
                        k += Self.connections
                    }
                    return latencies
                }
            }
            return try await group.reduce(into: [Double]()) { $0 += $1 }.sorted()
        }
        let elapsed = (ContinuousClock.now - started).seconds
        guard !samples.isEmpty else { return (0, 0, 0) }
        return (
            samples[samples.count / 2], samples[min(samples.count - 1, samples.count * 99 / 100)], Double(samples.count) / elapsed
        )
    }
}
