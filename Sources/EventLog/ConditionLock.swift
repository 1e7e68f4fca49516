#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A mutex with a condition variable, for the writer thread to sleep on until work arrives.
///
/// `@unchecked Sendable`: it holds only the pthread objects, allocated once and never moved; they are
/// made to be shared between threads.
package final class ConditionLock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    package init() {
        mutex = .allocate(capacity: 1)
        condition = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        condition.deallocate()
    }

    /// Runs `body` with the mutex held.
    @inline(__always)
    package func withLock<R>(_ body: () throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Waits for ``signal()``; call only with the mutex held (inside ``withLock(_:)``).
    package func wait() {
        pthread_cond_wait(condition, mutex)
    }

    /// Wakes one waiter.
    package func signal() {
        pthread_cond_signal(condition)
    }

    /// Wakes every waiter (for a lock several threads wait on, each for its own condition).
    package func broadcast() {
        pthread_cond_broadcast(condition)
    }
}
