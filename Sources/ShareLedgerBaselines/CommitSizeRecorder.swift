import EventLog
import Synchronization

/// Records the size (in events) of every group commit of a ledger, for replaying the same commit
/// pattern against raw LMDB (``RawReplayer``). Install it as the ledger's writer probe
/// (`configuration.writerProbe`).
package final class CommitSizeRecorder: WriterProbe {
    private let sizes = Mutex<[Int]>([])

    package init() {}

    package func committed(events: Int) { sizes.withLock { $0.append(events) } }

    /// The sizes so far, in commit order.
    package var all: [Int] { sizes.withLock { $0 } }
}

/// A writer probe that keeps the size of every group commit (``CommitSizeRecorder``, or a test's
/// probe that also does other things).
package protocol CommitSizeRecording: WriterProbe {
    /// The sizes so far, in commit order.
    var recordedCommitSizes: [Int] { get }
}

extension CommitSizeRecorder: CommitSizeRecording {
    package var recordedCommitSizes: [Int] { all }
}

extension EventLog {
    /// The number of events of each group commit so far, when the log was opened with a
    /// ``CommitSizeRecording`` probe (`configuration.writerProbe`); empty otherwise.
    package func commitSizes() -> [Int] {
        (configuration.writerProbe as? any CommitSizeRecording)?.recordedCommitSizes ?? []
    }
}
