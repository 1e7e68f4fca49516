import Foundation
import ShareLedger

extension ShareReport {
    /// Lanes drawn one by one before the rest collapse into one.
    public static let defaultMaxLanes = 60

    /// The report as one self-contained HTML page (inline SVG and CSS, no script).
    public func html(maxLanes: Int = ShareReport.defaultMaxLanes) -> String {
        let timeline = self.timeline
        let shown = timeline.window
        let axis = timeline.events[shown].map { (position: $0.position, time: $0.recordedAt) }
        let chart = LaneChart(axis: axis, rows: rows(), maxRows: maxLanes, collapsedNoun: "people")
        var body = "<header>\n<h1>Access timeline of share \(HTML.escape(timeline.token))</h1>\n<dl class=\"meta\">\n"
        func item(_ term: String, _ value: String) { body += "<dt>\(HTML.escape(term))</dt><dd>\(HTML.escape(value))</dd>\n" }
        item("share URL", timeline.url)
        item("container", timeline.container)
        item("owner", timeline.owner)
        if let last = timeline.events.last {
            item("as of", "position \(timeline.asOf) (last event of the share: \(last.position), \(ReportFormat.time(last.recordedAt)))")
        }
        if let first = timeline.events[shown].first, let last = timeline.events[shown].last {
            item(
                "drawn", "positions \(first.position)–\(last.position) (\(ReportFormat.time(first.recordedAt)) to \(ReportFormat.time(last.recordedAt))), \(shown.count) of \(timeline.events.count) events")
        } else {
            item("drawn", "no event of the share falls in the window")
        }
        item("people", "\(timeline.lanes.count) lanes" + (showsContact ? "; emails and phones shown as asked" : ""))
        item("made", ReportFormat.time(generatedAt))
        body += "</dl>\n<p class=\"chain \(chain.holds ? "ok" : "bad")\" id=\"chain\">\(HTML.escape(chain.summary))</p>\n</header>\n"
        body += Self.legend
        body += chart.svg(id: "timeline")
        body += peopleTable()
        body += eventTable()
        return HTML.page(title: "Share \(timeline.token): access timeline", body: body)
    }

    /// The chart's rows: the share itself, then one per lane.
    func rows() -> [LaneChart.Row] {
        let timeline = self.timeline
        let shown = timeline.window
        func at(_ eventIndex: Int) -> Int { eventIndex - shown.lowerBound }
        func mark(_ mark: TimelineMark, style: String) -> LaneChart.Mark? {
            guard shown.contains(mark.eventIndex) else { return nil }
            let event = timeline.events[mark.eventIndex]
            return LaneChart.Mark(
                at: at(mark.eventIndex), style: style,
                title: "position \(event.position) · \(ReportFormat.time(event.recordedAt)) · \(event.name) by \(event.actor): \(mark.text)",
                anchor: "e\(event.position)", label: "\(event.position) · \(ReportFormat.shortTime(event.recordedAt).suffix(8))")
        }
        // The end of each span: the next change's event, or past the end.
        func span<S>(_ changes: [(position: UInt64, eventIndex: Int, standing: S)], _ i: Int) -> (Int, Int) {
            let from = changes[i].eventIndex < shown.lowerBound ? -1 : at(changes[i].eventIndex)
            let to = i + 1 < changes.count ? at(changes[i + 1].eventIndex) : Int.max / 2
            return (from, min(to, shown.count))
        }
        var shareRow = LaneChart.Row(label: "share", sublabel: "public permission", title: "the share itself", bars: [], marks: [], style: "lane share")
        let states = timeline.shareStates
        let changes = states.map { (position: $0.position, eventIndex: $0.eventIndex, standing: $0.existed) }
        for (i, state) in states.enumerated() where state.existed {
            let (from, to) = span(changes, i)
            guard to > max(from, -1) || (from == -1 && to >= 0) else { continue }
            shareRow.bars.append(
                LaneChart.Bar(from: from, to: to, style: "public-\(state.publicPermission)", title: "public permission \(state.publicPermission)" + (state.allowsRequests ? "; access requests allowed" : "")))
        }
        shareRow.marks = timeline.shareMarks.compactMap { mark($0, style: $0.kind == .publicPermission ? "public" : $0.kind.rawValue.replacingOccurrences(of: " ", with: "-")) }
        var rows = [shareRow]
        for lane in timeline.lanes {
            var row = LaneChart.Row(
                label: lane.label,
                sublabel: [lane.kind == .owner ? "owner" : lane.route == .none ? "requests only" : lane.route.rawValue, lane.contact]
                    .compactMap { $0 }.joined(separator: " · "),
                title: "\(lane.label): \(lane.kind == .owner ? "owner" : lane.route.rawValue); participant \(lane.id)",
                bars: [], marks: [])
            for (i, change) in lane.standings.enumerated() {
                guard let standing = change.standing, standing.status != .removed else { continue }
                let (from, to) = span(lane.standings, i)
                guard to > from || (from == -1 && to > -1) else { continue }
                var style: String
                if standing.role == .owner {
                    style = "owner"
                } else {
                    let permission = standing.permission == .readOnly || standing.permission == .readWrite ? "\(standing.permission)" : "other"
                    style = "\(standing.status == .accepted ? "accepted" : "pending")-\(permission)"
                }
                if standing.role == .administrator { style += " admin" }
                row.bars.append(
                    LaneChart.Bar(
                        from: from, to: to, style: style,
                        title: "\(standing.status), \(standing.role), \(standing.permission) from position \(change.position)"))
            }
            for (i, change) in lane.requests.enumerated() where change.standing != .none {
                let (from, to) = span(lane.requests, i)
                guard to > from || (from == -1 && to > -1) else { continue }
                row.bars.append(
                    LaneChart.Bar(
                        from: from, to: to, style: change.standing.rawValue,
                        title: "\(change.standing) from position \(change.position)", requestTrack: true))
            }
            row.marks = lane.marks.compactMap { mark($0, style: $0.kind.rawValue) }
            rows.append(row)
        }
        return rows
    }

    static let legend = """
        <p class="legend">
        <span><i class="swatch" style="background:#6a1b9a"></i>owner</span>
        <span><i class="swatch" style="background:#2e7d32"></i>accepted, read-write</span>
        <span><i class="swatch" style="background:#1e88e5"></i>accepted, read-only</span>
        <span><i class="swatch" style="background:#c8e6c9;border:1px dashed #81c784"></i>pending, read-write</span>
        <span><i class="swatch" style="background:#bbdefb;border:1px dashed #64b5f6"></i>pending, read-only</span>
        <span><i class="swatch" style="background:#fff;border:2px solid #111"></i>administrator (outline)</span>
        <span><i class="swatch" style="background:#ffb300"></i>access requested</span>
        <span><i class="swatch" style="background:#c62828"></i>blocked</span>
        <span>◆ role or public-permission change · ● other event · ▬ several events (hover for the list; click for the event)</span>
        </p>

        """

    func peopleTable() -> String {
        var out = "<h2>People</h2>\n<table class=\"people\"><thead><tr><th>person</th>"
        if showsContact { out += "<th>email or phone</th>" }
        out += "<th>how</th><th class=\"num\">first position</th><th class=\"num\">last position</th><th>standing at the end</th></tr></thead><tbody>\n"
        for lane in timeline.lanes {
            let end = lane.standing(at: timeline.asOf)
            let request = lane.requestStanding(at: timeline.asOf)
            var standing = end.map { "\($0.status), \($0.role), \($0.permission)" } ?? "not a participant"
            if request != .none { standing += "; \(request)" }
            out += "<tr><td>\(HTML.escape(lane.label))</td>"
            if showsContact { out += "<td>\(HTML.escape(lane.contact ?? "—"))</td>" }
            out += "<td>\(HTML.escape(lane.kind == .owner ? "owner" : lane.route.rawValue))</td>"
            out += "<td class=\"num\">\(lane.marks.first.map { "<a href=\"#e\($0.position)\">\($0.position)</a>" } ?? "")</td>"
            out += "<td class=\"num\">\(lane.marks.last.map { "<a href=\"#e\($0.position)\">\($0.position)</a>" } ?? "")</td>"
            out += "<td>\(HTML.escape(standing))</td></tr>\n"
        }
        return out + "</tbody></table>\n"
    }

    func eventTable() -> String {
        var subjects: [String: String] = [:]
        for lane in timeline.lanes { subjects[lane.id] = lane.label }
        var out = "<h2>Events</h2>\n<table class=\"events\"><thead><tr><th class=\"num\">position</th><th>recorded</th><th>event</th><th>actor</th><th>about</th><th>hash</th></tr></thead><tbody>\n"
        out.reserveCapacity(timeline.window.count * 260)
        for event in timeline.shownEvents {
            let about: String
            switch event.change {
            case .added(let id, _, _, _, _, _), .updated(let id, _, _), .removed(let id, _), .verified(let id, _), .accepted(let id, _):
                about = subjects[id] ?? id
            case .requested(let user), .denied(let user), .blocked(let user), .unblocked(let user): about = user
            case .created(let owner, _, _): about = owner
            default: about = ""
            }
            out += "<tr id=\"e\(event.position)\"><td class=\"num\">\(event.position)</td><td>\(ReportFormat.time(event.recordedAt))</td>"
            out += "<td>\(HTML.escape(event.name))</td><td>\(HTML.escape(event.actor))</td><td>\(HTML.escape(about))</td>"
            out += "<td class=\"hash\">\(event.hash)</td></tr>\n"
        }
        return out + "</tbody></table>\n"
    }
}
