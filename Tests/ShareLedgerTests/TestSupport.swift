import Foundation
import ShareLedger
import Synchronization
import TestSupport

/// A thread-safe counter for tests that watch a task from outside.
final class Counter: Sendable {
    private let count = Mutex(0)
    func increment() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}

/// A clock that starts at a fixed instant and moves 1 ms each time it is read, so tests are deterministic.
final class SteppingClock: LedgerClock, @unchecked Sendable {
    // @unchecked: `now` is guarded by `lock`.
    private let lock = NSLock()
    private var now: Int64

    init(startMicros: Int64 = 1_700_000_000_000_000) { now = startMicros }

    func nowMicros() -> Int64 {
        lock.lock()
        defer { lock.unlock() }
        now += 1_000
        return now
    }
}

/// A clock that always says the same instant.
struct FixedClock: LedgerClock {
    var micros: Int64
    func nowMicros() -> Int64 { micros }
}

enum Fixtures {
    static let container = "iCloud.com.example.tests"

    static func configuration(
        _ path: String, durability: Durability = .unsafeNoSync, clock: any LedgerClock = SteppingClock()
    ) -> ShareLedger.Configuration {
        ShareLedger.Configuration(path: path, durability: durability, clock: clock)
    }

    static func draft(_ text: String, type: String = "shareledger.test.Note") -> EventDraft {
        EventDraft(type: type, payload: Array(text.utf8))
    }

    static func metadata(_ actor: String = "tester", id: UUID = UUID()) -> CommandMetadata {
        CommandMetadata(commandID: id, container: container, actor: actor)
    }
}

extension Fixtures {
    /// Opens a log that records the size of each group commit.
    static func batchingLog(_ path: String) throws -> EventLog {
        var configuration = configuration(path)
        configuration.recordsCommitSizes = true
        return try EventLog.open(configuration.log)
    }
}

/// Submits `count` appends (made by `append(index)`) concurrently while the writer is held, then lets
/// the writer go, so that all of them are decided in one group commit. Returns each outcome by index.
func appendInOneBatch(
    _ log: EventLog, count: Int, _ append: @escaping @Sendable (Int) async throws(LedgerError) -> AppendResult
) async -> [Int: Result<AppendResult, LedgerError>] {
    log.setWriterPaused(true)
    return await withTaskGroup(of: (Int, Result<AppendResult, LedgerError>).self) { group in
        for index in 0..<count {
            group.addTask {
                do throws(LedgerError) {
                    return (index, .success(try await append(index)))
                } catch {
                    return (index, .failure(error))
                }
            }
        }
        while log.queuedCommands < count { try? await Task.sleep(for: .milliseconds(1)) }
        log.setWriterPaused(false)
        return await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
    }
}
