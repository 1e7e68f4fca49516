extension ResidualTaskWorker {
    /// A worker for `ledger`: it keeps the ledger's store, snapshots, clock and random source, not the
    /// ledger. Several worker objects may exist; the lease lets one work at a time.
    public convenience init(
        ledger: ShareLedger, configuration: Configuration = Configuration(),
        executor: any ResidualTaskExecutor = LedgerOnlyExecutor()
    ) {
        self.init(
            store: ledger.store, snapshots: ledger.snapshots, clock: ledger.configuration.clock,
            randomSource: ledger.configuration.randomSource, configuration: configuration, executor: executor)
    }
}
