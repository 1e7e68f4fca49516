import Synchronization

/// Tells waiting subscriptions that the log's head moved.
///
/// The writer calls ``publish(_:)`` after each commit, so a waiter that wakes can read what made it
/// wake. A waiter registers with the position it has read up to; if the head is already past it,
/// the wait returns at once. Both happen under one mutex, so no wake-up is lost between a reader
/// finding nothing new and its registration.
package final class HeadNotifier: Sendable {
    private struct State {
        var head: UInt64
        var closed = false
        var nextID = 0
        var waiters: [Int: (after: UInt64, continuation: CheckedContinuation<Void, Never>)] = [:]
        /// Ids whose task was cancelled before they registered.
        var cancelledEarly: Set<Int> = []
    }

    private let state: Mutex<State>

    package init(head: UInt64) {
        state = Mutex(State(head: head))
    }

    /// Records a new head and wakes every waiter it satisfies.
    package func publish(_ head: UInt64) {
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.head = head
            var ready: [CheckedContinuation<Void, Never>] = []
            for (id, waiter) in state.waiters where waiter.after < head {
                ready.append(waiter.continuation)
                state.waiters[id] = nil
            }
            return ready
        }
        for continuation in ready { continuation.resume() }
    }

    /// Wakes every waiter for good: the log is closing.
    package func close() {
        let all = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.closed = true
            let all = state.waiters.values.map(\.continuation)
            state.waiters.removeAll()
            return all
        }
        for continuation in all { continuation.resume() }
    }

    /// The last head published.
    package var currentHead: UInt64 { state.withLock { $0.head } }

    /// Whether ``close()`` was called.
    package var isClosed: Bool { state.withLock { $0.closed } }

    /// Returns once the head is past `position`, the log closes, or the task is cancelled.
    package func wait(after position: UInt64) async {
        let id = state.withLock { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if state.head > position || state.closed || state.cancelledEarly.remove(id) != nil {
                        return true
                    }
                    state.waiters[id] = (position, continuation)
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
                if let waiter = state.waiters.removeValue(forKey: id) { return waiter.continuation }
                state.cancelledEarly.insert(id)
                return nil
            }
            continuation?.resume()
        }
        // A cancellation that came after the wait ended leaves its id behind; drop it.
        _ = state.withLock { $0.cancelledEarly.remove(id) }
    }
}
