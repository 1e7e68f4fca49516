// swift-tools-version: 6.1
import PackageDescription

/// Settings every target of this package is built with: Swift 6 mode (set package-wide below) plus the
/// upcoming features the server-side Swift packages use, so that the code stays explicit about existentials
/// and imports.
let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "ShareLedger",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "ShareLedger", targets: ["ShareLedger"]),
        // The generic, hash-chained event log alone (ShareLedger re-exports it).
        .library(name: "EventLog", targets: ["EventLog"]),
        // The pure sharing domain: values, commands and the decider, the projector, the read models over
        // a store protocol (ShareLedger re-exports it).
        .library(name: "SharingDomain", targets: ["SharingDomain"]),
        .library(name: "ShareLedgerAudit", targets: ["ShareLedgerAudit"]),
        .library(name: "ShareLedgerReplication", targets: ["ShareLedgerReplication"]),
        .library(name: "ShareLedgerServer", targets: ["ShareLedgerServer"]),
        .library(name: "ShareLedgerReports", targets: ["ShareLedgerReports"]),
        .executable(name: "share-ledger", targets: ["ShareLedgerCLI"]),
        // Support for the nested Benchmarks package (hot paths, peer comparison), like NIO's
        // NIOTestUtils: not part of any library product, and not for applications.
        .library(name: "ShareLedgerBenchmarkSupport", targets: ["ShareLedgerBenchmarkSupport"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-protobuf", from: "1.39.0"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        // `swift package generate-documentation --target ShareLedger` (the DocC catalog).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
        // `share-ledger serve`: the HTTP server (ShareLedgerServer), its Prometheus /metrics, and the
        // real HTTP client its tests drive it with.
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
    ],
    targets: [
        // liblmdb from the system (Debian: liblmdb-dev), found through pkg-config "lmdb".
        .systemLibrary(
            name: "CLMDB",
            pkgConfig: "lmdb",
            providers: [.apt(["liblmdb-dev"]), .brew(["lmdb"])]
        ),
        // Keys as bytes: big-endian integers (their byte order is their numeric order), the byte-wise
        // order of keys LMDB and the in-memory read-model store both keep, a collection's bytes. No
        // dependencies: the bottom of the graph, so that the LMDB wrapper and the pure domain share one copy.
        .target(
            name: "ByteKeys",
            swiftSettings: strictSettings
        ),
        // The safe LMDB wrapper. Everything in it is `package` access: no LMDB type leaves this package.
        .target(
            name: "LMDB",
            dependencies: ["ByteKeys", "CLMDB"],
            swiftSettings: strictSettings
        ),
        // The event log: envelope, codec, hash chain, group-commit writer that runs injected commit
        // steps, subscriptions, verification. Knows nothing about sharing.
        .target(
            name: "EventLog",
            dependencies: [
                "ByteKeys",
                "LMDB",
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            exclude: ["Generated/README.md"],
            swiftSettings: strictSettings
        ),
        // The pure sharing domain: values, commands and the decider, the projector, the event
        // validator, the read models over the `ReadModelStore` protocol and its in-memory store.
        // Imports neither LMDB nor ShareLedger.
        .target(
            name: "SharingDomain",
            dependencies: [
                "ByteKeys",
                "EventLog",
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            exclude: ["Generated/README.md"],
            swiftSettings: strictSettings
        ),
        // The facade over the domain: the store glue that runs it in the writer's commit step,
        // containers and operations, presentation, the worker and the audit tools, on the event log.
        .target(
            name: "ShareLedger",
            dependencies: [
                "ByteKeys",
                "EventLog",
                "SharingDomain",
                "LMDB",
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: strictSettings
        ),
        // Verify, rebuild and compare, history, state as of a position, checkpoints, export/import,
        // re-encryption: a client of the facade (its public and package API), like the server.
        .target(
            name: "ShareLedgerAudit",
            dependencies: [
                "ByteKeys",
                "ShareLedger",
                "SharingDomain",
                "EventLog",
                "LMDB",
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        // The NATS C client from the system (Debian: libnats-dev), found through pkg-config "libnats".
        .systemLibrary(
            name: "CNATS",
            pkgConfig: "libnats",
            providers: [.apt(["libnats-dev"]), .brew(["cnats"])]
        ),
        // Shipping the committed log to NATS JetStream, read replicas that apply it, the writer lease
        // and the shard map (docs/architecture.md, "Beyond one machine"). Uses only ShareLedger's
        // public and package API; no NATS type leaves this target.
        .target(
            name: "ShareLedgerReplication",
            dependencies: [
                "ShareLedger",
                "CNATS",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        // The ledger as an HTTP service in CloudKit Web Services' shape (`share-ledger serve`), and the
        // report pages for operators. Uses the public API of ShareLedger and ShareLedgerReports only: no
        // LMDB, no package access.
        .target(
            name: "ShareLedgerServer",
            dependencies: [
                "ShareLedger",
                // History bounds of the report pages' queries.
                "ShareLedgerAudit",
                // The operators' report pages under `/reports`.
                "ShareLedgerReports",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        // Pictures for auditors and operators (`share-ledger report`, `bench --html`): report models
        // built from the public history API, and a pure HTML/SVG renderer (no script in any page).
        .target(
            name: "ShareLedgerReports",
            dependencies: ["ShareLedger", "ShareLedgerAudit"],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "ShareLedgerCLI",
            dependencies: [
                "ShareLedger",
                "ShareLedgerAudit",
                "ShareLedgerReports",
                "ShareLedgerBaselines",
                "ShareLedgerReplication",
                "ShareLedgerServer",
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                // `serve --shard`: the writer answers forwarded requests through its own HTTP listener.
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                // Latency percentiles of `share-ledger simulate`.
                .product(name: "Histogram", package: "hdrhistogram-swift"),
            ],
            swiftSettings: strictSettings
        ),
        // The raw LMDB baselines `share-ledger bench` compares the ledger with, and the writer probe
        // that records the commit sizes they replay. Not a product.
        .target(
            name: "ShareLedgerBaselines",
            dependencies: ["ByteKeys", "EventLog", "LMDB"],
            swiftSettings: strictSettings
        ),
        // The hot paths the nested Benchmarks package measures, through `package` access to
        // ShareLedger (its one hook: `ShareLedger.rehearse`).
        .target(
            name: "ShareLedgerBenchmarkSupport",
            dependencies: ["ShareLedger", "EventLog", "ShareLedgerBaselines"],
            swiftSettings: strictSettings
        ),
        // What the tests and the crash harness share: children started with posix_spawn (`Spawned`),
        // the writer gate that holds the writer for batching tests, clocks and log fixtures. Not a
        // product.
        .target(
            name: "ShareLedgerTestSupport",
            dependencies: ["EventLog", "ShareLedgerBaselines"],
            swiftSettings: strictSettings
        ),
        // A child process for the crash tests: appends (or, with --mix, runs the mixed sharing workload)
        // and records every acknowledged command in a side file, until the test kills it with SIGKILL.
        // `--soak-driver` is the kill loop of scripts/soak. Not a product; the tests and the soak run it.
        .executableTarget(
            name: "ShareLedgerCrashChild",
            dependencies: ["ShareLedger", "ShareLedgerCrashHarness"],
            swiftSettings: strictSettings
        ),
        // The crash harness both the tests and `scripts/soak` use: the mixed sharing workload the
        // child runs, its acknowledgement side file, the checks after a kill and the kill loop.
        .target(
            name: "ShareLedgerCrashHarness",
            // ShareLedgerTestSupport for `Spawned` (children started with posix_spawn, not Foundation's Process).
            dependencies: ["ShareLedger", "ShareLedgerAudit", "ShareLedgerTestSupport"],
            swiftSettings: strictSettings
        ),
        // The fuzz targets (envelope decoder, share-URL parser, NDJSON line parser, HTTP request bodies): scripts/fuzz builds
        // it with --sanitize=fuzzer -DSHARELEDGER_FUZZING into its own scratch path, where libFuzzer
        // supplies `main`. A plain build makes a replayer that runs corpus files once. Not a product.
        .executableTarget(
            name: "ShareLedgerFuzz",
            dependencies: ["ShareLedger", "ShareLedgerAudit", "ShareLedgerFuzzSupport"],
            swiftSettings: strictSettings
        ),
        // The fuzz entry points (decode, apply, parse, round-trip, request bodies through the server's
        // endpoints), shared by the fuzz targets and the corpus tests. Not a product: `package` access
        // into ShareLedger and ShareLedgerServer.
        .target(
            name: "ShareLedgerFuzzSupport",
            dependencies: ["ShareLedger", "ShareLedgerAudit", "ShareLedgerServer", .product(name: "SwiftProtobuf", package: "swift-protobuf")],
            swiftSettings: strictSettings
        ),
        // Helpers the test targets share (a temporary directory per test).
        .target(
            name: "TestSupport",
            dependencies: ["ShareLedgerTestSupport"],
            path: "Tests/TestSupport",
            swiftSettings: strictSettings
        ),
        // The HTTP server, driven over loopback by a real HTTP client (and by Python's urllib).
        .testTarget(
            name: "ShareLedgerServerTests",
            dependencies: [
                "ShareLedger",
                "ShareLedgerAudit",
                "ShareLedgerServer",
                "TestSupport",
                "ShareLedgerTestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                // Depended on so that `swift test` builds the binary ServeCommandTests runs.
                "ShareLedgerCLI",
            ],
            // The Python client test's script, run with python3.
            exclude: ["python"],
            swiftSettings: strictSettings
        ),
        // The report pages, rendered for ledgers `simulate` made, held against `history` and `access`,
        // and laid out by headless Chromium.
        .testTarget(
            name: "ShareLedgerReportsTests",
            dependencies: [
                "ShareLedger",
                "ShareLedgerAudit",
                "ShareLedgerReports",
                "TestSupport",
                // Depended on so that `swift test` builds the binary the tests run.
                "ShareLedgerCLI",
            ],
            // Saved `bench --json` runs the benchmark report is drawn from.
            exclude: ["Fixtures"],
            swiftSettings: strictSettings
        ),
        // The pure sharing domain, without LMDB or a ledger: fast.
        .testTarget(
            name: "SharingDomainTests",
            dependencies: [
                "ByteKeys",
                "SharingDomain",
                "TestSupport",
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "LMDBTests",
            dependencies: ["ByteKeys", "LMDB", "CLMDB", "TestSupport"],
            swiftSettings: strictSettings
        ),
        // The event log alone: appends, group commits, the chain's byte format, subscriptions,
        // opening, the retry schedule. No sharing.
        .testTarget(
            name: "EventLogTests",
            dependencies: [
                "ByteKeys",
                "EventLog",
                "LMDB",
                "TestSupport",
                "ShareLedgerTestSupport",
                // `commitSizes()`, which the writer gate records.
                "ShareLedgerBaselines",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "ShareLedgerTests",
            dependencies: [
                "ByteKeys",
                "ShareLedger",
                "ShareLedgerAudit",
                "ShareLedgerFuzzSupport",
                "LMDB",
                "TestSupport",
                "ShareLedgerTestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "PropertyBased", package: "swift-property-based"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                // Depended on so that `swift test` builds the binaries the tests run as child processes.
                "ShareLedgerCLI",
                "ShareLedgerCrashChild",
                "ShareLedgerCrashHarness",
            ],
            // Committed ledgers the tests read by path (e.g. events in an older schema version).
            exclude: ["Fixtures"],
            swiftSettings: strictSettings
        ),
        // The replication tests: a 3-node JetStream cluster on loopback (scripts/cluster), started and
        // stopped by the suite; skipped with a message when nats-server is not installed.
        .testTarget(
            name: "ShareLedgerReplicationTests",
            dependencies: [
                "ShareLedger",
                "ShareLedgerAudit",
                "ShareLedgerReplication",
                "TestSupport",
                .product(name: "Logging", package: "swift-log"),
                // `serve --shard` driven over HTTP.
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                // Depended on so that `swift test` builds the binary the CLI test runs.
                "ShareLedgerCLI",
            ],
            swiftSettings: strictSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
