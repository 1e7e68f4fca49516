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

    /// A latency triple is a histogram over a logarithmic axis: three bins that meet at p50 and p99
    /// and end at the maximum, whose areas are 50%, 49% and 1% of the requests; a panel without the
    /// whole triple keeps its bars.
    @Test func latencyHistograms() throws {
        let json = #"{"figures": {"http.resolve.p50Micros": 100, "http.resolve.p99Micros": 1000, "http.resolve.maxMicros": 10000, "query.metadata.p50Micros": 7}}"#
        let html = BenchReport(runs: [try BenchRun.decode(Data(json.utf8), name: "run")]).html()
        let svgs = html.components(separatedBy: "<svg ").filter { $0.hasPrefix("class=\"panel histogram\"") }
        #expect(svgs.count == 1, "one histogram: query.metadata has p50 alone")
        let svg = try #require(svgs.first)
        #expect(svg.contains("http.resolve latency"))
        let pattern = #"<rect class="bin (p50|p99|max)" x="([0-9.]+)" y="([0-9.]+)" width="([0-9.]+)" height="([0-9.]+)""#
        let regex = try NSRegularExpression(pattern: pattern)
        let bins = regex.matches(in: svg, range: NSRange(svg.startIndex..., in: svg)).map { match in
            (1...5).map { String(svg[Range(match.range(at: $0), in: svg)!]) }
        }
        #expect(bins.map { $0[0] } == ["p50", "p99", "max"])
        let boxes = bins.map { $0.dropFirst().map { Double($0)! } }  // x, y, width, height
        try #require(boxes.count == 3)
        // The bins meet: p50's right edge is p99's left edge, and p99's is max's.
        #expect(abs(boxes[0][0] + boxes[0][2] - boxes[1][0]) < 0.2)
        #expect(abs(boxes[1][0] + boxes[1][2] - boxes[2][0]) < 0.2)
        // A logarithmic axis: p50 to p99 and p99 to max are one decade each, as wide as each other.
        #expect(abs(boxes[1][2] - boxes[2][2]) < 0.2)
        // Areas as the shares: 49% against 50%; the 1% bin the lowest. The bins stand on one axis.
        let area = boxes.map { $0[2] * $0[3] }
        #expect(abs(area[1] / area[0] - 0.98) < 0.02, "areas \(area)")
        #expect(boxes[2][3] < boxes[1][3] && boxes[1][3] < boxes[0][3])
        #expect(Set(boxes.map { ($0[1] + $0[3]) * 10 }.map { $0.rounded() }).count == 1)
        // Markers with the figures at p50, p99 and max, at the bins' right edges.
        for (name, value, box) in [("p50", "100", boxes[0]), ("p99", "1,000", boxes[1]), ("max", "10,000", boxes[2])] {
            let x = box[0] + box[2]
            #expect(svg.contains(">\(name) \(value)</text>"))
            let markers = matches(of: #"<path class="marker" d="M([0-9.]+) "#, in: svg).compactMap(Double.init)
            #expect(markers.contains { abs($0 - x) < 0.2 }, "\(name) marker at \(x): \(markers)")
        }
        #expect(html.contains("query.metadata latency") && html.contains("<rect class=\"bar p50\""))
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

    /// Without a flags or Features list (no /proc/cpuinfo, as on macOS) the features and the model
    /// are "unknown", not an empty list that reads as a CPU without any of them.
    @Test func machineFactsUnknownWithoutCpuinfo() {
        let none = MachineFacts(cpuinfo: "", cores: 8, memoryGiB: 16, system: nil)
        #expect(none.cpuFeatures == ["unknown"])
        #expect(none.cpuModel == "unknown")
        let plain = MachineFacts(cpuinfo: "model name\t: Plain CPU\nflags\t: fpu sse2\n", cores: 2, memoryGiB: 4, system: nil)
        #expect(plain.cpuFeatures.isEmpty, "a flags list without any feature looked for")
        let html = BenchReport(runs: [BenchRun(name: "mac", figures: ["x.perSecond": 1], machine: none)]).html()
        #expect(html.contains("<td>unknown</td>"))
    }

    /// The one-core verification stands beside the every-core one, in its panel.
    @Test func oneCoreBesideEveryCore() {
        let run = BenchRun(name: "run", figures: ["verify.perSecond": 1_500_000, "verify.perSecond.oneCore": 800_000])
        let html = BenchReport(runs: [run]).html()
        let panels = html.components(separatedBy: "<svg class=\"panel\"").dropFirst()
        #expect(panels.count == 1)
        let panel = panels.first ?? ""
        #expect(panel.contains(">verify <tspan"))
        #expect(panel.contains("one core: 800,000"))
        #expect(panel.contains("ledger: 1,500,000"))
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
