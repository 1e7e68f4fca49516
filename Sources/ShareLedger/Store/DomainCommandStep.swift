import EventLog
import LMDB
import SharingDomain

/// What a committed command gives its caller: each step's answer, presented in the transaction that
/// committed the command (as of the command's own last step), or the step's error.
struct CommittedCommand: Sendable {
    /// One result per step, in order.
    var results: [Result<StepOutput, LedgerError>]
    /// The positions of the events the command appended (nil when it appended none).
    var positions: ClosedRange<LogPosition>?
    /// Metadata answers of logged fetches, to keep in the ledger's ``MetadataCache`` once the command
    /// has committed (never before: a transaction the writer retries must leave nothing behind).
    var metadataToKeep: [(key: MetadataCache.Key, entry: MetadataCache.Entry)] = []
}

/// What the commit step presents answers with.
struct AnswerPresentation: Sendable {
    /// The writer's presenter (its read models keep the rows the step decoded: ``LedgerStore/writerModels``).
    let presenter: Presenter
    /// Kept metadata answers and the share tags whose generation they record (nil: none are kept).
    let kept: (cache: MetadataCache, tags: ShareTagTracker)?
}

extension DomainCommand {
    /// This command as a step of the log's writer: refuses a command id seen before and, for a
    /// command that needs an account (``needsAccount``), an actor without one; then decides and
    /// applies each step against the read models of the writer's transaction, appending each step's
    /// events to the log, and presents each step's answer in that same transaction, after the
    /// command's last step. Refused steps write nothing; the step throws only for storage errors,
    /// which abort the whole transaction (the writer then runs each command of the batch alone, and
    /// the answers come from the transaction that commits).
    func commitStep(models: ReadModels, answers: AnswerPresentation) -> CommitStep<Result<CommittedCommand, LedgerError>> {
        { txn, log, scope in
            models.rowCache?.begin(serial: scope.serial, transactionID: txn.id)
            if let record = try scope.commandRecord(txn, metadata) {
                return .failure(
                    LedgerError(
                        .serverRejectedRequest, "command \(metadata.commandID) was applied already (at position "
                            + "\(record.first)); send a new command id"))
            }
            if let refusal = try accountRefusal(txn, models: models) { return .failure(refusal) }
            // Read before any answer is built: an answer kept under a generation that moved on since
            // (a swap, a forget) is never given again.
            let generation = answers.kept?.tags.generation ?? 0
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
            // A kept answer is given only when nothing in this transaction may have changed rows
            // without changing share tags (maintenance, a rebuild's swap, the derived state caught up).
            let keptUsable = !scope.mayHaveChangedEverything
            var committed = try present(results, txn, answers, generation: generation, keptUsable: keptUsable)
            let last = scope.head.position.rawValue
            guard last >= first else { return .success(committed) }
            try scope.recordCommand(txn, metadata, first: first, count: UInt32(last - first + 1), streamVersion: 0)
            committed.positions = LogPosition(first)...LogPosition(last)
            return .success(committed)
        }
    }

    /// The answers of `results`, presented for the command's actor in `txn` (the writer's, after the
    /// command's last step): the state exactly as the command leaves it, whatever commits after it.
    /// A logged fetch's metadata (without its root record) is a kept answer when one was built at
    /// the share's change tag in `txn` and `generation` (and `keptUsable`), else it is built and
    /// handed back to keep once committed (``MetadataCache``'s rules, as for a read). A step whose
    /// answer cannot be presented (a row a later step of the same command deleted) answers with that
    /// error; storage errors are thrown (they abort the transaction).
    private func present(
        _ results: [Result<StepAnswer, LedgerError>], _ txn: borrowing Transaction, _ answers: AnswerPresentation,
        generation: UInt64, keptUsable: Bool
    ) throws -> CommittedCommand {
        let container = metadata.container
        let viewer = metadata.actor
        let presenter = answers.presenter
        var committed = CommittedCommand(results: [], positions: nil)
        committed.results.reserveCapacity(results.count)
        for result in results {
            switch result {
            case .failure(let error):
                committed.results.append(.failure(error))
            case .success(let answer):
                do {
                    if let kept = answers.kept, case .metadata(let token, false, _, _) = answer,
                        let validator = try presenter.models.shareChangeTag(txn, token: token)
                    {
                        let key = MetadataCache.Key(token: token, container: container, viewer: viewer)
                        if keptUsable, let hit = kept.cache.entry(key), hit.validator == validator, hit.generation == generation {
                            committed.results.append(.success(.metadata(hit.metadata)))
                            continue
                        }
                        let output = try presenter.present(answer, container: container, viewer: viewer, txn)
                        if case .metadata(let value) = output {
                            committed.metadataToKeep.append(
                                (key, MetadataCache.Entry(validator: validator, generation: generation, metadata: value)))
                        }
                        committed.results.append(.success(output))
                        continue
                    }
                    committed.results.append(.success(try presenter.present(answer, container: container, viewer: viewer, txn)))
                } catch let error as LedgerError {
                    committed.results.append(.failure(error))
                }
            }
        }
        return committed
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
                        schemaVersion: DomainEvent.currentSchemaVersion(of: eventType), payload: try pending.event.payload(),
                        versioned: !pending.event.recordsARead),
                    txn: txn, log: log)
            },
            changed: { token in scope.invalidate(token) })
    }
}
