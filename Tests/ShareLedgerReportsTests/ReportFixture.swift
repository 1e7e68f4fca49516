import Foundation
import ShareLedger
import ShareLedgerAudit
import ShareLedgerReports
import Testing
import TestSupport

/// A small ledger `share-ledger simulate` made, opened read-only, with the share URLs it holds.
struct SimulatedLedger {
    let directory: TemporaryDirectory
    let ledger: ShareLedger
    /// Each container's shares, by how many events they have (most first).
    let shares: [(url: URL, container: String, events: Int)]

    static let host = "share.invalid"

    static func make(_ label: String = #function, actions: Int = 900, seed: UInt64 = 7) async throws -> SimulatedLedger {
        let directory = TemporaryDirectory(label)
        let path = directory.child("ledger")
        let outcome = try await runProduct(
            "share-ledger",
            ["simulate", "--path", path, "--users", "30", "--actions", "\(actions)", "--clients", "2", "--seed", "\(seed)",
             "--durability", "unsafeNoSync", "--json"])
        #expect(outcome.exited(0), "simulate: \(outcome.summary)")
        var configuration = ShareLedger.Configuration(path: path, createIfMissing: false, readOnly: true)
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        var counts: [String: (container: String, events: Int)] = [:]
        for container in ["iCloud.com.example.sim.notes", "iCloud.com.example.sim.photos", "iCloud.com.example.sim.tasks"] {
            for entry in try LedgerAudit(ledger).history(of: .container(container), limit: .max) {
                let event = ReportEvent(entry)
                guard let token = event.token, ShareToken(token) != nil else { continue }
                counts[token, default: (container, 0)].events += 1
            }
        }
        let shares = counts.sorted { ($0.value.events, $0.key) > ($1.value.events, $1.key) }.map {
            (url: ShareURL.make(host: host, token: ShareToken($0.key)!)!, container: $0.value.container, events: $0.value.events)
        }
        return SimulatedLedger(directory: directory, ledger: ledger, shares: shares)
    }

    func close() async { await ledger.close() }
}

/// Every position `access(to:at:)` answers differently for, and a few between.
func sampledPositions(_ timeline: ShareTimeline) -> [UInt64] {
    var positions = Set<UInt64>()
    for event in timeline.events {
        positions.insert(event.position)
        if event.position > 1 { positions.insert(event.position - 1) }
    }
    if let last = timeline.events.last { positions.insert(last.position + 5) }
    return positions.sorted()
}
