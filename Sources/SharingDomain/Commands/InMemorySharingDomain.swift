import EventLog

/// The sharing domain without LMDB or a log: the same rules (``Decider``) and projections
/// (``Projector``) as the ledger's writer, on an ``InMemoryReadModelStore``. For testing the rules
/// alone, and for holding the LMDB path to the same decisions, answers and read-model bytes.
///
/// Events get positions 1, 2, 3… as if the log held nothing else. A command that throws (not a
/// refused step: a failure of the store) may leave part of its writes behind; the LMDB path aborts
/// its transaction instead. Not thread-safe.
package final class InMemorySharingDomain {
    package let store = InMemoryReadModelStore()
    package let models = ReadModels.unattached
    /// Every event appended so far, in order.
    package private(set) var events: [(position: UInt64, stream: String, event: DomainEvent)] = []

    package init() {}

    /// Decides and applies `command` at the time `recordedAt` (microseconds since 1970) and returns
    /// each step's answer (to present from ``store``), or the step's error.
    package func run(_ command: DomainCommand, recordedAt: Int64) throws -> [Result<StepAnswer, LedgerError>] {
        try command.decideAndApply(
            store, models: models, recordedAt: recordedAt,
            append: { pending in
                let position = UInt64(events.count + 1)
                events.append((position, pending.stream, pending.event))
                return position
            },
            changed: { _ in })
    }
}
