#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A process-wide reader/writer lock that orders transactions against map resizes.
///
/// LMDB may only change the map size when no transaction of any kind is open in the process
/// (`lmdb-notes.md`, rule 4). Every transaction holds this lock shared for its whole life; a resize
/// and `close` hold it exclusive. On Linux the lock prefers the exclusive side, so a resize is not
/// starved by a steady stream of short readers. Transactions never nest, so a thread never asks
/// for the shared side while it holds it (that would deadlock a writer-preferring lock).
///
/// `@unchecked Sendable`: the only state is the `pthread_rwlock_t`, allocated once, never moved,
/// and designed to be used from many threads at once.
package final class ResizeLock: @unchecked Sendable {
    private let lock: UnsafeMutablePointer<pthread_rwlock_t>

    package init() {
        lock = .allocate(capacity: 1)
        var attributes = pthread_rwlockattr_t()
        pthread_rwlockattr_init(&attributes)
        #if os(Linux)
        pthread_rwlockattr_setkind_np(&attributes, Int32(PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP))
        #endif
        let rc = pthread_rwlock_init(lock, &attributes)
        pthread_rwlockattr_destroy(&attributes)
        precondition(rc == 0, "pthread_rwlock_init failed: \(rc)")
    }

    deinit {
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }

    /// Runs `body` with the lock held shared (any number of holders at once).
    @inline(__always)
    package func withShared<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        pthread_rwlock_rdlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return try body()
    }

    /// Runs `body` with the lock held exclusive (no transaction open in the process).
    package func withExclusive<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        pthread_rwlock_wrlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return try body()
    }
}
