import EventLog
import ShareLedgerBaselines
import Synchronization

/// A writer probe for tests: holds the writer before its next batch while closed, so that a test
/// can queue several commands and have them committed in one batch, and records the size (in events)
/// of every group commit. Install it as the log's `writerProbe` when opening.
package final class WriterGate: CommitSizeRecording {
    private struct State {
        var closed = false
        var sizes: [Int] = []
    }

    private let state = Mutex(State())
    /// Guards the writer's wait while the gate is closed.
    private let lock = ConditionLock()

    package init() {}

    /// Closes (`true`) or opens (`false`) the gate: a closed gate holds the writer before its next
    /// batch until it is opened. Open it before the log is closed.
    package func setClosed(_ closed: Bool) {
        lock.withLock {
            state.withLock { $0.closed = closed }
            lock.broadcast()
        }
    }

    /// The size in events of every group commit that appended, in order.
    package var recordedCommitSizes: [Int] { state.withLock { $0.sizes } }

    package func beforeBatch() {
        lock.withLock {
            while state.withLock({ $0.closed }) { lock.wait() }
        }
    }

    package func committed(events: Int) { state.withLock { $0.sizes.append(events) } }
}

extension EventLog {
    /// Holds the writer before its next batch (`true`) or lets it go (`false`); the log must have
    /// been opened with a ``WriterGate`` as its writer probe.
    package func setWriterPaused(_ paused: Bool) { writerGate.setClosed(paused) }

    private var writerGate: WriterGate {
        guard let gate = configuration.writerProbe as? WriterGate else {
            preconditionFailure("open the log with a WriterGate as configuration.writerProbe")
        }
        return gate
    }
}
