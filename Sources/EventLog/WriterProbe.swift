/// What the writer thread tells an observer outside the product about its batches: the hook the
/// tests' pause (`WriterGate`, in ShareLedgerTestSupport) and the benchmarks' commit-size recorder
/// (`CommitSizeRecorder`, in ShareLedgerBaselines) are built on
/// (``EventLog/Configuration/writerProbe``). Both calls are made on the writer's thread, outside any
/// transaction.
package protocol WriterProbe: Sendable {
    /// Called once work is queued, before the writer takes its next batch. Blocking here holds the
    /// writer: the commands submitted meanwhile join the batch it then takes.
    func beforeBatch()
    /// Called after a commit that appended `events` events, before its callers are resumed.
    func committed(events: Int)
}

extension WriterProbe {
    /// Holds nothing.
    package func beforeBatch() {}
    /// Records nothing.
    package func committed(events: Int) {}
}
