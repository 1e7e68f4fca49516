import ShareLedger

/// A standby's takeover of a shard's writing (docs/operations.md, "Failover").
public enum Failover {
    /// Waits until the shard's writer lease is free or expired and takes it (compare-and-set: of
    /// standbys racing, one wins), then applies the stream into the standby's replica until it holds
    /// every event the stream holds, so that the standby continues the history with no gap and no
    /// fork. Every wait is bounded by `timeout`; NATS errors while it waits (a node lost, a leader
    /// elected) are retried until then, so a standby outlives the hiccups that may end the writer's lease.
    ///
    /// Then open the replica for writing (with its residual-task worker: the tasks the old writer left
    /// pending are in its read models), start a ``LedgerShipper`` (it checks the stream's last event
    /// against the ledger before publishing, and refuses with ``ReplicationError/Code/diverged`` when
    /// the old writer shipped more meanwhile: catch up again), and renew the lease every third of its
    /// duration. The old writer's next publish fails its expected sequence and it stops
    /// (``ReplicationError/Code/fenced``).
    ///
    /// - Returns: the lease held.
    /// - Throws: ``ReplicationError/Code/timedOut`` when the lease stayed held or the catch-up did not
    ///   finish in time; NATS and ledger errors.
    public static func takeOver(
        lease: WriterLease, follower: LedgerFollower, timeout: Duration = .seconds(30)
    ) async throws(ReplicationError) -> WriterLease.Grant {
        let deadline = ContinuousClock.now + timeout
        var grant: WriterLease.Grant?
        var lastError: ReplicationError?
        while true {
            do {
                grant = try await lease.acquire()
                lastError = nil
            } catch where error.code == .unavailable || error.code == .timedOut {
                lastError = error
            }
            if let grant, grant.held { break }
            let now = ContinuousClock.now
            guard now < deadline else {
                throw ReplicationError(
                    .timedOut, "the writer lease of shard \(lease.shard.shard) "
                        + (lastError.map { "could not be read or taken in \(timeout): \($0.message)" }
                            ?? "is still held by \(grant?.record.holder ?? "?") after \(timeout); the writer is alive, or its lease is not yet expired"))
            }
            try? await Task.sleep(for: min(lease.duration / 10, deadline - now, .milliseconds(200)))
        }
        guard let grant else { throw ReplicationError(.timedOut, "the writer lease of shard \(lease.shard.shard) was not taken") }
        let remaining = deadline - ContinuousClock.now
        try await follower.catchUp(timeout: max(remaining, .seconds(1)))
        return grant
    }
}
