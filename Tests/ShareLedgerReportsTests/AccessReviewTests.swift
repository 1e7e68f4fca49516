import Foundation
import ShareLedger
import ShareLedgerAudit
import ShareLedgerReports
import Testing
import TestSupport

@Suite("Access review and user report")
struct AccessReviewTests {
    /// Every row is a person who had access at its first and last position (per `access(to:at:)`),
    /// and everyone `access` says had access at a sampled position in the window is in a row that
    /// spans it.
    @Test func reviewListsExactlyWhoHadAccess() async throws {
        let fixture = try await SimulatedLedger.make()
        defer { Task { await fixture.close() } }
        let container = try #require(fixture.shares.first?.container)
        let head = try fixture.ledger.log.head().position.rawValue
        let (from, to) = (head / 3, 2 * head / 3)
        let review = try AccessReview.make(
            ledger: fixture.ledger, container: container, from: .position(LogPosition(from)), to: .position(LogPosition(to)))
        #expect(!review.rows.isEmpty)
        let urls = Dictionary(fixture.shares.map { ($0.url.lastPathComponent, $0.url) }, uniquingKeysWith: { a, _ in a })
        for row in review.rows {
            let url = try #require(urls[row.token])
            #expect(row.firstPosition >= from && row.lastPosition <= to && row.firstPosition <= row.lastPosition)
            for position in [row.firstPosition, row.lastPosition] {
                let access = try LedgerAudit(fixture.ledger).access(to: url, at: .position(LogPosition(position)))
                #expect(
                    access.participants.contains { $0.hadAccess && $0.userRecordName == row.user },
                    "\(row.user) had access to \(row.token) at \(position)")
            }
        }
        let shares = fixture.shares.filter { $0.container == container }
        let step = Int(max(1, (to - from) / 15))
        for position in stride(from: from, through: to, by: step) {
            for share in shares {
                let token = share.url.lastPathComponent
                let access = try LedgerAudit(fixture.ledger).access(to: share.url, at: .position(LogPosition(position)))
                for entry in access.participants where entry.hadAccess {
                    let user = entry.userRecordName
                    let covered = review.rows.contains { (row: AccessReview.Row) -> Bool in
                        row.user == user && row.token == token && row.firstPosition <= position && row.lastPosition >= position
                    }
                    #expect(covered, "\(user ?? "?") on \(token) at \(position)")
                }
            }
        }
        let routes = Set(review.rows.map(\.route))
        #expect(routes.contains(.owner) && routes.contains(.invited), "routes: \(routes)")
        let csv = review.csv()
        let lines = csv.split(separator: "\r\n")
        #expect(lines.first == "user,share_token,share_owner,roles,permissions,first_position,first_time,last_position,last_time,how")
        #expect(lines.count == review.rows.count + 1)
        let html = review.html()
        for row in review.rows.prefix(20) { #expect(html.contains("<td>\(HTML.escape(row.user))</td><td>\(row.token)</td>")) }
        #expect(!html.lowercased().contains("<script"))
    }

    /// A person's page has a lane for every share `access` says they could see at the end, and the
    /// CLI writes both formats.
    @Test func userReportHasTheirShares() async throws {
        let fixture = try await SimulatedLedger.make()
        let head = try fixture.ledger.log.head().position
        // The person with the most shares.
        var counts: [String: (container: String, tokens: Set<String>)] = [:]
        for share in fixture.shares {
            for entry in try LedgerAudit(fixture.ledger).access(to: share.url, at: .position(head)).participants where entry.hadAccess {
                guard let user = entry.userRecordName else { continue }
                counts[user + "|" + share.container, default: (share.container, [])].tokens.insert(share.url.lastPathComponent)
            }
        }
        let (key, best) = try #require(counts.max { ($0.value.tokens.count, $0.key) < ($1.value.tokens.count, $1.key) })
        let user = String(key.split(separator: "|")[0])
        let report = try UserReport.make(ledger: fixture.ledger, user: user, container: best.container)
        let drawn = Set(report.shares.map { $0.timeline.token })
        #expect(best.tokens.isSubset(of: drawn), "\(best.tokens.subtracting(drawn)) missing")
        let html = report.html()
        for token in best.tokens { #expect(html.contains("share \(token)")) }
        for event in report.axis { #expect(html.contains("href=\"#e\(event.position)\"") || html.contains("cluster")) }
        await fixture.close()
        let path = fixture.directory.child("ledger")
        let page = fixture.directory.child("user.html")
        let csv = fixture.directory.child("review.csv")
        let reviewPage = fixture.directory.child("review.html")
        var outcome = try await runProduct("share-ledger", ["report", "user", user, "--container", best.container, "--html", page, "--path", path])
        #expect(outcome.exited(0), "\(outcome.summary)")
        #expect(try String(contentsOfFile: page, encoding: .utf8).contains("<svg id=\"timeline\""))
        outcome = try await runProduct(
            "share-ledger",
            ["report", "access-review", "--container", best.container, "--from", "1", "--to", "\(head.rawValue)", "--csv", csv, "--html", reviewPage, "--path", path])
        #expect(outcome.exited(0), "\(outcome.summary)")
        #expect(try String(contentsOfFile: csv, encoding: .utf8).hasPrefix("user,share_token"))
        outcome = try await runProduct("share-ledger", ["report", "access-review", "--container", best.container, "--from", "1", "--to", "2", "--path", path])
        #expect(outcome.exited(64), "neither --html nor --csv: \(outcome.summary)")
    }
}
