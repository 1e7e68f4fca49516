import ArgumentParser
import Foundation
import ShareLedger

/// `share-ledger record`: records in a zone (the owner's, or a zone shared with the user).
struct RecordCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "record", abstract: "Save, fetch and delete records.",
        subcommands: [Save.self, Fetch.self, Delete.self])

    /// Which record: its name, zone and the zone's owner.
    struct RecordOptions: ParsableArguments {
        @Argument(help: "The record's name, e.g. groceries.")
        var name: String

        @Option(help: "The record's zone.")
        var zone: String

        @Option(help: "The zone's owner, for a record of a share you accepted (default: you).")
        var owner: String?

        /// The record's id.
        var recordID: RecordID {
            RecordID(recordName: name, zoneID: RecordZoneID(zoneName: zone, ownerName: owner ?? RecordZoneID.defaultOwnerName))
        }
    }

    /// Prints a record for people.
    static func printRecord(_ record: MetadataReport.RecordReport, zone: String) {
        print("record \(record.recordName) (\(record.recordType)) in zone \(zone), change tag \(record.recordChangeTag ?? "?")"
            + (record.parent.map { ", parent \($0)" } ?? ""))
        for (key, value) in record.fields.sorted(by: { $0.key < $1.key }) {
            print("  " + key.rightPad(12) + value.description)
        }
    }

    struct Save: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "save",
            abstract: "Create a record, or change one (--change-tag: the tag it was fetched with).",
            discussion: """
                A new record needs --type. With --change-tag the record is fetched, the given fields, \
                parent and type are set on it, and it is saved with that tag: a stale tag fails with \
                serverRecordChanged. A participant with readWrite permission may save records of a share \
                they accepted (--owner names the zone's owner).
                """)

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var actor: ActorOptions
        @OptionGroup var record: RecordOptions

        @Option(help: "The record type, e.g. List (needed for a new record).")
        var type: String?

        @Option(help: "The parent record's name (same zone): puts the record into its parent's share.")
        var parent: String?

        @Option(name: .customLong("field"), help: "A string field, KEY=VALUE (repeatable).")
        var fields: [String] = []

        @Option(name: .customLong("change-tag"), help: "Change an existing record: the change tag it was fetched with.")
        var changeTag: String?

        func validate() throws {
            if changeTag == nil && type == nil { throw ValidationError("a new record needs --type (or pass --change-tag to change one)") }
            // The message never repeats the argument: its value may be personal data.
            for (index, field) in fields.enumerated() where !field.contains("=") || field.hasPrefix("=") {
                throw ValidationError(
                    "--field takes KEY=VALUE: --field number \(index + 1) has \(field.contains("=") ? "no key before its =" : "no =")")
            }
        }

        func run() async throws {
            var values: [String: FieldValue] = [:]
            for field in fields {
                let parts = field.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                values[String(parts[0])] = .string(parts.count > 1 ? String(parts[1]) : "")
            }
            let (id, type, parent, tag, fieldValues) = (record.recordID, type, parent, changeTag, values)
            let saved = try await ledger.acting(as: actor.user, in: actor.container) { handle, _ throws(LedgerError) in
                var draft: Record
                if let tag {
                    draft = try handle.record(for: id)
                    draft.recordChangeTag = tag
                    if let type { draft.recordType = type }
                    draft.fields.merge(fieldValues) { $1 }
                } else {
                    draft = Record(recordType: type ?? "", recordID: id, fields: fieldValues)
                }
                if let parent { draft.parent = RecordID(recordName: parent, zoneID: id.zoneID) }
                return try await handle.save(draft)
            }
            let report = MetadataReport.RecordReport(saved)
            if ledger.json {
                Output.printJSON(report)
            } else {
                print("saved", terminator: " ")
                RecordCommand.printRecord(report, zone: record.zone)
            }
        }
    }

    struct Fetch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "fetch", abstract: "Read a record of yours, or of a share you accepted (--owner).")

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var actor: ActorOptions
        @OptionGroup var record: RecordOptions

        func run() async throws {
            let id = record.recordID
            let found = try await ledger.acting(as: actor.user, in: actor.container) { handle, _ throws(LedgerError) in
                try handle.record(for: id)
            }
            let report = MetadataReport.RecordReport(found)
            if ledger.json { Output.printJSON(report) } else { RecordCommand.printRecord(report, zone: record.zone) }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "delete",
            abstract: "Delete a record; deleting a share's root record deletes the share.")

        @OptionGroup var ledger: LedgerOptions
        @OptionGroup var actor: ActorOptions
        @OptionGroup var record: RecordOptions

        struct Summary: Encodable {
            var deletedRecord: String
            var residualTasksCompleted: Int
        }

        func run() async throws {
            let id = record.recordID
            let completed = try await ledger.acting(as: actor.user, in: actor.container) { handle, sharing throws(LedgerError) in
                let since = try sharing.log.head().position
                try await handle.deleteRecord(withID: id)
                return try await ResidualTaskDrain.drain(sharing, since: since)
            }
            if ledger.json {
                Output.printJSON(Summary(deletedRecord: record.name, residualTasksCompleted: completed))
            } else {
                print("deleted record \(record.name); residual tasks completed \(completed)")
            }
        }
    }
}
