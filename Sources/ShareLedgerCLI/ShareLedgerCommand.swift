import ArgumentParser

/// `share-ledger`: the command-line face of ShareLedger.
@main
struct ShareLedgerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share-ledger",
        abstract: "An event-sourced ledger of CloudKit-style sharing, on LMDB.",
        discussion: """
            Every command takes --path (default ./.share-ledger) and can print --json.
            Exit codes: 0 success, 1 the command failed (a full disk included), 2 the ledger could not be read (or is damaged), 64 the arguments were refused.
            """,
        groupedSubcommands: [
            CommandGroup(
                name: "Sharing by hand, as one user",
                subcommands: [
                    UserCommand.self, ZoneCommand.self, RecordCommand.self, ShareCommand.self, FetchCommand.self,
                    AcceptCommand.self,
                ]),
            CommandGroup(
                name: "Workload and residual tasks",
                subcommands: [SimulateCommand.self, WorkerCommand.self, TasksCommand.self, StatsCommand.self]),
            CommandGroup(
                name: "History and audit",
                subcommands: [
                    HistoryCommand.self, AccessCommand.self, SnapshotCommand.self, AuditCommand.self, VerifyCommand.self,
                    RebuildCommand.self, KeygenCommand.self, CheckpointCommand.self, ExportCommand.self, ImportCommand.self,
                    ForgetCommand.self, KeyStoreCommand.self, ReportCommand.self,
                ]),
            CommandGroup(
                name: "Server and replication",
                subcommands: [
                    ServeCommand.self, TokenCommand.self, ReplicateCommand.self, FollowCommand.self, RejoinCommand.self, ShardCommand.self, FailoverCommand.self,
                ]),
            CommandGroup(name: "Benchmarks", subcommands: [BenchCommand.self, DemoCommand.self]),
        ]
    )

    /// Runs the command in a supervised child process (``CommandSupervisor``), then as usual.
    static func main() async {
        CommandSupervisor.superviseOrReturn()
        await main(nil)
    }
}
