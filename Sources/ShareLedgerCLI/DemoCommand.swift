import ArgumentParser
import Foundation
import ShareLedger

/// `share-ledger demo`: writes a small demo ledger through the real append path.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Append demo events from concurrent writers to a ledger (created when missing).")

    @OptionGroup var ledger: LedgerOptions

    @Option(help: "Events to append.")
    var events = 1_000

    @Option(help: "Concurrent writers.")
    var writers = 16

    @Option(
        name: .customLong("share-participants"),
        help: "Instead of bare events: one busy share with this many participants, to draw with `report share` (see --share-events).")
    var shareParticipants: Int?

    @Option(name: .customLong("share-events"), help: "With --share-participants: about how many events the share gets.")
    var shareEvents = 10_000

    func validate() throws {
        guard events > 0 else { throw ValidationError("--events must be at least 1") }
        guard (1...1024).contains(writers) else { throw ValidationError("--writers must be 1...1024") }
        if let shareParticipants, !(1...10_000).contains(shareParticipants) { throw ValidationError("--share-participants must be 1...10000") }
        guard (1...1_000_000).contains(shareEvents) else { throw ValidationError("--share-events must be 1...1000000") }
    }

    struct Summary: Encodable {
        var appended: Int
        var writers: Int
        var seconds: Double
        var eventsPerSecond: Double
        var headPosition: UInt64
        var headHash: String
    }

    func run() async throws {
        if let shareParticipants {
            let sharing = try ledger.openSharing(create: true, durability: .unsafeNoSync)
            let summary = try await runReportingErrors(json: ledger.json) {
                do {
                    return try await DemoShare(ledger: sharing, participants: shareParticipants, events: shareEvents, seed: 1).run {
                        Output.progress("share events: \($0)")
                    }
                } catch {
                    await sharing.close()
                    throw error
                }
            }
            Output.endProgress()
            await sharing.close()
            if ledger.json {
                Output.printJSON(summary)
            } else {
                print(
                    "made share \(summary.url) with \(summary.participants) participants and about \(summary.shareEvents) events in "
                        + String(format: "%.1f s", summary.seconds))
            }
            return
        }
        let log = try ledger.open(create: true)
        let started = ContinuousClock.now
        let writers = self.writers
        let perWriter = events / writers
        let remainder = events % writers
        try await runReportingErrors(json: ledger.json) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<writers {
                    let count = perWriter + (writer < remainder ? 1 : 0)
                    group.addTask {
                        for index in 0..<count {
                            let body = "demo event \(index) of writer \(writer)"
                            try await log.append(
                                [EventDraft(type: "shareledger.demo.Note", payload: Array(body.utf8))],
                                to: "demo/writer-\(writer)",
                                metadata: CommandMetadata(container: "iCloud.com.example.demo", actor: "writer-\(writer)"))
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        let seconds = (ContinuousClock.now - started).seconds
        let head = try await runReportingErrors(json: ledger.json) { try log.head() }
        await log.close()
        let summary = Summary(
            appended: events, writers: writers, seconds: seconds, eventsPerSecond: Double(events) / seconds,
            headPosition: head.position.rawValue, headHash: head.hash.hex)
        if ledger.json {
            Output.printJSON(summary)
        } else {
            print(
                "appended \(events) events from \(writers) writers in \(String(format: "%.2f", seconds)) s "
                    + "(\(Output.grouped(summary.eventsPerSecond)) events/s); head \(head.position) \(head.hash.hex)")
        }
    }
}

extension Duration {
    /// The duration in seconds.
    var seconds: Double {
        let (s, attoseconds) = components
        return Double(s) + Double(attoseconds) / 1e18
    }
}
