import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import ShareLedger
import UnixSignals

extension LedgerOptions {
    /// Opens the sharing ledger with no in-process worker (the command decides who works); exits
    /// with code 2 when it cannot be read.
    ///
    /// Commands that only read pass `readOnly: true`: they then never change the ledger, and they
    /// work on a copy an auditor was given on read-only storage (a read-only mount, a snapshot).
    func openWithoutWorker(create: Bool = false, readOnly: Bool = false) throws -> ShareLedger {
        do {
            return try withUpgradeFallback(readOnly) { readOnly throws(LedgerError) in
                var configuration = ShareLedger.Configuration(path: path, createIfMissing: create, readOnly: readOnly, logger: logger)
                configuration.residualTaskWorker = nil
                return try ShareLedger.open(configuration)
            }
        } catch {
            Output.failure(error, json: json)
            throw Output.exitCode(unreadable: error)
        }
    }

    /// Opens the ledger as ``openWithoutWorker(create:readOnly:)`` does, runs `body` with it, and
    /// closes it again, also when `body` throws; a ``LedgerError`` from `body` becomes exit 1 with its
    /// message (JSON with `--json`).
    func withLedger<R>(create: Bool = false, readOnly: Bool = false, _ body: (ShareLedger) async throws -> R) async throws -> R {
        let shareLedger = try openWithoutWorker(create: create, readOnly: readOnly)
        let result: Result<R, any Error>
        do {
            result = .success(try await body(shareLedger))
        } catch {
            result = .failure(error)
        }
        await shareLedger.close()
        return try await runReportingErrors(json: json) { try result.get() }
    }
}

/// `share-ledger worker`: runs the residual-task worker until SIGTERM/SIGINT, or with `--drain`
/// until no task is due.
struct WorkerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "Complete residual tasks (zones in participants' shared databases) until stopped.",
        discussion: """
            Runs until SIGTERM or SIGINT (finishing the batch in hand), or with --drain until no task is \
            due, then exits 0. Only one worker takes tasks for a ledger at a time; a second waits for \
            the first's lease.
            """)

    @OptionGroup var ledger: LedgerOptions

    @Flag(help: "Exit once no task is due (parked tasks and tasks waiting for a retry do not count).")
    var drain = false

    @Option(help: "Attempts before a task is parked.")
    var maxAttempts = 8

    @Option(
        name: .customLong("snapshot-every"),
        help: "Save a read-model snapshot whenever the head is this many events past the newest (for fast `access --at`); 0 saves none.")
    var snapshotEvery: UInt64 = 100_000

    @Option(
        name: .customLong("keep-snapshots"),
        help: "Keep only the newest N read-model snapshots when saving one (views before the oldest replay from the start); 0 keeps them all.")
    var keepSnapshots = 10

    func validate() throws {
        if keepSnapshots < 0 { throw ValidationError("--keep-snapshots must be 0 or more") }
        if maxAttempts < 1 { throw ValidationError("--max-attempts must be 1 or more") }
    }

    struct Summary: Encodable {
        var completed: Int
        var pendingResidualTasks: Int
        var parkedResidualTasks: Int
    }

    func run() async throws {
        let shareLedger = try ledger.openWithoutWorker()
        let worker = ResidualTaskWorker(
            ledger: shareLedger,
            configuration: ResidualTaskWorker.Configuration(
                maxAttempts: maxAttempts, logger: ledger.logger, snapshotInterval: snapshotEvery == 0 ? nil : snapshotEvery,
                snapshotsKept: keepSnapshots))
        var completed = 0
        do {
            if drain {
                while true {
                    completed += try await worker.drain()
                    if try !shareLedger.hasDueResidualTasks() { break }
                    // Another worker holds the lease, or a task became due: look again shortly.
                    Output.progress("tasks are due; waiting for the lease")
                    try await Task.sleep(for: .milliseconds(200))
                }
                Output.endProgress()
                await worker.saveSnapshotIfDue()
                // The next worker need not wait for the lease to expire.
                await worker.releaseLease()
            } else {
                let group = ServiceGroup(
                    configuration: ServiceGroupConfiguration(
                        services: [.init(service: worker)], gracefulShutdownSignals: [.sigterm, .sigint],
                        logger: ledger.logger))
                try await group.run()
                completed = worker.tasksCompletedByRun
            }
        } catch let error as LedgerError {
            Output.failure(error, json: ledger.json)
            await shareLedger.close()
            throw ExitCode(1)
        }
        let stats = try await runReportingErrors(json: ledger.json) { try shareLedger.statistics() }
        await shareLedger.close()
        let summary = Summary(
            completed: completed, pendingResidualTasks: stats.pendingResidualTasks,
            parkedResidualTasks: stats.parkedResidualTasks)
        if ledger.json {
            Output.printJSON(summary)
        } else {
            print(
                "worker done: \(completed) tasks completed here; \(stats.pendingResidualTasks) pending, "
                    + "\(stats.parkedResidualTasks) parked")
        }
    }
}

/// `share-ledger tasks`: lists residual tasks, and retries parked ones.
struct TasksCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tasks",
        abstract: "List residual tasks (pending and parked) with their last error.",
        subcommands: [List.self, Retry.self],
        defaultSubcommand: List.self)

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List residual tasks.")

        @OptionGroup var ledger: LedgerOptions

        @Flag(help: "Only the parked tasks.")
        var parked = false

        func run() async throws {
            let tasks = try await ledger.withLedger(readOnly: true) { shareLedger in try shareLedger.residualTasks(parkedOnly: parked) }
            if ledger.json {
                Output.printJSON(tasks)
                return
            }
            if tasks.isEmpty { print(parked ? "no parked tasks" : "no residual tasks") }
            let formatter = ISO8601DateFormatter()
            for task in tasks {
                var line = "\(task.id)  \(task.kind.rawValue)  \(task.userRecordName) ← \(task.zoneID.zoneName) of "
                    + "\(task.zoneID.ownerName)  attempts \(task.attempts)  due \(formatter.string(from: task.dueAt))"
                if task.isParked { line += "  PARKED" }
                if let error = task.lastError { line += "\n    last error: \(error)" }
                print(line)
            }
        }
    }

    struct Retry: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "retry", abstract: "Make parked tasks due again, with a fresh attempt count.")

        @OptionGroup var ledger: LedgerOptions

        @Argument(help: "The ids of the parked tasks to retry.")
        var ids: [UInt64] = []

        @Flag(help: "Retry every parked task.")
        var all = false

        func validate() throws {
            guard all != !ids.isEmpty else { throw ValidationError("give task ids or --all (not both)") }
        }

        struct Summary: Encodable { var retried: Int }

        func run() async throws {
            let retried = try await ledger.withLedger { shareLedger in
                try await shareLedger.retryParkedTasks(ids: all ? nil : ids)
            }
            if ledger.json {
                Output.printJSON(Summary(retried: retried))
            } else {
                print("\(retried) parked tasks are due again")
            }
        }
    }
}
