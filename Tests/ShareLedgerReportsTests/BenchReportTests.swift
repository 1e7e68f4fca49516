import Foundation
import ShareLedgerReports
import Testing
import TestSupport

@Suite("Benchmark report")
struct BenchReportTests {
    static let fixtures = packageRoot.appendingPathComponent("Tests/ShareLedgerReportsTests/Fixtures")

    static func run(_ file: String) throws -> BenchRun {
        try BenchRun.decode(Data(contentsOf: fixtures.appendingPathComponent(file)), name: file)
    }

    /// Each figure stands beside its raw-LMDB baseline or SQLite peer, with min–max whiskers, and
    /// the machine's facts are listed.
    @Test func barsBesideBaselines() throws {
        let bench = try Self.run("bench-events-quick.json")
        let peer = try Self.run("peer-comparison.json")
        let html = BenchReport(runs: [bench, peer]).html()
        for (name, value) in bench.figures where name.hasSuffix(".perSecond") {
            #expect(html.contains(BenchReportFormat.value(value)), "\(name) is drawn")
            let raw = String(name.dropLast(".perSecond".count)) + ".rawPerSecond"
            if let baseline = bench.figures[raw] {
                #expect(html.contains("bench-events-quick.json: raw LMDB: \(BenchReportFormat.value(baseline))"), "\(raw) beside it")
            }
        }
        #expect(html.contains("peer-comparison.json: SQLite peer: \(BenchReportFormat.value(peer.figures["peer.single.sqlitePerSecond"]!))"))
        let whiskers = matches(of: #"<path class="whisker" d="([^"]*)""#, in: html)
        let spread = bench.figures.keys.filter { bench.minimum?[$0] != bench.maximum?[$0] }
        #expect(!spread.isEmpty && !whiskers.isEmpty, "runs with repeats have whiskers")
        let machine = try #require(bench.machine)
        #expect(html.contains("<td class=\"num\">\(machine.cores)</td>"))
        #expect(html.contains("not recorded in this JSON"), "the peer JSON has no machine facts")
        #expect(!html.lowercased().contains("<script"))
    }

    /// Machine facts come from /proc/cpuinfo's flags (x86) and Features (ARM).
    @Test func machineFactsFromCpuinfo() {
        let x86 = MachineFacts(
            cpuinfo: "processor\t: 0\nmodel name\t: Example CPU\nflags\t\t: fpu sse4_2 aes avx2 sha_ni\n\nprocessor\t: 1\nflags\t: fpu\n",
            cores: 2, memoryGiB: 4, system: nil)
        #expect(x86.cpuModel == "Example CPU")
        #expect(x86.cpuFeatures == ["sha_ni", "aes", "avx2", "sse4_2"])
        let arm = MachineFacts(cpuinfo: "processor\t: 0\nFeatures\t: fp asimd aes pmull sha1 sha2\n", cores: 4, memoryGiB: 8, system: nil)
        #expect(arm.cpuFeatures == ["aes", "sha1", "sha2", "pmull", "asimd"])
    }

    /// Share actions against callers is a curve when the runs measured several numbers of callers.
    @Test func callerCurve() {
        let runs = [
            BenchRun(name: "a", figures: ["append.single.perSecond": 2_000, "append.concurrent64.perSecond": 20_000]),
            BenchRun(name: "b", figures: ["append.concurrent4.perSecond": 7_000, "append.concurrent256.perSecond": 24_000]),
        ]
        let html = BenchReport(runs: runs).html()
        #expect(html.contains("<svg class=\"curve-chart\""))
        for callers in [1, 4, 64, 256] { #expect(html.contains("\(callers) callers:"), "point for \(callers)") }
    }

    /// `bench --from-json` draws saved runs without running anything, and refuses a file that is not one.
    @Test func cliDrawsSavedRuns() async throws {
        let directory = TemporaryDirectory()
        let page = directory.child("bench.html")
        let outcome = try await runProduct(
            "share-ledger",
            ["bench", "--from-json", Self.fixtures.appendingPathComponent("bench-events-quick.json").path, "--from-json",
             Self.fixtures.appendingPathComponent("peer-comparison.json").path, "--html", page, "--path", directory.child("scratch")])
        #expect(outcome.exited(0), "\(outcome.summary)")
        #expect(try String(contentsOfFile: page, encoding: .utf8).contains("SQLite peer"))
        #expect(!FileManager.default.fileExists(atPath: directory.child("scratch")), "nothing was run")
        let bad = directory.child("bad.json")
        try Data("not json".utf8).write(to: URL(fileURLWithPath: bad))
        let refused = try await runProduct("share-ledger", ["bench", "--from-json", bad, "--html", page])
        #expect(refused.exited(1) && refused.stderr.contains("is not the JSON of `bench --json`"), "\(refused.summary)")
    }
}

/// How the report writes numbers (the same formatter, to find them in the page).
enum BenchReportFormat {
    static func value(_ value: Double) -> String {
        let formatter = NumberFormatter()
        formatter.numberStyle = .decimal
        formatter.maximumFractionDigits = abs(value) < 100 ? 2 : 0
        formatter.locale = Locale(identifier: "en_US")
        return formatter.string(from: NSNumber(value: value)) ?? String(value)
    }
}
