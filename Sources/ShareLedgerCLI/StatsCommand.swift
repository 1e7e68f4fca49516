import ArgumentParser
import Foundation
import ShareLedger

/// `share-ledger stats`: counters of a ledger.
struct StatsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats", abstract: "Print the ledger's counters: events, head, size.")

    @OptionGroup var ledger: LedgerOptions

    func run() async throws {
        let sharing = try ledger.openSharing(create: false, readOnly: true)
        let stats = try await runReportingErrors(json: ledger.json) { try sharing.statistics() }
        await sharing.close()
        if ledger.json {
            Output.printJSON(stats)
        } else {
            print("""
                path           \(ledger.path)
                events         \(stats.events)
                headPosition   \(stats.headPosition)
                headHash       \(stats.headHash)
                streams        \(stats.streams)
                commands       \(stats.commands)
                mapSizeBytes   \(stats.mapSizeBytes)
                usedBytes      \(stats.usedBytes)
                formatVersion  \(stats.formatVersion)
                users          \(stats.users)
                zones          \(stats.zones)
                records        \(stats.records)
                shares         \(stats.shares)
                participants   \(stats.participants) (\(stats.acceptedParticipants) accepted)
                participantZones      \(stats.participantZones)
                pendingResidualTasks  \(stats.pendingResidualTasks) (\(stats.parkedResidualTasks) parked, oldest \(String(format: "%.1f", stats.oldestPendingTaskAgeSeconds)) s)
                """)
        }
    }
}
