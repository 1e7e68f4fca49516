import EventLog
import LMDB

extension DomainCommand {
    /// This command as a step of the log's writer: decides and applies each step of the command in
    /// turn (a step sees the steps before it), appending each step's events and applying them to the
    /// read models in the writer's transaction. Refused steps write nothing; the step throws only for
    /// storage errors, which abort the whole transaction.
    func commitStep(models: ReadModels, presenter: Presenter) -> CommitStep<Result<DomainOutcome, LedgerError>> {
        { txn, log, scope in try self.apply(txn: txn, log: log, scope: &scope, models: models, presenter: presenter) }
    }

    private func apply(
        txn: borrowing Transaction, log: borrowing Cursor, scope: inout CommitScope, models: ReadModels,
        presenter: Presenter
    ) throws -> Result<DomainOutcome, LedgerError> {
        if let record = try scope.commandRecord(txn, metadata) {
            return .failure(
                LedgerError(
                    .serverRejectedRequest, "command \(metadata.commandID) was applied already (at position "
                        + "\(record.first)); send a new command id"))
        }
        let recordedAt = scope.recordedAt
        let decider = Decider(
            models: models, presenter: presenter, container: metadata.container, actor: metadata.actor,
            signedIn: signedIn, now: recordedAt)
        let projector = Projector(models: models)
        let first = scope.head.position.rawValue + 1
        var results: [Result<Presentation, LedgerError>] = []
        results.reserveCapacity(steps.count)
        for step in steps {
            let decision = try decider.decide(step, txn)
            for pending in decision.events {
                let eventType = pending.event.typeName
                let position = try scope.append(
                    CommitScope.NewEvent(
                        metadata: metadata, stream: pending.stream, eventType: eventType,
                        schemaVersion: DomainEvent.currentSchemaVersion(of: eventType), payload: try pending.event.payload()),
                    txn: txn, log: log)
                let changedShares = try projector.apply(
                    pending.event,
                    Projector.Context(
                        position: position, recordedAtMicros: recordedAt, container: metadata.container,
                        actor: metadata.actor),
                    txn)
                for token in changedShares { scope.invalidate(token) }
            }
            switch decision.outcome {
            case .failed(let error): results.append(.failure(error))
            case .present(let present): results.append(.success(present))
            }
        }
        let last = scope.head.position.rawValue
        guard last >= first else { return .success(DomainOutcome(results: results, positions: nil)) }
        try scope.recordCommand(txn, metadata, first: first, count: UInt32(last - first + 1), streamVersion: 0)
        return .success(DomainOutcome(results: results, positions: LogPosition(first)...LogPosition(last)))
    }
}
