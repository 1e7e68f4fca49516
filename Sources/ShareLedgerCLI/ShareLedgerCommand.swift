import ArgumentParser

/// `share-ledger`: the command-line face of ShareLedger.
@main
struct ShareLedgerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share-ledger",
        abstract: "An event-sourced ledger of CloudKit-style sharing, on LMDB.",
        discussion: """
            Every command takes --path (default ./.share-ledger) and can print --json.
            Exit codes: 0 success, 1 the command failed, 2 the ledger could not be read (or is damaged), 64 the arguments were refused.
            """,
        subcommands: [
            SimulateCommand.self, FetchCommand.self, AcceptCommand.self, StatsCommand.self, WorkerCommand.self,
            TasksCommand.self, HistoryCommand.self, AccessCommand.self, AuditCommand.self, RebuildCommand.self,
            KeygenCommand.self, CheckpointCommand.self, ExportCommand.self, ImportCommand.self, VerifyCommand.self,
            SnapshotCommand.self, BenchCommand.self, DemoCommand.self, ReplicateCommand.self, FollowCommand.self,
            FailoverCommand.self, ServeCommand.self, TokenCommand.self, UserCommand.self,
        ]
    )

    /// Runs the command in a supervised child process (``CommandSupervisor``), then as usual.
    static func main() async {
        CommandSupervisor.superviseOrReturn()
        await main(nil)
    }
}
