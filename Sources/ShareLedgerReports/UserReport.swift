import Foundation
import ShareLedger
import ShareLedgerAudit

/// What `report user` draws: every share a person stood in (owned, invited to, requested or was
/// blocked from), one lane per share, over time.
public struct UserReport: Sendable {
    /// The person's user record name.
    public var user: String
    /// The container.
    public var container: String
    /// Each share's full timeline with the index of the person's lane in it, in the order the person
    /// first appears in them.
    public var shares: [(timeline: ShareTimeline, lane: Int)]
    /// The positions drawn (the person's events and their shares' creations and deletions), with times.
    public var axis: [ReportEvent]
    /// The last position included.
    public var asOf: UInt64
    /// The header's verification.
    public var chain: ChainStatus
    /// When the report was made.
    public var generatedAt: Date

    /// Reads the person's history, then the history of every share it names.
    public static func make(
        ledger: ShareLedger, user: String, container: String, options: ShareReport.Options = ShareReport.Options()
    ) throws(LedgerError) -> UserReport {
        let asOf = try LedgerAudit(ledger).position(atOrBefore: options.asOf ?? .position(LogPosition(UInt64.max)))
        let own = try LedgerAudit(ledger).history(of: .user(user, container: container), until: .position(asOf), limit: .max)
        var tokens: [String] = []
        var seen = Set<String>()
        for entry in own {
            let event = ReportEvent(entry)
            if let token = event.token, ShareToken(token) != nil, seen.insert(token).inserted { tokens.append(token) }
        }
        var shares: [(timeline: ShareTimeline, lane: Int)] = []
        for token in tokens {
            guard let shareToken = ShareToken(token), let url = ShareURL.make(host: "share.invalid", token: shareToken) else { continue }
            let events = try LedgerAudit(ledger).history(of: .share(url), until: .position(asOf), limit: .max).map(ReportEvent.init)
            let timeline = ShareTimeline(url: "share \(token)", token: token, events: events, asOf: asOf.rawValue)
            guard let lane = timeline.lanes.firstIndex(where: { $0.userRecordName == user || $0.requestUser == user }) else { continue }
            shares.append((timeline, lane))
        }
        var axis: [UInt64: ReportEvent] = [:]
        for (timeline, lane) in shares {
            for mark in timeline.lanes[lane].marks + timeline.shareMarks.filter({ $0.kind == .created || $0.kind == .deleted }) {
                axis[mark.position] = timeline.events[mark.eventIndex]
            }
        }
        let sorted = axis.values.sorted { $0.position < $1.position }
        let window = ShareReport.window(sorted, from: options.from, to: options.to)
        return UserReport(
            user: user, container: container, shares: shares, axis: Array(sorted[window]), asOf: asOf.rawValue,
            chain: try ChainStatus.check(ledger, trustedKeys: options.trustedKeys), generatedAt: options.now)
    }

    /// The report as one self-contained HTML page.
    public func html(maxLanes: Int = ShareReport.defaultMaxLanes) -> String {
        let positions = axis.map(\.position)
        func index(_ position: UInt64) -> Int {
            // The first axis entry at or after the position (binary search).
            var low = 0
            var high = positions.count
            while low < high {
                let middle = (low + high) / 2
                if positions[middle] < position { low = middle + 1 } else { high = middle }
            }
            return low
        }
        var rows: [LaneChart.Row] = []
        for (timeline, laneIndex) in shares {
            let lane = timeline.lanes[laneIndex]
            var row = LaneChart.Row(
                label: "share \(timeline.token)", sublabel: "owner \(timeline.owner) · \(lane.kind == .owner ? "owner" : lane.route.rawValue)",
                title: "share \(timeline.token) in \(timeline.container), owned by \(timeline.owner)", bars: [], marks: [])
            func span<S>(_ changes: [(position: UInt64, eventIndex: Int, standing: S)], _ i: Int) -> (Int, Int) {
                let from = changes[i].position < (positions.first ?? 0) ? -1 : index(changes[i].position)
                let to = i + 1 < changes.count ? index(changes[i + 1].position) : positions.count
                return (from, to)
            }
            for (i, change) in lane.standings.enumerated() {
                guard let standing = change.standing, standing.status != .removed else { continue }
                let (from, to) = span(lane.standings, i)
                guard to > from, to >= 0 else { continue }
                let permission = standing.permission == .readOnly || standing.permission == .readWrite ? "\(standing.permission)" : "other"
                var style = standing.role == .owner ? "owner" : "\(standing.status == .accepted ? "accepted" : "pending")-\(permission)"
                if standing.role == .administrator { style += " admin" }
                row.bars.append(
                    LaneChart.Bar(from: from, to: to, style: style, title: "\(standing.status), \(standing.role), \(standing.permission) from position \(change.position)"))
            }
            for (i, change) in lane.requests.enumerated() where change.standing != .none {
                let (from, to) = span(lane.requests, i)
                guard to > from, to >= 0 else { continue }
                row.bars.append(
                    LaneChart.Bar(from: from, to: to, style: change.standing.rawValue, title: "\(change.standing) from position \(change.position)", requestTrack: true))
            }
            let shown = Set(positions)
            for mark in lane.marks + timeline.shareMarks.filter({ $0.kind == .created || $0.kind == .deleted }) where shown.contains(mark.position) {
                let event = timeline.events[mark.eventIndex]
                row.marks.append(
                    LaneChart.Mark(
                        at: index(mark.position), style: mark.kind == .publicPermission ? "public" : mark.kind.rawValue,
                        title: "position \(event.position) · \(ReportFormat.time(event.recordedAt)) · \(event.name) by \(event.actor): \(mark.text)",
                        anchor: "e\(event.position)", label: "\(event.position) · \(ReportFormat.shortTime(event.recordedAt).suffix(8))"))
            }
            rows.append(row)
        }
        let chart = LaneChart(axis: axis.map { (position: $0.position, time: $0.recordedAt) }, rows: rows, maxRows: maxLanes, collapsedNoun: "shares")
        var body = "<header>\n<h1>Access of \(HTML.escape(user)) in \(HTML.escape(container))</h1>\n<dl class=\"meta\">\n"
        body += "<dt>user</dt><dd>\(HTML.escape(user))</dd>\n<dt>container</dt><dd>\(HTML.escape(container))</dd>\n"
        body += "<dt>as of</dt><dd>position \(asOf)</dd>\n<dt>shares</dt><dd>\(shares.count)</dd>\n"
        body += "<dt>made</dt><dd>\(ReportFormat.time(generatedAt))</dd>\n</dl>\n"
        body += "<p class=\"chain \(chain.holds ? "ok" : "bad")\" id=\"chain\">\(HTML.escape(chain.summary))</p>\n</header>\n"
        body += ShareReport.legend
        body += chart.svg(id: "timeline")
        body += "<h2>Events</h2>\n<table class=\"events\"><thead><tr><th class=\"num\">position</th><th>recorded</th><th>event</th><th>actor</th><th>share</th><th>hash</th></tr></thead><tbody>\n"
        for event in axis {
            body += "<tr id=\"e\(event.position)\"><td class=\"num\">\(event.position)</td><td>\(ReportFormat.time(event.recordedAt))</td>"
            body += "<td>\(HTML.escape(event.name))</td><td>\(HTML.escape(event.actor))</td><td>\(HTML.escape(event.token ?? ""))</td>"
            body += "<td class=\"hash\">\(event.hash)</td></tr>\n"
        }
        body += "</tbody></table>\n"
        return HTML.page(title: "\(user): access over time", body: body)
    }
}
