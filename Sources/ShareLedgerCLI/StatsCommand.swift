import ArgumentParser
import Foundation
import ShareLedger
import ShareLedgerReplication

/// `share-ledger stats`: counters of a ledger.
struct StatsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats", abstract: "Print the ledger's counters: events, head, size.")

    @OptionGroup var ledger: LedgerOptions

    @Option(help: "NATS servers, comma-separated: adds the replication lag of the shard's stream (field replication).")
    var nats: String?

    @Option(help: "With --nats: the shard (its stream is LEDGER_<shard>); default: the shard the ledger's role names.")
    var shard: String?

    /// The statistics with the replication lag, as one JSON object.
    struct WithReplication: Encodable {
        var stats: ShareLedger.Statistics
        var replication: ReplicationLag?

        func encode(to encoder: any Encoder) throws {
            try stats.encode(to: encoder)
            var container = encoder.container(keyedBy: Key.self)
            try container.encodeIfPresent(replication, forKey: .replication)
        }

        enum Key: String, CodingKey { case replication }
    }

    func run() async throws {
        let sharing = try ledger.openSharing(create: false, readOnly: true)
        let stats = try await runReportingErrors(json: ledger.json) { try sharing.statistics() }
        var replication: ReplicationLag?
        if let nats {
            replication = try await runReportingReplicationErrors(json: ledger.json) {
                // The shard is the one the ledger belongs to; comparing with another shard's stream
                // would report a meaningless lag.
                let role = try LedgerRole.read(at: ledger.path)
                guard let name = shard ?? role.shard else {
                    throw ReplicationError(
                        .invalidArguments, "this ledger is standalone: name the shard whose stream to compare with (--shard S)")
                }
                if let member = role.shard, member != name {
                    throw ReplicationError(.invalidArguments, "this ledger is the \(role), not a member of shard \(name)")
                }
                return try await ReplicationLag.read(
                    log: sharing.log, servers: try NATSOptions.parse(["--nats", nats]).servers(), shard: try ShardNames(shard: name))
            }
        }
        await sharing.close()
        if ledger.json {
            Output.printJSON(WithReplication(stats: stats, replication: replication))
        } else {
            if let replication {
                print("""
                    replication    stream \(replication.stream) at \(replication.streamPosition), lag \(replication.lagPositions) positions, \(String(format: "%.1f", replication.lagSeconds)) s
                    """)
            }
            print("""
                path           \(ledger.path)
                events         \(stats.events)
                headPosition   \(stats.headPosition)
                headHash       \(stats.headHash)
                streams        \(stats.streams)
                commands       \(stats.commands)
                mapSizeBytes   \(stats.mapSizeBytes)
                usedBytes      \(stats.usedBytes)\(stats.derivedUsedBytes.map { "\nderivedUsedBytes  \($0) (derived/, map \(stats.derivedMapSizeBytes ?? 0))" } ?? "")
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
