import SharingDomain

// What a server built on the public API needs to monitor the ledger (`share-ledger serve`'s /metrics).
extension ShareLedger {
    /// Commands waiting for the writer thread (queued, not yet taken into a batch) at this moment:
    /// the writer's queue depth. A depth that stays high means callers submit faster than the
    /// writer commits (see docs/operations.md). Takes the writer's lock briefly; for monitoring, not
    /// for every request.
    public var writerQueueDepth: Int { log.writer.queuedCommands }
}
