import Foundation

/// A `flock` on the ledger directory, held by every process that has the ledger open (shared) and,
/// briefly, by the one that moves its derived databases into the companion (exclusive): database
/// handles of another process would point at the databases that move.
///
/// `@unchecked Sendable`: the descriptor is set once and closed once, under `lock`.
final class DirectoryLock: @unchecked Sendable {
    private let lock = NSLock()
    private var descriptor: Int32

    /// Opens `path` and takes the shared lock (waiting for an exclusive holder); a directory that
    /// cannot be opened is not locked (nothing to move there either).
    init(path: String) {
        descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if descriptor >= 0 { _ = flock(descriptor, LOCK_SH) }
    }

    deinit { release() }

    /// Tries to hold the lock exclusively: true when no other process has the ledger open. On
    /// failure the shared lock is taken again (a conversion may drop it).
    func tryExclusive() -> Bool {
        lock.withLock {
            guard descriptor >= 0 else { return false }
            if flock(descriptor, LOCK_EX | LOCK_NB) == 0 { return true }
            _ = flock(descriptor, LOCK_SH)
            return false
        }
    }

    /// Goes back to the shared lock.
    func shared() {
        lock.withLock {
            if descriptor >= 0 { _ = flock(descriptor, LOCK_SH) }
        }
    }

    /// Releases the lock (idempotent).
    func release() {
        lock.withLock {
            if descriptor >= 0 { close(descriptor) }
            descriptor = -1
        }
    }
}
