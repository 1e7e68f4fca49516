/// The sharing domain without LMDB or a log: the same rules (``Decider``), projections
/// (``Projector``) and presentation (``Presenter``) as the ledger's writer, on an
/// ``InMemoryReadModelStore``. For testing the rules alone, and for holding the LMDB path to the same
/// decisions, answers and read-model bytes (`InMemoryDomainTests`).
///
/// Events get positions 1, 2, 3… as if the log held nothing else. A command that throws (not a
/// refused step: a failure of the store) may leave part of its writes behind; the LMDB path aborts
/// its transaction instead. Not thread-safe.
final class InMemorySharingDomain {
    let store = InMemoryReadModelStore()
    let models = ReadModels.unattached
    let presenter: Presenter
    /// Every event appended so far, in order.
    private(set) var events: [(position: UInt64, stream: String, event: DomainEvent)] = []

    init(shareURLHost: String = "share.localhost") {
        presenter = Presenter(models: models, urlHost: shareURLHost)
    }

    /// Decides and applies `command` at the time `recordedAt` (microseconds since 1970) and returns
    /// each step's answer as the command's actor sees it, or the step's error.
    func run(_ command: DomainCommand, recordedAt: Int64) throws -> [Result<StepOutput, LedgerError>] {
        let answers = try command.decideAndApply(
            store, models: models, presenter: presenter, recordedAt: recordedAt,
            append: { pending in
                let position = UInt64(events.count + 1)
                events.append((position, pending.stream, pending.event))
                return position
            },
            changed: { _ in })
        return answers.map { result in
            result.flatMap { answer in
                Result { () throws(LedgerError) -> StepOutput in
                    do {
                        return try presenter.present(
                            answer, container: command.metadata.container, viewer: command.metadata.actor, store)
                    } catch let error as LedgerError {
                        throw error
                    } catch {
                        throw LedgerError.wrap(error, while: "presenting an answer")
                    }
                }
            }
        }
    }
}
