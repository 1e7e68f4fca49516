#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A mutex with a condition variable, for the writer thread to sleep on until work arrives.
///
/// `@unchecked Sendable`: it holds only the pthread objects, allocated once and never moved; they are
/// made to be shared between threads.
///
/// Every pthread call's result is checked: a failure (an object not initialised or already
/// destroyed, a mutex destroyed while held, resources exhausted at creation) is a programming error,
/// so it stops the process with the call's name and error number rather than running on unguarded.
package final class ConditionLock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    package init() {
        mutex = .allocate(capacity: 1)
        condition = .allocate(capacity: 1)
        Self.check(pthread_mutex_init(mutex, nil), "pthread_mutex_init")
        Self.check(pthread_cond_init(condition, nil), "pthread_cond_init")
    }

    deinit {
        Self.check(pthread_cond_destroy(condition), "pthread_cond_destroy")
        Self.check(pthread_mutex_destroy(mutex), "pthread_mutex_destroy")
        mutex.deallocate()
        condition.deallocate()
    }

    /// Runs `body` with the mutex held.
    @inline(__always)
    package func withLock<R>(_ body: () throws -> R) rethrows -> R {
        Self.check(pthread_mutex_lock(mutex), "pthread_mutex_lock")
        defer { Self.check(pthread_mutex_unlock(mutex), "pthread_mutex_unlock") }
        return try body()
    }

    /// Waits for ``signal()``; call only with the mutex held (inside ``withLock(_:)``).
    package func wait() {
        Self.check(pthread_cond_wait(condition, mutex), "pthread_cond_wait")
    }

    /// Wakes one waiter.
    package func signal() {
        Self.check(pthread_cond_signal(condition), "pthread_cond_signal")
    }

    /// Wakes every waiter (for a lock several threads wait on, each for its own condition).
    package func broadcast() {
        Self.check(pthread_cond_broadcast(condition), "pthread_cond_broadcast")
    }

    /// Stops the process when a pthread call failed (`result` is its error number; 0 is success).
    @inline(__always)
    private static func check(_ result: Int32, _ call: StaticString) {
        precondition(result == 0, "ConditionLock: \(call) failed with error \(result)")
    }
}
