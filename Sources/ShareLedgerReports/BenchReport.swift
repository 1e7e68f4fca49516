import Foundation

/// Facts about the machine a benchmark ran on, as `bench --json` records them.
public struct MachineFacts: Sendable, Hashable, Codable {
    /// Logical cores the process could use.
    public var cores: Int
    /// The CPU's model name, from /proc/cpuinfo ("unknown" where it names none; nil in JSON saved
    /// before it was recorded).
    public var cpuModel: String?
    /// The CPU features that matter to the ledger (SHA-256 and AES instructions, vector units), from
    /// /proc/cpuinfo's flags (x86) or Features (ARM); `["unknown"]` where there is no such list
    /// (no /proc/cpuinfo, as on macOS).
    public var cpuFeatures: [String]
    /// Physical memory in GiB.
    public var memoryGiB: Double
    /// The operating system's name and release.
    public var system: String?

    /// The features looked for.
    public static let interestingFeatures = ["sha_ni", "aes", "pclmulqdq", "avx2", "avx512f", "sse4_2", "sha1", "sha2", "pmull", "asimd"]

    /// This machine's facts (reads /proc/cpuinfo where there is one).
    public static func current() -> MachineFacts {
        let info = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
        return MachineFacts(
            cpuinfo: info, cores: ProcessInfo.processInfo.activeProcessorCount,
            memoryGiB: Double(ProcessInfo.processInfo.physicalMemory) / Double(1 << 30),
            system: ProcessInfo.processInfo.operatingSystemVersionString)
    }

    /// Facts from the text of /proc/cpuinfo and the rest given.
    public init(cpuinfo: String, cores: Int, memoryGiB: Double, system: String?) {
        var model: String?
        var flags = Set<String>()
        var listsFlags = false
        for line in cpuinfo.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2 else { continue }
            switch parts[0] {
            case "model name", "Model", "cpu model": if model == nil { model = parts[1] }
            case "flags", "Features":
                listsFlags = true
                flags.formUnion(parts[1].split(separator: " ").map(String.init))
            default: break
            }
        }
        self.cores = cores
        cpuModel = model ?? "unknown"
        cpuFeatures = listsFlags ? Self.interestingFeatures.filter(flags.contains) : ["unknown"]
        self.memoryGiB = memoryGiB
        self.system = system
    }
}

/// One `bench --json` output (or PeerComparison's), with the name it is shown under.
public struct BenchRun: Sendable, Codable {
    /// The name shown (the file's name).
    public var name: String = ""
    /// Medians.
    public var figures: [String: Double]
    /// Minimums over the repeats.
    public var minimum: [String: Double]?
    /// Maximums over the repeats.
    public var maximum: [String: Double]?
    /// How many repeats.
    public var repeats: Int?
    /// Whether it was a quick run.
    public var quick: Bool?
    /// The machine it ran on, when recorded.
    public var machine: MachineFacts?

    /// A run read from JSON.
    public static func decode(_ data: Data, name: String) throws -> BenchRun {
        var run = try JSONDecoder().decode(BenchRun.self, from: data)
        run.name = name
        return run
    }

    /// A run made here.
    public init(
        name: String, figures: [String: Double], minimum: [String: Double]? = nil, maximum: [String: Double]? = nil,
        repeats: Int? = nil, quick: Bool? = nil, machine: MachineFacts? = nil
    ) {
        self.name = name
        self.figures = figures
        self.minimum = minimum
        self.maximum = maximum
        self.repeats = repeats
        self.quick = quick
        self.machine = machine
    }

    private enum CodingKeys: String, CodingKey { case figures, minimum, maximum, repeats, quick, machine }
}

/// `bench --html`: runs side by side, each figure next to the baselines the JSON has for it.
public struct BenchReport: Sendable {
    /// The runs, in the order given.
    public var runs: [BenchRun]
    /// When the page was made.
    public var generatedAt: Date

    /// A report of `runs`.
    public init(runs: [BenchRun], generatedAt: Date = Date()) {
        self.runs = runs
        self.generatedAt = generatedAt
    }

    /// One bar of a panel: a figure of one run.
    struct Bar {
        var run: String
        var series: String
        var style: String
        var value: Double
        var low: Double
        var high: Double
    }

    /// A panel: one measured thing, its figure and its baselines in every run.
    struct Panel {
        var title: String
        var unit: String
        var bars: [Bar]
        /// Whether the bars are a latency triple (series `p50`, `p99`, `max`), drawn as histograms.
        var isLatency = false
    }

    /// Groups the figures: `X.perSecond` with `X.rawPerSecond` (raw LMDB),
    /// `X.rawSameWritesPerSecond` and `X.perSecond.oneCore` (the same work on one core); `peer.X.shareLedgerPerSecond` with `peer.X.sqlitePerSecond`;
    /// latency triples (p50, p99, max) together (drawn as histograms); every other throughput alone.
    func panels() -> [Panel] {
        var names = Set<String>()
        for run in runs { names.formUnion(run.figures.keys) }
        var panels: [String: Panel] = [:]
        var order: [String] = []
        func add(_ key: String, title: String, unit: String, series: String, style: String, figure: String) {
            if panels[key] == nil {
                panels[key] = Panel(title: title, unit: unit, bars: [])
                order.append(key)
            }
            for run in runs {
                guard let value = run.figures[figure] else { continue }
                panels[key]!.bars.append(
                    Bar(
                        run: run.name, series: series, style: style, value: value, low: run.minimum?[figure] ?? value,
                        high: run.maximum?[figure] ?? value))
            }
        }
        for name in names.sorted() {
            if name.hasPrefix("peer."), name.hasSuffix(".shareLedgerPerSecond") {
                let subject = String(name.dropLast(".shareLedgerPerSecond".count))
                add(subject, title: subject, unit: "per second", series: "ShareLedger", style: "ledger", figure: name)
                add(subject, title: subject, unit: "per second", series: "SQLite peer", style: "sqlite", figure: subject + ".sqlitePerSecond")
            } else if name.hasSuffix(".perSecond") && !name.hasPrefix("peer.") {
                let subject = String(name.dropLast(".perSecond".count))
                add(subject, title: subject, unit: "per second", series: "ledger", style: "ledger", figure: name)
                add(subject, title: subject, unit: "per second", series: "raw LMDB", style: "raw", figure: subject + ".rawPerSecond")
                add(subject, title: subject, unit: "per second", series: "raw LMDB, same writes", style: "raw2", figure: subject + ".rawSameWritesPerSecond")
                add(subject, title: subject, unit: "per second", series: "in-process", style: "raw", figure: subject + ".inProcessPerSecond")
                add(subject, title: subject, unit: "per second", series: "one core", style: "raw", figure: name + ".oneCore")
            } else if let range = name.range(of: #"(p50|P50)(Micros|Millis)$"#, options: .regularExpression) {
                let stem = String(name[..<range.lowerBound])
                let unit = name.hasSuffix("Micros") ? "Micros" : "Millis"
                let key = stem + "latency" + unit
                for percentile in ["p50", "p99", "max"] {
                    let upper = percentile.prefix(1).uppercased() + percentile.dropFirst()
                    let figure = names.contains(stem + percentile + unit) ? stem + percentile + unit : stem + upper + unit
                    add(
                        key, title: (stem.hasSuffix(".") ? String(stem.dropLast()) : stem) + " latency", unit: unit == "Micros" ? "µs" : "ms",
                        series: percentile, style: percentile, figure: figure)
                }
                panels[key]?.isLatency = true
            }
        }
        return order.compactMap { panels[$0] }.filter { !$0.bars.isEmpty }
    }

    /// Throughput of share actions against the number of callers, over every run (`append.single`
    /// is 1 caller, `append.concurrentN` is N).
    func callerCurve() -> [(callers: Int, value: Double, run: String)] {
        var points: [(callers: Int, value: Double, run: String)] = []
        for run in runs {
            for (name, value) in run.figures {
                if name == "append.single.perSecond" { points.append((1, value, run.name)) }
                if name.hasPrefix("append.concurrent"), name.hasSuffix(".perSecond"),
                    let callers = Int(name.dropFirst("append.concurrent".count).dropLast(".perSecond".count))
                {
                    points.append((callers, value, run.name))
                }
            }
        }
        return points.sorted { ($0.callers, $0.run) < ($1.callers, $1.run) }
    }

    /// The page.
    public func html() -> String {
        var body = "<header>\n<h1>Benchmark report</h1>\n<p class=\"meta\">\(runs.count) run\(runs.count == 1 ? "" : "s") side by side; "
        body += "bars are medians, whiskers the minimum and maximum over the repeats. Made \(ReportFormat.time(generatedAt)).</p>\n</header>\n"
        body += "<h2>Runs and machines</h2>\n<table class=\"machines\"><thead><tr><th>run</th><th class=\"num\">repeats</th><th>quick</th>"
        body += "<th class=\"num\">cores</th><th>CPU</th><th>CPU features</th><th class=\"num\">memory</th><th>system</th></tr></thead><tbody>\n"
        for run in runs {
            body += "<tr><td>\(HTML.escape(run.name))</td><td class=\"num\">\(run.repeats.map(String.init) ?? "—")</td>"
            body += "<td>\(run.quick.map { $0 ? "yes" : "no" } ?? "—")</td>"
            if let machine = run.machine {
                body += "<td class=\"num\">\(machine.cores)</td><td>\(HTML.escape(machine.cpuModel ?? "—"))</td>"
                body += "<td>\(HTML.escape(machine.cpuFeatures.isEmpty ? "none of \(MachineFacts.interestingFeatures.joined(separator: ", "))" : machine.cpuFeatures.joined(separator: ", ")))</td>"
                body += "<td class=\"num\">\(String(format: "%.1f GiB", machine.memoryGiB))</td><td>\(HTML.escape(machine.system ?? "—"))</td>"
            } else {
                body += "<td colspan=\"5\" class=\"note\">not recorded in this JSON</td>"
            }
            body += "</tr>\n"
        }
        body += "</tbody></table>\n"
        let curve = callerCurve()
        if Set(curve.map { $0.callers }).count >= 2 { body += curveSVG(curve) }
        body += "<h2>Figures</h2>\n<p class=\"legend\"><span><i class=\"swatch\" style=\"background:#2e7d32\"></i>ShareLedger</span>"
        body += "<span><i class=\"swatch\" style=\"background:#90a4ae\"></i>raw LMDB baseline (or in-process)</span>"
        body += "<span><i class=\"swatch\" style=\"background:#cfd8dc\"></i>raw LMDB, the same writes</span>"
        body += "<span><i class=\"swatch\" style=\"background:#1e88e5\"></i>SQLite peer</span>"
        body += "<span><i class=\"swatch\" style=\"background:#81c784\"></i>p50</span><span><i class=\"swatch\" style=\"background:#ffb300\"></i>p99</span>"
        body += "<span><i class=\"swatch\" style=\"background:#e53935\"></i>max</span></p>\n"
        for (index, panel) in panels().enumerated() {
            body += (panel.isLatency ? histogramSVG(panel, index: index) : nil) ?? panelSVG(panel, index: index)
        }
        body += "<h2>Every figure</h2>\n<table class=\"figures\"><thead><tr><th>figure</th>"
        for run in runs { body += "<th class=\"num\">\(HTML.escape(run.name))</th>" }
        body += "</tr></thead><tbody>\n"
        var names = Set<String>()
        for run in runs { names.formUnion(run.figures.keys) }
        for name in names.sorted() {
            body += "<tr><td>\(HTML.escape(name))</td>"
            for run in runs {
                if let value = run.figures[name] {
                    body += "<td class=\"num\">\(Self.format(value))"
                    if let low = run.minimum?[name], let high = run.maximum?[name], low != high {
                        body += " <span class=\"note\">(\(Self.format(low))–\(Self.format(high)))</span>"
                    }
                    body += "</td>"
                } else {
                    body += "<td class=\"num note\">—</td>"
                }
            }
            body += "</tr>\n"
        }
        body += "</tbody></table>\n"
        return HTML.page(title: "Benchmark report", body: body)
    }

    static func format(_ value: Double) -> String {
        let formatter = NumberFormatter()
        formatter.numberStyle = .decimal
        formatter.maximumFractionDigits = abs(value) < 100 ? 2 : 0
        formatter.locale = Locale(identifier: "en_US")
        return formatter.string(from: NSNumber(value: value)) ?? String(value)
    }

    static let barStyle = """
        .bar.ledger { fill: #2e7d32; } .bar.raw { fill: #90a4ae; } .bar.raw2 { fill: #cfd8dc; } .bar.sqlite { fill: #1e88e5; }
        .bar.p50 { fill: #81c784; } .bar.p99 { fill: #ffb300; } .bar.max { fill: #e53935; }
        .whisker { stroke: #212121; stroke-width: 1.2; }
        .panel-title { font-size: 13px; font-weight: bold; } .value { font-size: 10px; fill: #333; } .series { font-size: 10.5px; fill: #333; }
        .axis-line { stroke: #bbb; } .curve { fill: none; stroke: #2e7d32; stroke-width: 2; } .point { fill: #2e7d32; }
        .tick { font-size: 10px; fill: #444; }
        .bin.p50 { fill: #81c784; fill-opacity: 0.55; stroke: #43a047; stroke-dasharray: 3 2; } .bin.p99 { fill: #ffb300; } .bin.max { fill: #e53935; }
        .marker { stroke: #212121; stroke-width: 1; }
        """

    func panelSVG(_ panel: Panel, index: Int) -> String {
        let rowHeight = 18.0
        let labelWidth = 300.0
        let plotWidth = 560.0
        let height = 30 + Double(panel.bars.count) * rowHeight + 8
        let top = max(panel.bars.map { max($0.value, $0.high) }.max() ?? 1, 1e-9)
        var out = "<svg class=\"panel\" id=\"panel-\(index)\" xmlns=\"http://www.w3.org/2000/svg\" width=\"980\" height=\"\(HTML.n(height))\" viewBox=\"0 0 980 \(HTML.n(height))\">"
        out += "<style>\(Self.barStyle)</style>\n"
        out += "<text class=\"panel-title\" x=\"4\" y=\"18\">\(HTML.escape(panel.title)) <tspan class=\"value\">(\(HTML.escape(panel.unit)))</tspan></text>\n"
        for (i, bar) in panel.bars.enumerated() {
            let y = 28 + Double(i) * rowHeight
            let width = bar.value / top * plotWidth
            let label = runs.count > 1 ? "\(bar.run): \(bar.series)" : bar.series
            out += "<text class=\"series\" x=\"\(HTML.n(labelWidth - 6))\" y=\"\(HTML.n(y + 11))\" text-anchor=\"end\">\(HTML.escape(LaneChart.truncate(label, to: 48)))</text>"
            out += "<rect class=\"bar \(bar.style)\" x=\"\(HTML.n(labelWidth))\" y=\"\(HTML.n(y + 2))\" width=\"\(HTML.n(max(width, 1)))\" height=\"12\">"
            out += "<title>\(HTML.escape(label)): \(Self.format(bar.value)) (\(Self.format(bar.low))–\(Self.format(bar.high)))</title></rect>"
            if bar.low != bar.high {
                let x0 = labelWidth + bar.low / top * plotWidth
                let x1 = labelWidth + bar.high / top * plotWidth
                out += "<path class=\"whisker\" d=\"M\(HTML.n(x0)) \(HTML.n(y + 8))H\(HTML.n(x1))M\(HTML.n(x0)) \(HTML.n(y + 4))v8M\(HTML.n(x1)) \(HTML.n(y + 4))v8\"/>"
            }
            let end = labelWidth + max(width, bar.high / top * plotWidth) + 6
            out += "<text class=\"value\" x=\"\(HTML.n(end))\" y=\"\(HTML.n(y + 11))\">\(Self.format(bar.value))</text>\n"
        }
        return out + "</svg>\n"
    }

    /// The latency distribution of each run as a histogram over a logarithmic latency axis, from its
    /// recorded quantiles: 50% of the requests at or below p50, 49% between p50 and p99, 1% between
    /// p99 and the maximum. Each bin's area is its share of the requests (height: share per decade);
    /// the first bin starts at the axis' left end, since the fastest request is not recorded (drawn
    /// open, dashed). Nil when a run lacks one of the three or they are not in order.
    func histogramSVG(_ panel: Panel, index: Int) -> String? {
        var quantiles: [(run: String, p50: Double, p99: Double, max: Double)] = []
        for run in runs {
            let bars = panel.bars.filter { $0.run == run.name }
            guard !bars.isEmpty else { continue }
            guard let p50 = bars.first(where: { $0.series == "p50" })?.value, let p99 = bars.first(where: { $0.series == "p99" })?.value,
                let max = bars.first(where: { $0.series == "max" })?.value, p50 > 0, p50 <= p99, p99 <= max
            else { return nil }
            quantiles.append((run.name, p50, p99, max))
        }
        guard !quantiles.isEmpty else { return nil }
        let low = log10(quantiles.map(\.p50).min()! / 4)
        let high = Swift.max(log10(quantiles.map(\.max).max()! * 1.25), low + 1)
        let (labelWidth, plotLeft, plotRight) = (300.0, 300.0, 940.0)
        func x(_ value: Double) -> Double { plotLeft + (log10(value) - low) / (high - low) * (plotRight - plotLeft) }
        let shares = [("p50", 0.50), ("p99", 0.49), ("max", 0.01)]
        func bins(_ q: (run: String, p50: Double, p99: Double, max: Double)) -> [(style: String, from: Double, to: Double, share: Double)] {
            let edges = [pow(10, low), q.p50, q.p99, q.max]
            return shares.enumerated().map { i, share in (share.0, edges[i], edges[i + 1], share.1) }
        }
        // Share per decade; a bin narrower than a hundredth of a decade counts as that wide.
        func density(_ bin: (style: String, from: Double, to: Double, share: Double)) -> Double {
            bin.share / Swift.max(log10(bin.to) - log10(bin.from), 0.01)
        }
        let tallest = quantiles.flatMap { bins($0).map(density) }.max() ?? 1
        let (plotHeight, rowHeight) = (56.0, 104.0)
        let height = 30 + Double(quantiles.count) * rowHeight + 22
        var out = "<svg class=\"panel histogram\" id=\"panel-\(index)\" xmlns=\"http://www.w3.org/2000/svg\" width=\"980\" height=\"\(HTML.n(height))\" viewBox=\"0 0 980 \(HTML.n(height))\">"
        out += "<style>\(Self.barStyle)</style>\n"
        out += "<text class=\"panel-title\" x=\"4\" y=\"18\">\(HTML.escape(panel.title)) <tspan class=\"value\">(\(HTML.escape(panel.unit)), logarithmic; "
        out += "each bin's area is its share of the requests)</tspan></text>\n"
        for (row, q) in quantiles.enumerated() {
            let base = 30 + Double(row) * rowHeight + plotHeight
            out += "<text class=\"series\" x=\"\(HTML.n(labelWidth - 6))\" y=\"\(HTML.n(base - 4))\" text-anchor=\"end\">\(HTML.escape(LaneChart.truncate(q.run, to: 48)))</text>"
            out += "<path class=\"axis-line\" d=\"M\(HTML.n(plotLeft)) \(HTML.n(base))H\(HTML.n(plotRight))\"/>\n"
            for bin in bins(q) {
                let barHeight = Swift.max(density(bin) / tallest * plotHeight, 1)
                let (x0, x1) = (x(bin.from), x(bin.to))
                out += "<rect class=\"bin \(bin.style)\" x=\"\(HTML.n(x0))\" y=\"\(HTML.n(base - barHeight))\" width=\"\(HTML.n(Swift.max(x1 - x0, 1)))\" height=\"\(HTML.n(barHeight))\">"
                out += "<title>\(Int(bin.share * 100))% of requests: \(bin.style == "p50" ? "at or below" : "up to") \(Self.format(bin.to)) \(HTML.escape(panel.unit))</title></rect>\n"
            }
            // The quantiles as markers, their labels on three lines below the axis so that close ones do not overlap.
            for (line, (name, value)) in [("p50", q.p50), ("p99", q.p99), ("max", q.max)].enumerated() {
                out += "<path class=\"marker\" d=\"M\(HTML.n(x(value))) \(HTML.n(base - plotHeight))V\(HTML.n(base + 4 + Double(line) * 12))\"/>"
                out += "<text class=\"value\" x=\"\(HTML.n(x(value) + 3))\" y=\"\(HTML.n(base + 12 + Double(line) * 12))\">\(name) \(Self.format(value))</text>\n"
            }
        }
        let axis = 30 + Double(quantiles.count) * rowHeight + 10
        var decade = ceil(low)
        while decade <= high {
            out += "<text class=\"tick\" x=\"\(HTML.n(x(pow(10, decade))))\" y=\"\(HTML.n(axis))\" text-anchor=\"middle\">\(Self.format(pow(10, decade)))</text>"
            decade += 1
        }
        return out + "</svg>\n"
    }

    func curveSVG(_ points: [(callers: Int, value: Double, run: String)]) -> String {
        let width = 700.0
        let height = 260.0
        let (left, right, top, bottom) = (70.0, 680.0, 20.0, 220.0)
        let callers = Array(Set(points.map { $0.callers })).sorted()
        let maxValue = max(points.map { $0.value }.max() ?? 1, 1e-9)
        let logMin = log2(Double(callers.first ?? 1))
        let logMax = max(log2(Double(callers.last ?? 2)), logMin + 1)
        func x(_ c: Int) -> Double { left + (log2(Double(c)) - logMin) / (logMax - logMin) * (right - left) }
        func y(_ v: Double) -> Double { bottom - v / maxValue * (bottom - top) }
        var out = "<h2>Share actions per second against callers</h2>\n"
        out += "<svg class=\"curve-chart\" id=\"callers\" xmlns=\"http://www.w3.org/2000/svg\" width=\"\(HTML.n(width))\" height=\"\(HTML.n(height))\" viewBox=\"0 0 \(HTML.n(width)) \(HTML.n(height))\"><style>\(Self.barStyle)</style>\n"
        out += "<path class=\"axis-line\" d=\"M\(HTML.n(left)) \(HTML.n(top))V\(HTML.n(bottom))H\(HTML.n(right))\"/>\n"
        for c in callers {
            out += "<text class=\"tick\" x=\"\(HTML.n(x(c)))\" y=\"\(HTML.n(bottom + 16))\" text-anchor=\"middle\">\(c)</text>"
        }
        out += "<text class=\"tick\" x=\"\(HTML.n((left + right) / 2))\" y=\"\(HTML.n(bottom + 34))\" text-anchor=\"middle\">callers</text>"
        for fraction in [0.0, 0.5, 1.0] {
            out += "<text class=\"tick\" x=\"\(HTML.n(left - 6))\" y=\"\(HTML.n(y(maxValue * fraction) + 4))\" text-anchor=\"end\">\(Self.format(maxValue * fraction))</text>"
        }
        // One point per number of callers: the median over the runs that measured it.
        let byCallers = Dictionary(grouping: points, by: { $0.callers })
        var path = ""
        for c in callers {
            let values = byCallers[c]!.map { $0.value }.sorted()
            let value = values[values.count / 2]
            path += (path.isEmpty ? "M" : "L") + "\(HTML.n(x(c))) \(HTML.n(y(value)))"
            out += "<circle class=\"point\" cx=\"\(HTML.n(x(c)))\" cy=\"\(HTML.n(y(value)))\" r=\"3.5\"><title>\(c) callers: \(Self.format(value)) per second</title></circle>"
        }
        out += "<path class=\"curve\" d=\"\(path)\"/>\n</svg>\n"
        return out
    }
}
