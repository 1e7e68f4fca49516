import EventLog
import LMDB
import SharingDomain

extension DomainCommand {
    /// This command as a step of the log's writer: refuses a command id seen before, then decides
    /// and applies each step against the read models of the writer's transaction, appending each
    /// step's events to the log. Refused steps write nothing; the step throws only for storage
    /// errors, which abort the whole transaction.
    func commitStep(models: ReadModels) -> CommitStep<Result<DomainOutcome, LedgerError>> {
        { txn, log, scope in
            models.rowCache?.begin(serial: scope.serial, transactionID: txn.id)
            if let record = try scope.commandRecord(txn, metadata) {
                return .failure(
                    LedgerError(
                        .serverRejectedRequest, "command \(metadata.commandID) was applied already (at position "
                            + "\(record.first)); send a new command id"))
            }
            let first = scope.head.position.rawValue + 1
            let results: [Result<StepAnswer, LedgerError>]
            if atomic && steps.count > 1 {
                // In a nested transaction, kept only when every step succeeded.
                var attempted: [Result<StepAnswer, LedgerError>] = []
                let kept = try scope.allOrNothing(txn) { txn, log, scope in
                    attempted = try decideAndAppend(txn, log, &scope, models: models)
                    return attempted.allSatisfy { (try? $0.get()) != nil }
                }
                if !kept {
                    // The rows the nested transaction read or wrote were rolled back with it.
                    models.rowCache?.forgetAll()
                }
                results = kept ? attempted : attempted.map { result in
                    guard case .success = result else { return result }
                    return .failure(
                        LedgerError(
                            .batchRequestFailed, "another change of this atomic batch failed, so none of them was made"))
                }
            } else {
                results = try decideAndAppend(txn, log, &scope, models: models)
            }
            let last = scope.head.position.rawValue
            guard last >= first else { return .success(DomainOutcome(results: results, positions: nil)) }
            try scope.recordCommand(txn, metadata, first: first, count: UInt32(last - first + 1), streamVersion: 0)
            return .success(DomainOutcome(results: results, positions: LogPosition(first)...LogPosition(last)))
        }
    }

    /// ``decideAndApply(_:models:recordedAt:append:changed:)`` in the writer's
    /// transaction: each event appended to the log through `scope`.
    private func decideAndAppend(
        _ txn: borrowing Transaction, _ log: borrowing Cursor, _ scope: inout CommitScope, models: ReadModels
    ) throws -> [Result<StepAnswer, LedgerError>] {
        try decideAndApply(
            txn, models: models, recordedAt: scope.recordedAt,
            append: { pending in
                let eventType = pending.event.typeName
                return try scope.append(
                    CommitScope.NewEvent(
                        metadata: metadata, stream: pending.stream, eventType: eventType,
                        schemaVersion: pending.event.schemaVersion, payload: try pending.event.payload(),
                        versioned: !pending.event.recordsARead),
                    txn: txn, log: log)
            },
            changed: { token in scope.invalidate(token) })
    }
}
