import Benchmark
import Foundation
import ShareLedger
import ShareLedgerBenchmarkSupport

// The writer's and the reader's hot paths, one at a time, with allocation counts gated by committed
// thresholds (Benchmarks/Thresholds/, see docs/benchmarks.md "Micro benchmarks and allocation gates").

/// A scratch ledger with one share at each stage the steps need: an owner with a zone, an unshared
/// record (`board0`) and a shared one (`board1`) to which `_member` is invited (pending, metadata
/// fetched), and `_guest`, registered but not invited.
struct Fixture {
    static let container = "iCloud.com.example.notes"
    let ledger: ShareLedger
    let directory: URL
    let shareURL: URL
    let memberMetadata: Share.Metadata

    static func make() async throws -> Fixture {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("shareledger-hotpaths-\(UUID().uuidString)")
        var configuration = ShareLedger.Configuration(path: directory.path, durability: .unsafeNoSync, initialMapSize: 1 << 28)
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        try await ledger.registerUser("_owner", in: container, emailAddress: "owner@example.com")
        try await ledger.registerUser("_member", in: container, emailAddress: "member@example.com")
        try await ledger.registerUser("_guest", in: container, emailAddress: "guest@example.com")
        let owner = ledger.container(container, userRecordName: "_owner")
        let zone = RecordZoneID(zoneName: "Boards")
        _ = try await owner.save(RecordZone(zoneID: zone))
        for name in ["board0", "board1"] {
            _ = try await owner.save(
                Record(recordType: "Board", recordID: RecordID(recordName: name, zoneID: zone)))
        }
        let share = try await owner.share(rootRecord: RecordID(recordName: "board1", zoneID: zone), title: "Planning")
        _ = try await owner.addParticipant(LookupInfo(emailAddress: "member@example.com"), permission: .readWrite, to: share.url)
        let metadata = try await ledger.container(container, userRecordName: "_member").shareMetadata(for: share.url)
        return Fixture(ledger: ledger, directory: directory, shareURL: share.url, memberMetadata: metadata)
    }

    func close() async {
        await ledger.close()
        try? FileManager.default.removeItem(at: directory)
    }
}

let benchmarks: @Sendable () -> Void = {
    /// Allocation counts of single-threaded, deterministic work (the same count in every sample): a
    /// change of more than 0.5% at p90, so one allocation more or less per operation in any of these, is a
    /// regression (or an improvement to record in Thresholds/).
    let allocationGate: [BenchmarkMetric: BenchmarkThresholds] = [
        .mallocCountTotal: BenchmarkThresholds(relative: [.p90: 0.5])
    ]

    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        warmupIterations: 10,
        scalingFactor: .kilo,
        maxDuration: .seconds(3),
        maxIterations: 100_000,
        thresholds: allocationGate
    )

    // MARK: Envelope and hash

    // A ShareCreated event's payload serialized, its envelope encoded and chained (SHA-256), as the
    // writer does before its MDB_APPEND put.
    Benchmark("envelope.encode") { benchmark in
        let envelope = BenchmarkEnvelope.shareCreated()
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            blackHole(try envelope.encode())
        }
    }

    // The same entry decoded as a reader does (EventLog.event(at:)).
    Benchmark("envelope.decode") { benchmark in
        let stored = try BenchmarkEnvelope.shareCreated().encode()
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            blackHole(try BenchmarkEnvelope.decode(stored))
        }
    }

    // SHA-256(previous hash ‖ canonical bytes) of a typical entry (300 canonical bytes).
    Benchmark("hash.chain") { benchmark in
        let previous = [UInt8](repeating: 0xAB, count: 32)
        let canonical = (0..<300).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            blackHole(BenchmarkEnvelope.chainHash(previous: previous, canonical: canonical))
        }
    }

    // MARK: Decide + apply (in a write transaction that is aborted, so each iteration sees the same state)

    // Each step twice: `decide.<step>` reads through a row cache as the writer does (empty at the
    // start of the step, so each row it reads is decoded once), `decide.<step>.uncached` decodes
    // every read, as a rebuild's replay does.
    func decide(_ name: String, actor: String, _ step: @escaping @Sendable (Fixture) throws -> BenchmarkStep) {
        for rowCache in [true, false] {
            Benchmark("decide." + name + (rowCache ? "" : ".uncached")) { benchmark in
                let fixture = try await Fixture.make()
                let step = try step(fixture)
                benchmark.startMeasurement()
                for _ in benchmark.scaledIterations {
                    blackHole(
                        try fixture.ledger.benchmarkDecideAndApply(step, container: Fixture.container, actor: actor, rowCache: rowCache))
                }
                benchmark.stopMeasurement()
                await fixture.close()
            }
        }
    }

    decide("createShare", actor: "_owner") { fixture in
        BenchmarkStep.createShare(
            fixture.ledger, rootRecord: RecordID(recordName: "board0", zoneID: RecordZoneID(zoneName: "Boards")), title: "Planning")
    }

    decide("invite", actor: "_owner") { fixture in
        try BenchmarkStep.addParticipant(
            fixture.ledger, LookupInfo(emailAddress: "guest@example.com"), permission: .readWrite, to: fixture.shareURL)
    }

    // Deciding a fetch reads the caller's account, the share and the caller's standing: the logged
    // ShareMetadataFetched records what the metadata said of them.
    decide("fetchMetadata", actor: "_member") { fixture in BenchmarkStep.fetchMetadata(fixture.shareURL) }

    decide("accept", actor: "_member") { fixture in BenchmarkStep.accept(fixture.ledger, fixture.memberMetadata) }

    // MARK: Queries (public API, no event appended)

    /// One query of the fixture's share, as `user` in the fixture's container.
    func query<Answer>(_ name: String, as user: String, _ body: @escaping @Sendable (Container, URL) throws -> Answer) {
        Benchmark("query." + name) { benchmark in
            let fixture = try await Fixture.make()
            let container = fixture.ledger.container(Fixture.container, userRecordName: user)
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations {
                blackHole(try body(container, fixture.shareURL))
            }
            benchmark.stopMeasurement()
            await fixture.close()
        }
    }

    // The share's metadata for the invited member, from the read models.
    query("metadata", as: "_member") { member, url in try member.shareMetadataWithoutLogging(for: url) }

    // The share as its owner sees it (every participant), read and presented: the work a caller does
    // after a share action's commit to build its answer.
    query("share", as: "_owner") { owner, url in try owner.share(for: url) }
}
