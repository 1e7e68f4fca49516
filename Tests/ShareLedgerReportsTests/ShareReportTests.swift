import Foundation
import ShareLedger
import ShareLedgerAudit
import ShareLedgerReports
import Testing
import TestSupport

@Suite("Share timeline report")
struct ShareReportTests {
    /// The timeline's state at every position where the share changed (and just before) is what
    /// `access(to:at:)` answers there: participants, their status, role, permission and account,
    /// the public permission, requesters and blocks.
    @Test func timelineMatchesAccessAtEveryChange() async throws {
        let fixture = try await SimulatedLedger.make()
        defer { Task { await fixture.close() } }
        #expect(fixture.shares.count >= 3, "simulate made \(fixture.shares.count) shares")
        var compared = 0
        var sawRequest = false
        var sawBlock = false
        for share in fixture.shares.prefix(12) {
            let report = try ShareReport.make(ledger: fixture.ledger, url: share.url)
            for position in sampledPositions(report.timeline) {
                let expected = try LedgerAudit(fixture.ledger).access(to: share.url, at: .position(LogPosition(position)))
                let state = report.timeline.state(at: position)
                #expect(state.existed == expected.existed, "existed at \(position)")
                #expect(state.publicPermission == expected.publicPermission, "public permission at \(position)")
                #expect(state.allowsAccessRequests == expected.allowsAccessRequests, "requests allowed at \(position)")
                #expect(state.requesters == expected.requesters, "requesters at \(position)")
                #expect(state.blocked == expected.blockedIdentities, "blocked at \(position)")
                sawRequest = sawRequest || !expected.requesters.isEmpty
                sawBlock = sawBlock || !expected.blockedIdentities.isEmpty
                #expect(Set(state.participants.keys) == Set(expected.participants.map(\.participantID)), "participants at \(position)")
                for entry in expected.participants {
                    let standing = state.participants[entry.participantID]
                    #expect(standing?.status == entry.acceptanceStatus, "status of \(entry.participantID) at \(position)")
                    #expect(standing?.role == entry.role, "role of \(entry.participantID) at \(position)")
                    #expect(standing?.permission == entry.permission, "permission of \(entry.participantID) at \(position)")
                    #expect(standing?.userRecordName == entry.userRecordName, "account of \(entry.participantID) at \(position)")
                    #expect(standing?.hasAccess == entry.hadAccess, "access of \(entry.participantID) at \(position)")
                    #expect(standing?.isApprovedRequester == entry.isApprovedRequester, "approval of \(entry.participantID) at \(position)")
                }
                compared += 1
            }
        }
        #expect(compared > 100, "compared \(compared) positions")
        #expect(sawRequest, "the simulated shares include a pending access request")
        #expect(sawBlock, "the simulated shares include a block")
    }

    /// The page names every lane by user record name, links every mark to an event row that exists,
    /// lists every event of `history` with its hash, says the chain verified to the head, and holds no
    /// script or outside resource.
    @Test func pageShowsLanesMarksAndEvents() async throws {
        let fixture = try await SimulatedLedger.make()
        defer { Task { await fixture.close() } }
        let share = try #require(fixture.shares.first)
        let report = try ShareReport.make(ledger: fixture.ledger, url: share.url)
        let html = report.html()
        let history = try LedgerAudit(fixture.ledger).history(of: .share(share.url), limit: .max)
        #expect(report.timeline.events.count == history.count)
        for entry in history {
            let position = entry.envelope.position.rawValue
            #expect(html.contains("<tr id=\"e\(position)\"><td class=\"num\">\(position)</td>"), "row of \(position)")
            #expect(html.contains(entry.envelope.hash.hex), "hash of \(position)")
            #expect(html.contains("<td>\(entry.name)</td><td>\(HTML.escape(entry.envelope.actor))</td>"), "type and actor of \(position)")
        }
        for lane in report.timeline.lanes {
            #expect(html.contains(HTML.escape(LaneChartLabel.truncate(lane.label))), "lane \(lane.label)")
            for mark in lane.marks { #expect(html.contains("href=\"#e\(mark.position)\""), "mark at \(mark.position)") }
        }
        for href in matches(of: #"href="([^"]*)""#, in: html) {
            #expect(href.hasPrefix("#e"), "only links to the page's own rows: \(href)")
            #expect(html.contains("id=\"\(href.dropFirst())\""), "the row \(href) exists")
        }
        #expect(!html.lowercased().contains("<script"))
        #expect(!html.contains("src="))
        #expect(!html.contains("url("))
        let head = try fixture.ledger.log.head().position.rawValue
        #expect(report.chain.holds && report.chain.verifiedThrough == head)
        #expect(html.contains("Hash chain verified from position 1 to \(head)"))
        #expect(html.contains("No signed checkpoint vouches for it"))
        // No email or phone without --show-contact.
        #expect(!html.contains("@example") && !html.contains("mailto"))
    }

    /// --from / --to draw only the events between them, while earlier events still place people.
    @Test func windowDrawsOnlyItsEvents() async throws {
        let fixture = try await SimulatedLedger.make()
        defer { Task { await fixture.close() } }
        let share = try #require(fixture.shares.first)
        let all = try ShareReport.make(ledger: fixture.ledger, url: share.url).timeline.events
        try #require(all.count >= 6)
        let from = all[all.count / 3].position
        let to = all[2 * all.count / 3].position
        let report = try ShareReport.make(
            ledger: fixture.ledger, url: share.url,
            options: ShareReport.Options(from: .position(LogPosition(from)), to: .position(LogPosition(to))))
        let shown = report.timeline.shownEvents.map(\.position)
        #expect(shown == all.map(\.position).filter { $0 >= from && $0 <= to })
        let html = report.html()
        #expect(!html.contains("id=\"e\(all[0].position)\""))
        #expect(html.contains("id=\"e\(from)\"") && html.contains("id=\"e\(to)\""))
        // --as-of cuts the history: the state at the end is the one `access` gives there.
        let cut = try ShareReport.make(ledger: fixture.ledger, url: share.url, options: ShareReport.Options(asOf: .position(LogPosition(from))))
        #expect(cut.timeline.events.last?.position == from)
    }

    /// A signed checkpoint shows in the header; with a trusted key that did not sign it, it does not.
    @Test func headerNamesTheSigningCheckpoint() async throws {
        let directory = TemporaryDirectory()
        let path = directory.child("ledger")
        let outcome = try await runProduct(
            "share-ledger", ["simulate", "--path", path, "--users", "12", "--actions", "200", "--clients", "1", "--durability", "unsafeNoSync"])
        #expect(outcome.exited(0), "\(outcome.summary)")
        var configuration = ShareLedger.Configuration(path: path, createIfMissing: false)
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        let key = CheckpointSigningKey.generate()
        let checkpoint = try await LedgerAudit(ledger).checkpoint(signingKey: key)
        let status = try ChainStatus.check(ledger)
        #expect(status.checkpoint?.position == checkpoint.position.rawValue)
        #expect(status.summary.contains("Signed checkpoint at position \(checkpoint.position.rawValue)"))
        let trusted = try ChainStatus.check(ledger, trustedKeys: [key.publicKey])
        #expect(trusted.checkpoint?.position == checkpoint.position.rawValue && trusted.summary.contains("(a trusted key)"))
        let other = try ChainStatus.check(ledger, trustedKeys: [CheckpointSigningKey.generate().publicKey])
        #expect(other.checkpoint == nil && other.summary.contains("No checkpoint signed by a trusted key"))
        await ledger.close()
    }

    /// The CLI writes the page and its figures agree with `access --at --json` at sampled positions.
    @Test func cliWritesThePage() async throws {
        let fixture = try await SimulatedLedger.make()
        let share = try #require(fixture.shares.first)
        let timeline = try ShareReport.make(ledger: fixture.ledger, url: share.url).timeline
        await fixture.close()
        let path = fixture.directory.child("ledger")
        let file = fixture.directory.child("share.html")
        let outcome = try await runProduct("share-ledger", ["report", "share", share.url.absoluteString, "--html", file, "--path", path, "--json"])
        #expect(outcome.exited(0), "\(outcome.summary)")
        let html = try String(contentsOfFile: file, encoding: .utf8)
        #expect(html.hasPrefix("<!DOCTYPE html>") && html.contains("<svg id=\"timeline\""))
        for position in [timeline.events[timeline.events.count / 2].position, timeline.events.last!.position] {
            let access = try await runProduct(
                "share-ledger", ["access", "--share", share.url.absoluteString, "--at", "\(position)", "--path", path, "--json"])
            let object = try #require((try? JSONSerialization.jsonObject(with: Data(access.stdout.utf8))) as? [String: Any])
            let participants = try #require(object["participants"] as? [[String: Any]])
            let state = timeline.state(at: position)
            #expect(participants.count == state.participants.count)
            for participant in participants {
                let id = try #require(participant["participantID"] as? String)
                #expect(state.participants[id]?.status.description == participant["acceptanceStatus"] as? String)
                #expect(state.participants[id]?.permission.description == participant["permission"] as? String)
            }
        }
        let refused = try await runProduct("share-ledger", ["report", "share", "https://share.invalid/share/0AAAAAAAAAAAAAAAAAAAAAAAAA", "--html", file, "--path", path])
        #expect(refused.exited(1) && refused.stderr.contains("(unknownItem)"), "\(refused.summary)")
    }
}

/// The lane label as the chart draws it (the chart shortens long names).
enum LaneChartLabel {
    static func truncate(_ text: String) -> String { text.count <= 32 ? text : String(text.prefix(31)) + "…" }
}

func matches(of pattern: String, in text: String) -> [String] {
    guard let regex = try? NSRegularExpression(pattern: pattern) else { return [] }
    return regex.matches(in: text, range: NSRange(text.startIndex..., in: text)).compactMap {
        Range($0.range(at: 1), in: text).map { String(text[$0]) }
    }
}
