import EventLog
import LMDB
import SharingDomain

/// Thrown to abort a rehearsal's write transaction after the action was decided and applied.
private struct RehearsalRollback: Error {
    var events: Int
}

extension ShareLedger {
    /// Decides `action` as `actor` against the read models and applies its events to them, as the
    /// writer does inside a group commit (`Decider.decide`, then `Projector.apply` per event), in a
    /// write transaction that is then aborted: the ledger is left as it was, so the same action can
    /// be measured again (the hot-path benchmarks, through ShareLedgerBenchmarkSupport). Not the log
    /// append, not the commit.
    ///
    /// With `rowCache`, reads go through a ``RowCache`` as the writer's do, begun empty for each
    /// rehearsal (the transaction is aborted, so nothing it kept follows it): each row is decoded at
    /// most once per action, as on a writer whose cache holds none of the rows yet. Without it,
    /// every read decodes its row, as a rebuild's replay does.
    ///
    /// Call it only while nothing else writes to the ledger (LMDB serializes write transactions: a
    /// concurrent command would wait). Returns the number of events the action produced; throws the
    /// action's ``LedgerError`` when it is refused.
    package func rehearse(_ action: DomainAction, container: String, actor: String, rowCache: Bool = true) throws -> Int {
        guard !configuration.readOnly else {
            throw LedgerError(.readOnly, "the ledger at \(configuration.path) was opened read-only")
        }
        let now = configuration.clock.nowMicros()
        do {
            _ = try log.store.environment.write { txn -> Int in
                let models = rowCache ? store.rehearsalRows.begin(transactionID: txn.id) : models
                let decider = Decider(models: models, container: container, actor: actor, signedIn: true, now: now)
                let projector = Projector(models: models)
                let decision = try decider.decide(action, txn)
                var position = try log.store.readHeadPosition(txn)
                for pending in decision.events {
                    position += 1
                    try projector.apply(
                        pending.event,
                        Projector.Context(position: position, recordedAtMicros: now, container: container, actor: actor),
                        txn)
                }
                if case .failed(let error) = decision.outcome { throw error }
                throw RehearsalRollback(events: decision.events.count)
            }
        } catch let rollback as RehearsalRollback {
            return rollback.events
        }
        preconditionFailure("the rehearsal's transaction was committed")
    }
}
