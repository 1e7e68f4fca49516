import Foundation

/// A picture of lanes over a common axis of log positions, as inline SVG: bars for spans of a
/// standing, marks for events (each a link to its row in the page's event table), a label column on
/// the left. Marks too close to tell apart are drawn as one cluster mark, and lanes beyond a limit
/// are drawn in one collapsed lane, so nothing overlaps however big the input.
struct LaneChart {
    /// A span of a standing, from one axis index to another (`-1`: before the axis starts;
    /// `axis.count`: beyond its end).
    struct Bar {
        var from: Int
        var to: Int
        /// The CSS class (its colour).
        var style: String
        var title: String
        /// The main track, or the thin request track under it.
        var requestTrack = false
    }

    /// One event on a lane.
    struct Mark {
        /// Its index on the axis.
        var at: Int
        var style: String
        var title: String
        /// Its event's anchor in the page (`e` and the position).
        var anchor: String
        /// The visible label (position and time), drawn when there is room.
        var label: String
    }

    struct Row {
        var label: String
        var sublabel: String?
        var title: String
        var bars: [Bar]
        var marks: [Mark]
        var style = "lane"
    }

    /// The positions and times along the x axis, oldest first.
    var axis: [(position: UInt64, time: Date)]
    var rows: [Row]
    /// Rows beyond this many are drawn as one collapsed row.
    var maxRows: Int
    /// What a collapsed row says it holds ("people", "shares").
    var collapsedNoun: String

    static let width = 1200.0
    static let labelWidth = 220.0
    static let left = 232.0
    static let right = 1180.0
    static let axisHeight = 44.0
    static let rowHeight = 26.0

    private var slot: Double { (Self.right - Self.left) / Double(max(axis.count, 1)) }

    func x(_ index: Int) -> Double {
        if index < 0 { return Self.left }
        if index >= axis.count { return Self.right }
        return Self.left + (Double(index) + 0.5) * slot
    }

    /// The rows as drawn: the first `maxRows - 1` as they are, the rest merged into one.
    var drawnRows: [Row] {
        guard rows.count > maxRows, maxRows >= 2 else { return rows }
        let kept = Array(rows.prefix(maxRows - 1))
        let rest = rows.dropFirst(maxRows - 1)
        let merged = Row(
            label: "+ \(rest.count) more \(collapsedNoun)", sublabel: "collapsed: see the table below",
            title: "\(rest.count) \(collapsedNoun) drawn in one lane; darker means more of them at once",
            bars: rest.flatMap { row in row.bars.map { var bar = $0; bar.style += " collapsed"; return bar } },
            marks: rest.flatMap(\.marks), style: "lane collapsed")
        return kept + [merged]
    }

    func svg(id: String) -> String {
        let drawn = drawnRows
        let height = Self.axisHeight + Double(drawn.count) * Self.rowHeight + 8
        var out = ""
        out.reserveCapacity(4096 + drawn.count * 2048)
        out += """
            <svg id="\(id)" class="lanes" xmlns="http://www.w3.org/2000/svg" width="\(HTML.n(Self.width))" height="\(HTML.n(height))" \
            viewBox="0 0 \(HTML.n(Self.width)) \(HTML.n(height))" role="img" aria-label="timeline">
            <style>\(Self.svgStyle)</style>

            """
        out += axisSVG(height: height)
        for (index, row) in drawn.enumerated() {
            out += rowSVG(row, index: index, top: Self.axisHeight + Double(index) * Self.rowHeight)
        }
        out += "</svg>\n"
        return out
    }

    private func axisSVG(height: Double) -> String {
        var out = "<g class=\"axis\">\n"
        out += "<rect class=\"label-column\" x=\"0\" y=\"0\" width=\"\(HTML.n(Self.labelWidth))\" height=\"\(HTML.n(height))\"/>\n"
        guard !axis.isEmpty else { return out + "</g>\n" }
        let ticks = min(axis.count, 7)
        var indexes: [Int] = []
        for t in 0..<ticks {
            let index = ticks == 1 ? 0 : Int((Double(t) / Double(ticks - 1) * Double(axis.count - 1)).rounded())
            if indexes.last != index { indexes.append(index) }
        }
        for (t, index) in indexes.enumerated() {
            let x = HTML.n(x(index))
            let anchor = t == 0 && indexes.count > 1 ? "start" : t == indexes.count - 1 && indexes.count > 1 ? "end" : "middle"
            out += "<line class=\"grid\" x1=\"\(x)\" y1=\"34\" x2=\"\(x)\" y2=\"\(HTML.n(height - 4))\"/>"
            out += "<text class=\"tick\" x=\"\(x)\" y=\"14\" text-anchor=\"\(anchor)\">position \(axis[index].position)</text>"
            out += "<text class=\"tick time\" x=\"\(x)\" y=\"28\" text-anchor=\"\(anchor)\">\(ReportFormat.shortTime(axis[index].time))</text>\n"
        }
        return out + "</g>\n"
    }

    private func rowSVG(_ row: Row, index: Int, top: Double) -> String {
        var out = "<g class=\"\(row.style)\" id=\"lane-\(index)\">\n"
        let label = Self.truncate(row.label, to: 32)
        out += "<text class=\"lane-label\" x=\"\(HTML.n(Self.labelWidth - 8))\" y=\"\(HTML.n(top + 14))\" text-anchor=\"end\">"
        out += "<title>\(HTML.escape(row.title))</title>\(HTML.escape(label))</text>\n"
        if let sublabel = row.sublabel {
            out += "<text class=\"lane-sublabel\" x=\"\(HTML.n(Self.labelWidth - 8))\" y=\"\(HTML.n(top + 23))\" text-anchor=\"end\">"
            out += "\(HTML.escape(Self.truncate(sublabel, to: 44)))</text>\n"
        }
        out += "<line class=\"lane-rule\" x1=\"\(HTML.n(Self.left))\" y1=\"\(HTML.n(top + Self.rowHeight - 0.5))\" x2=\"\(HTML.n(Self.right))\" y2=\"\(HTML.n(top + Self.rowHeight - 0.5))\"/>\n"
        for bar in row.bars {
            let x0 = x(bar.from)
            let x1 = x(bar.to)
            guard x1 > x0 || bar.from == bar.to else { continue }
            let width = max(x1 - x0, 1.5)
            let (y, h) = bar.requestTrack ? (top + 20, 4.0) : (top + 9, 10.0)
            out += "<rect class=\"bar \(bar.style)\" x=\"\(HTML.n(x0))\" y=\"\(HTML.n(y))\" width=\"\(HTML.n(width))\" height=\"\(HTML.n(h))\">"
            out += "<title>\(HTML.escape(bar.title))</title></rect>\n"
        }
        out += marksSVG(row.marks, top: top)
        return out + "</g>\n"
    }

    /// Marks closer than 4 px are one cluster; labels are drawn where the previous label ends.
    private func marksSVG(_ marks: [Mark], top: Double) -> String {
        var out = ""
        let sorted = marks.sorted { $0.at < $1.at }
        var clusters: [[Mark]] = []
        for mark in sorted {
            if let last = clusters.last?.first, x(mark.at) - x(last.at) < 4 {
                clusters[clusters.count - 1].append(mark)
            } else {
                clusters.append([mark])
            }
        }
        var labelEnd = -Double.infinity
        let y = top + 14
        for cluster in clusters {
            let first = cluster[0]
            let cx = x(first.at)
            if cluster.count == 1 {
                out += "<a href=\"#\(first.anchor)\" class=\"mark \(first.style)\"><title>\(HTML.escape(first.title))</title>"
                if first.style.contains("role") || first.style.contains("public") {
                    out += "<path d=\"M\(HTML.n(cx)) \(HTML.n(y - 5))l5 5l-5 5l-5 -5z\"/>"
                } else {
                    out += "<circle cx=\"\(HTML.n(cx))\" cy=\"\(HTML.n(y))\" r=\"3.5\"/>"
                }
                out += "</a>\n"
            } else {
                let last = cluster[cluster.count - 1]
                let listed = cluster.prefix(12).map(\.title).joined(separator: "\n")
                let more = cluster.count > 12 ? "\n… and \(cluster.count - 12) more (see the table)" : ""
                let x1 = x(last.at)
                out += "<a href=\"#\(first.anchor)\" class=\"mark cluster\"><title>\(cluster.count) events:\n\(HTML.escape(listed + more))</title>"
                out += "<rect x=\"\(HTML.n(cx - 3))\" y=\"\(HTML.n(y - 4))\" width=\"\(HTML.n(x1 - cx + 6))\" height=\"8\" rx=\"2\"/></a>\n"
            }
            let label = cluster.count == 1 ? first.label : "\(first.label) +\(cluster.count - 1)"
            let labelWidth = Double(label.count) * 5.2
            let labelX = cx - 2
            if labelX >= labelEnd + 6 && labelX + labelWidth <= Self.width - 2 {
                out += "<text class=\"mark-label\" x=\"\(HTML.n(labelX))\" y=\"\(HTML.n(top + 7))\">\(HTML.escape(label))</text>\n"
                labelEnd = labelX + labelWidth
            }
        }
        return out
    }

    static func truncate(_ text: String, to count: Int) -> String {
        text.count <= count ? text : String(text.prefix(count - 1)) + "…"
    }

    static let svgStyle = """
        .label-column { fill: #fafafa; }
        .grid { stroke: #ddd; stroke-width: 1; }
        .tick { font-size: 10px; fill: #444; }
        .tick.time { fill: #777; font-size: 9px; }
        .lane-label { font-size: 11.5px; fill: #1b1b1b; }
        .lane-sublabel { font-size: 8px; fill: #777; }
        .lane-rule { stroke: #eee; }
        .mark-label { font-size: 8px; fill: #555; }
        .bar.pending-readOnly { fill: #bbdefb; stroke: #64b5f6; stroke-dasharray: 3 2; }
        .bar.pending-readWrite { fill: #c8e6c9; stroke: #81c784; stroke-dasharray: 3 2; }
        .bar.pending-other { fill: #eeeeee; stroke: #bdbdbd; stroke-dasharray: 3 2; }
        .bar.accepted-readOnly { fill: #1e88e5; }
        .bar.accepted-readWrite { fill: #2e7d32; }
        .bar.accepted-other { fill: #757575; }
        .bar.owner { fill: #6a1b9a; }
        .bar.admin { stroke: #111; stroke-width: 2; stroke-dasharray: none; }
        .bar.requesting { fill: #ffb300; }
        .bar.blocked { fill: #c62828; }
        .bar.public-none { fill: #f5f5f5; }
        .bar.public-readOnly { fill: #90caf9; }
        .bar.public-readWrite { fill: #a5d6a7; }
        .bar.collapsed { opacity: 0.25; stroke: none; }
        .mark circle, .mark path, .mark rect { stroke: #fff; stroke-width: 1; }
        .mark { fill: #424242; }
        .mark.created { fill: #000; } .mark.deleted { fill: #000; }
        .mark.invited { fill: #78909c; } .mark.approved { fill: #00897b; } .mark.accepted { fill: #1b5e20; }
        .mark.verified { fill: #5e35b1; } .mark.permission { fill: #0d47a1; } .mark.role { fill: #6a1b9a; }
        .mark.removed, .mark.left, .mark.dropped { fill: #b71c1c; }
        .mark.requested { fill: #ff8f00; } .mark.denied { fill: #e65100; } .mark.blocked { fill: #c62828; }
        .mark.unblocked { fill: #ad1457; } .mark.public { fill: #4a148c; }
        .mark.cluster { fill: #616161; }
        .lane.share .lane-label { font-weight: bold; }
        .lane.collapsed .lane-label { font-style: italic; }
        """
}
