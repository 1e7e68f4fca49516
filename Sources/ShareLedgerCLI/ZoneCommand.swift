import ArgumentParser
import Foundation
import ShareLedger

/// `share-ledger zone`: the zones of a user's private database.
struct ZoneCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "zone", abstract: "Create, list and delete a user's zones.",
        subcommands: [Create.self, List.self, Delete.self])

    /// A zone as the CLI prints it.
    struct ZoneReport: Encodable {
        /// The zone's name.
        var zoneName: String
        /// The owner's user record name.
        var ownerName: String
        /// The zone's capabilities.
        var capabilities: [String]
        /// Whether a zone-wide share covers the zone.
        var zoneWideShare: Bool

        /// The report of `zone`.
        init(_ zone: RecordZone) {
            zoneName = zone.zoneID.zoneName
            ownerName = zone.zoneID.ownerName
            let names: [(RecordZone.Capabilities, String)] = [
                (.fetchChanges, "fetchChanges"), (.atomic, "atomic"), (.sharing, "sharing"), (.zoneWideSharing, "zoneWideSharing"),
            ]
            capabilities = names.filter { zone.capabilities.contains($0.0) }.map(\.1)
            zoneWideShare = zone.share != nil
        }

        /// One line for people.
        var line: String {
            "zone \(zoneName) (owner \(ownerName)), capabilities \(capabilities.joined(separator: ", "))"
                + (zoneWideShare ? ", shared as a whole" : "")
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "create",
            abstract: "Create a zone in the user's private database (saving an existing zone changes nothing).")

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var actor: ActorOptions

        @Argument(help: "The zone's name, e.g. Lists.")
        var name: String

        func run() async throws {
            let zoneName = name
            let zone = try await ledger.acting(as: actor.user, in: actor.container) { handle, _ throws(LedgerError) in
                try await handle.save(RecordZone(zoneID: RecordZoneID(zoneName: zoneName)))
            }
            let report = ZoneReport(zone)
            if ledger.json { Output.printJSON(report) } else { print("saved " + report.line) }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List the user's zones.")

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var actor: ActorOptions

        func run() async throws {
            let zones = try await ledger.acting(as: actor.user, in: actor.container) { handle, _ throws(LedgerError) in
                try handle.recordZones()
            }
            let reports = zones.map(ZoneReport.init)
            if ledger.json {
                Output.printJSON(reports)
            } else {
                if reports.isEmpty { print("no zones") }
                for report in reports { print(report.line) }
            }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "delete",
            abstract: "Delete a zone with its records and shares (participants lose it).")

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var actor: ActorOptions

        @Argument(help: "The zone's name.")
        var name: String

        struct Summary: Encodable {
            var deletedZone: String
            var residualTasksCompleted: Int
        }

        func run() async throws {
            let zoneName = name
            let completed = try await ledger.acting(as: actor.user, in: actor.container) { handle, sharing throws(LedgerError) in
                let since = try sharing.log.head().position
                try await handle.deleteRecordZone(withID: RecordZoneID(zoneName: zoneName))
                return try await ResidualTaskDrain.drain(sharing, since: since)
            }
            if ledger.json {
                Output.printJSON(Summary(deletedZone: name, residualTasksCompleted: completed))
            } else {
                print("deleted zone \(name) with its records and shares; residual tasks completed \(completed)")
            }
        }
    }
}
