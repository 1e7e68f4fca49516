import Foundation
import Synchronization

/// Wakes waiters when something changed (no value; waiters re-check their condition).
final class AsyncSignal: Sendable {
    /// Returns once `done()` is true (checked at every signal, and every 100 ms); throws `timedOut()`
    /// when `timeout` passes first, or what `done` throws.
    func wait(
        until done: () throws(ReplicationError) -> Bool, timeout: Duration, timedOut: () -> ReplicationError
    ) async throws(ReplicationError) {
        let deadline = ContinuousClock.now + timeout
        while try !done() {
            let now = ContinuousClock.now
            guard now < deadline else { throw timedOut() }
            await wait(timeout: min(deadline - now, .milliseconds(100)))
        }
    }

    private let waiters = Mutex<[UInt64: CheckedContinuation<Void, Never>]>([:])
    private let nextID = Atomic<UInt64>(0)

    /// Wakes every waiter.
    func signal() {
        let all = waiters.withLock { waiters in
            defer { waiters.removeAll() }
            return Array(waiters.values)
        }
        for waiter in all { waiter.resume() }
    }

    /// Returns at the next signal or after `timeout`.
    func wait(timeout: Duration) async {
        let id = nextID.add(1, ordering: .relaxed).newValue
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in self.waiters.withLock { $0[id] = continuation } }
            }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            // Whichever came first, the other must end: resume the continuation if still registered.
            if let continuation = self.waiters.withLock({ $0.removeValue(forKey: id) }) { continuation.resume() }
            group.cancelAll()
        }
    }
}
