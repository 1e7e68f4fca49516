import EventLog

extension DomainCommand {
    /// Decides each step in turn against `state` and applies its events to `state` before the next
    /// (a step sees the steps before it): the sharing domain's whole write path, on any
    /// ``ReadModelStore``. `append` records an event and returns its position; `changed` hears the
    /// token of every share an event was about.
    package func decideAndApply(
        _ state: borrowing some ReadModelStore & ~Copyable, models: ReadModels, recordedAt: Int64,
        append: (PendingEvent) throws -> UInt64, changed: (String) -> Void
    ) throws -> [Result<StepAnswer, LedgerError>] {
        let decider = Decider(
            models: models, container: metadata.container, actor: metadata.actor, signedIn: signedIn, now: recordedAt)
        let projector = Projector(models: models)
        var results: [Result<StepAnswer, LedgerError>] = []
        results.reserveCapacity(steps.count)
        // By index: each action is read in place, not copied out of the array.
        for index in steps.indices {
            let decision = try decider.decide(steps[index], state)
            for pending in decision.events {
                // Personal fields are sealed before the event is appended, so the log and the read
                // models only ever see the ciphertext.
                let pending = try models.sealingPersonalData(of: pending, container: metadata.container, state)
                let position = try append(pending)
                let context = Projector.Context(
                    position: position, recordedAtMicros: recordedAt, container: metadata.container, actor: metadata.actor)
                if let token = try projector.apply(pending.event, context, state) { changed(token) }
            }
            switch decision.outcome {
            case .failed(let error): results.append(.failure(error))
            case .answer(let answer): results.append(.success(answer))
            }
        }
        return results
    }
}
