import Foundation
import ShareLedger
import ShareLedgerAudit

/// What `report access-review` lists: everyone who had access to anything in a container during a
/// window, with which permission and role, from which position to which, and how they got it.
public struct AccessReview: Sendable {
    /// One person's access to one share during the window.
    public struct Row: Sendable, Hashable {
        /// Their user record name.
        public var user: String
        /// The share's token.
        public var token: String
        /// The share's owner.
        public var owner: String
        /// The roles they held in the window, in order.
        public var roles: [Share.Participant.Role]
        /// The permissions they held in the window, in order.
        public var permissions: [Share.Participant.Permission]
        /// The first position in the window at which they had access.
        public var firstPosition: UInt64
        /// Its time.
        public var firstTime: Date
        /// The last position in the window at which they had access.
        public var lastPosition: UInt64
        /// Its time.
        public var lastTime: Date
        /// How they got in.
        public var route: AccessRoute
    }

    /// The container.
    public var container: String
    /// The window's first and last positions.
    public var fromPosition: UInt64
    /// The window's last position.
    public var toPosition: UInt64
    /// The rows, by user, then share.
    public var rows: [Row]
    /// The header's verification.
    public var chain: ChainStatus
    /// When the review was made.
    public var generatedAt: Date

    /// Replays the container's history up to `to` and lists who had access between `from` and `to`.
    public static func make(
        ledger: ShareLedger, container: String, from: HistoryBound, to: HistoryBound, trustedKeys: [CheckpointPublicKey] = [],
        now: Date = Date()
    ) throws(LedgerError) -> AccessReview {
        let last = try LedgerAudit(ledger).position(atOrBefore: to).rawValue
        let first: UInt64
        switch from {
        case .position(let p): first = max(p.rawValue, 1)
        case .time(let t): first = try LedgerAudit(ledger).position(atOrBefore: .time(t.addingTimeInterval(-0.000_001))).rawValue + 1
        }
        var byToken: [String: [ReportEvent]] = [:]
        var order: [String] = []
        for entry in try LedgerAudit(ledger).history(of: .container(container), until: .position(LogPosition(last)), limit: .max) {
            let event = ReportEvent(entry)
            guard let token = event.token, event.change != .other else { continue }
            if byToken[token] == nil { order.append(token) }
            byToken[token, default: []].append(event)
        }
        var rows: [Row] = []
        var times: [UInt64: Date] = [:]
        func time(_ position: UInt64) throws(LedgerError) -> Date {
            if let known = times[position] { return known }
            let date = try ledger.log.event(at: LogPosition(position))?.recordedAt ?? Date(timeIntervalSince1970: 0)
            times[position] = date
            return date
        }
        for token in order {
            let timeline = ShareTimeline(url: token, token: token, events: byToken[token] ?? [], asOf: last)
            for lane in timeline.lanes where lane.kind != .requester {
                var row: Row?
                for (i, change) in lane.standings.enumerated() {
                    guard let standing = change.standing, standing.hasAccess, let user = standing.userRecordName else { continue }
                    let end = i + 1 < lane.standings.count ? lane.standings[i + 1].position - 1 : last
                    let low = max(change.position, first)
                    let high = min(end, last)
                    guard low <= high else { continue }
                    if row == nil {
                        row = Row(
                            user: user, token: token, owner: timeline.owner, roles: [], permissions: [], firstPosition: low,
                            firstTime: try time(low), lastPosition: high, lastTime: try time(high), route: lane.kind == .owner ? .owner : lane.route)
                    }
                    row!.lastPosition = high
                    row!.lastTime = try time(high)
                    if row!.roles.last != standing.role { row!.roles.append(standing.role) }
                    if row!.permissions.last != standing.permission { row!.permissions.append(standing.permission) }
                }
                if let row { rows.append(row) }
            }
        }
        rows.sort { ($0.user, $0.token, $0.firstPosition) < ($1.user, $1.token, $1.firstPosition) }
        return AccessReview(
            container: container, fromPosition: first, toPosition: last, rows: rows,
            chain: try ChainStatus.check(ledger, trustedKeys: trustedKeys), generatedAt: now)
    }

    /// The rows as CSV (RFC 4180, a header line first).
    public func csv() -> String {
        func field(_ text: String) -> String {
            // Quoted when needed; a leading =, +, - or @ is prefixed with ' so spreadsheets do not run it.
            var text = text
            if let first = text.first, "=+-@".contains(first) { text = "'" + text }
            return text.contains(where: { ",\"\n\r".contains($0) }) ? "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\"" : text
        }
        var out = "user,share_token,share_owner,roles,permissions,first_position,first_time,last_position,last_time,how\r\n"
        for row in rows {
            out += [
                field(row.user), field(row.token), field(row.owner), field(row.roles.map(\.description).joined(separator: " → ")),
                field(row.permissions.map(\.description).joined(separator: " → ")), String(row.firstPosition),
                ReportFormat.time(row.firstTime), String(row.lastPosition), ReportFormat.time(row.lastTime), field(row.route.rawValue),
            ].joined(separator: ",") + "\r\n"
        }
        return out
    }

    /// The rows as one self-contained HTML page.
    public func html() -> String {
        var body = "<header>\n<h1>Access review of \(HTML.escape(container))</h1>\n<dl class=\"meta\">\n"
        body += "<dt>container</dt><dd>\(HTML.escape(container))</dd>\n"
        body += "<dt>window</dt><dd>positions \(fromPosition)–\(toPosition)</dd>\n"
        body += "<dt>people</dt><dd>\(Set(rows.map(\.user)).count) people, \(rows.count) accesses to \(Set(rows.map(\.token)).count) shares</dd>\n"
        body += "<dt>made</dt><dd>\(ReportFormat.time(generatedAt))</dd>\n</dl>\n"
        body += "<p class=\"chain \(chain.holds ? "ok" : "bad")\" id=\"chain\">\(HTML.escape(chain.summary))</p>\n</header>\n"
        body += "<table class=\"review\"><thead><tr><th>person</th><th>share</th><th>owner</th><th>role</th><th>permission</th>"
        body += "<th class=\"num\">first position</th><th>first time</th><th class=\"num\">last position</th><th>last time</th><th>how</th></tr></thead><tbody>\n"
        for row in rows {
            body += "<tr><td>\(HTML.escape(row.user))</td><td>\(HTML.escape(row.token))</td><td>\(HTML.escape(row.owner))</td>"
            body += "<td>\(HTML.escape(row.roles.map(\.description).joined(separator: " → ")))</td>"
            body += "<td>\(HTML.escape(row.permissions.map(\.description).joined(separator: " → ")))</td>"
            body += "<td class=\"num\">\(row.firstPosition)</td><td>\(ReportFormat.time(row.firstTime))</td>"
            body += "<td class=\"num\">\(row.lastPosition)</td><td>\(ReportFormat.time(row.lastTime))</td><td>\(HTML.escape(row.route.rawValue))</td></tr>\n"
        }
        body += "</tbody></table>\n"
        return HTML.page(title: "Access review of \(container)", body: body)
    }
}
