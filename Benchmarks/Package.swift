// swift-tools-version: 6.1
import PackageDescription

// Micro benchmarks of ShareLedger's hot paths with ordo-one/package-benchmark, and the peer
// comparison with SQLite through GRDB. docs/benchmarks.md says how to run them:
//
//   swift package --package-path Benchmarks benchmark                            # run, compare nothing
//   swift package --package-path Benchmarks benchmark thresholds check --target HotPaths --path Benchmarks/Thresholds
//                                                    # fail on an allocation-count regression
//   swift run -c release --package-path Benchmarks PeerComparison --repeats 3     # ShareLedger vs SQLite
//   scripts/instruction-count                        # instructions per share action, under callgrind
//
// Wall-clock throughput is for local comparison; the thresholds that gate are allocation counts,
// which do not depend on how busy the machine is.
let package = Package(
    name: "ShareLedgerBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "ShareLedger", path: "../"),
        .package(url: "https://github.com/ordo-one/package-benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
        // SQLite through GRDB: the embedded store the peer comparison measures ShareLedger against.
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
    ],
    targets: [
        .executableTarget(
            name: "LogAppend",
            dependencies: [
                .product(name: "Benchmark", package: "package-benchmark"),
                .product(name: "ShareLedger", package: "ShareLedger"),
            ],
            path: "Benchmarks/LogAppend",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "package-benchmark")]
        ),
        // The hot paths one at a time (envelope, hash, each command's decide+apply, the metadata query),
        // with allocation-count thresholds committed in Thresholds/.
        .executableTarget(
            name: "HotPaths",
            dependencies: [
                .product(name: "Benchmark", package: "package-benchmark"),
                .product(name: "ShareLedger", package: "ShareLedger"),
                .product(name: "ShareLedgerBenchmarkSupport", package: "ShareLedger"),
            ],
            path: "Benchmarks/HotPaths",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "package-benchmark")]
        ),
        // The peer comparison: the same share workload against ShareLedger and against SQLite (WAL,
        // synchronous=FULL) through GRDB, in one run. Not a package-benchmark target: a plain executable.
        .executableTarget(
            name: "PeerComparison",
            dependencies: [
                .product(name: "ShareLedger", package: "ShareLedger"),
                .product(name: "ShareLedgerBenchmarkSupport", package: "ShareLedger"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "PeerComparison"
        ),
        // Share actions one at a time for an instruction count under valgrind (docs/benchmarks.md).
        .executableTarget(
            name: "InstructionCount",
            dependencies: [.product(name: "ShareLedger", package: "ShareLedger")],
            path: "InstructionCount"
        ),
    ],
    swiftLanguageModes: [.v6]
)
