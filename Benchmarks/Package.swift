// swift-tools-version: 6.1
import PackageDescription

// Micro benchmarks of ShareLedger's hot paths with ordo-one/package-benchmark.
//
//   swift package --package-path Benchmarks benchmark                 # run, compare nothing
//   swift package --package-path Benchmarks benchmark baseline update  # record a baseline
//   swift package --package-path Benchmarks benchmark baseline check   # fail on regressions
//
// Wall-clock throughput is for local comparison; the thresholds that gate are allocation counts,
// which do not depend on how busy the machine is.
let package = Package(
    name: "ShareLedgerBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "ShareLedger", path: "../"),
        .package(url: "https://github.com/ordo-one/package-benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
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
        )
    ],
    swiftLanguageModes: [.v6]
)
