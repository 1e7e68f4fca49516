import EventLog
import Foundation
import Synchronization

/// A thread-safe counter for tests that watch a task from outside.
package final class Counter: Sendable {
    private let count = Mutex(0)
    package init() {}
    package func increment() { count.withLock { $0 += 1 } }
    package var value: Int { count.withLock { $0 } }
}

/// A clock that starts at a fixed instant and moves 1 ms each time it is read, so tests are deterministic.
package final class SteppingClock: LedgerClock, Sendable {
    private let now: Mutex<Int64>

    package init(startMicros: Int64 = 1_700_000_000_000_000) { now = Mutex(startMicros) }

    package func nowMicros() -> Int64 {
        now.withLock { now in
            now += 1_000
            return now
        }
    }
}

/// A clock that always says the same instant.
package struct FixedClock: LedgerClock {
    package var micros: Int64
    package init(micros: Int64) { self.micros = micros }
    package func nowMicros() -> Int64 { micros }
}

/// What tests of the event log append: a container, drafts and command metadata, and logs opened
/// on a temporary directory.
package enum LogFixtures {
    package static let container = "iCloud.com.example.tests"

    /// A log at `path` that flushes nothing (the tests do not cut power), on a stepping clock.
    package static func configuration(
        _ path: String, durability: Durability = .unsafeNoSync, clock: any LedgerClock = SteppingClock()
    ) -> EventLog.Configuration {
        EventLog.Configuration(path: path, durability: durability, clock: clock)
    }

    package static func draft(_ text: String, type: String = "shareledger.test.Note") -> EventDraft {
        EventDraft(type: type, payload: Array(text.utf8))
    }

    package static func metadata(_ actor: String = "tester", id: UUID = UUID()) -> CommandMetadata {
        CommandMetadata(commandID: id, container: container, actor: actor)
    }

    /// Opens a log whose writer a ``WriterGate`` holds on request and which records the size of
    /// each group commit.
    package static func batchingLog(_ path: String) throws -> EventLog {
        var configuration = configuration(path)
        configuration.writerProbe = WriterGate()
        return try EventLog.open(configuration)
    }
}

/// Submits `count` appends (made by `append(index)`) concurrently while the writer is held, then lets
/// the writer go, so that all of them are decided in one group commit. Returns each outcome by index.
/// The log must have been opened with a ``WriterGate`` (``LogFixtures/batchingLog(_:)``).
package func appendInOneBatch(
    _ log: EventLog, count: Int, _ append: @escaping @Sendable (Int) async throws(LedgerError) -> AppendResult
) async -> [Int: Result<AppendResult, LedgerError>] {
    log.setWriterPaused(true)
    return await withTaskGroup(of: (Int, Result<AppendResult, LedgerError>).self) { group in
        for index in 0..<count {
            group.addTask {
                // The outcome first, then the tuple: built in one expression inside the typed-throws
                // `do`, the optimizer (Swift 6.3.1, -O) returned garbage indexes.
                let outcome: Result<AppendResult, LedgerError>
                do throws(LedgerError) {
                    outcome = .success(try await append(index))
                } catch {
                    outcome = .failure(error)
                }
                return (index, outcome)
            }
        }
        while log.queuedCommands < count { try? await Task.sleep(for: .milliseconds(1)) }
        log.setWriterPaused(false)
        return await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
    }
}
