#if canImport(Glibc)
    import Glibc
#else
    import Darwin
#endif

/// Exponential backoff between retries, the package's one retry schedule (the replication loops,
/// the residual-task worker, the commands that wait through a leader election), and the one
/// retry loop (``retry(until:if:_:onRetry:)``, ``retryBlocking(until:if:_:)``).
///
/// The first wait is `initial`; each wait doubles the next, never beyond `cap` (a cap below
/// `initial` wins). With a random source (`jitter`), every wait is scaled by a factor in [0.5, 1)
/// drawn from it, so that many callers retrying the same failure spread out; tests inject a seeded
/// source to get the same waits on every run.
package struct Backoff: Sendable {
    /// The first wait, and the wait after ``reset()``.
    package let initial: Duration
    /// The longest wait (before jitter).
    package let cap: Duration
    /// 64 random bits per wait, for the jitter; nil for none.
    private let jitter: (@Sendable () -> UInt64)?
    /// Waits taken since the start or the last ``reset()``.
    private var attempts = 0
    /// The wait ``wait()`` sleeps for next.
    package private(set) var next: Duration

    /// A schedule from `initial` doubling up to `cap`; with `jitter`, each wait scaled by a factor
    /// in [0.5, 1) drawn from it.
    package init(initial: Duration = .milliseconds(50), cap: Duration, jitter: (@Sendable () -> UInt64)? = nil) {
        self.initial = initial
        self.cap = cap
        self.jitter = jitter
        self.next = Self.delay(afterAttempts: 1, initial: initial, cap: cap, jitter: jitter)
    }

    /// The wait after the `attempts`-th failed attempt (from 1): `initial × 2^(attempts-1)`, at
    /// most `cap`, scaled by a factor in [0.5, 1) drawn from `jitter` when there is one. For
    /// callers that keep the attempt count themselves (the worker stores it with each task).
    package static func delay(
        afterAttempts attempts: Int, initial: Duration, cap: Duration, jitter: (@Sendable () -> UInt64)? = nil
    ) -> Duration {
        var delay = min(initial, cap)
        var doublings = max(0, attempts - 1)
        while doublings > 0 && delay < cap {
            delay = min(delay * 2, cap)
            doublings -= 1
        }
        guard let jitter else { return delay }
        // 53 random bits make a fraction in [0, 1); the factor is in [0.5, 1).
        let fraction = Double(jitter() >> 11) / Double(UInt64(1) << 53)
        return delay * (0.5 + fraction / 2)
    }

    /// Whether the next wait ends before `deadline`.
    package func endsBefore(_ deadline: ContinuousClock.Instant) -> Bool { ContinuousClock.now + next < deadline }

    /// The wait to sleep for now; the next one doubles, up to ``cap``.
    package mutating func advance() -> Duration {
        let delay = next
        attempts += 1
        next = Self.delay(afterAttempts: attempts + 1, initial: initial, cap: cap, jitter: jitter)
        return delay
    }

    /// Sleeps for the next wait (returning early when the task is cancelled) and doubles it.
    package mutating func wait() async {
        try? await Task.sleep(for: advance())
    }

    /// Starts again from ``initial`` (after a success).
    package mutating func reset() {
        attempts = 0
        next = Self.delay(afterAttempts: 1, initial: initial, cap: cap, jitter: jitter)
    }

    /// Runs `body` until it returns, again after each failure that `isTransient` accepts while the
    /// next wait ends before `deadline`, sleeping for the wait in between (after telling `onRetry`
    /// the failure and the wait). Any other failure, and a transient one too late to wait for, is
    /// thrown as it is.
    package mutating func retry<T, E: Error>(
        until deadline: ContinuousClock.Instant,
        if isTransient: (E) -> Bool,
        _ body: () async throws(E) -> T,
        onRetry: (E, Duration) async -> Void = { _, _ in }
    ) async throws(E) -> T {
        while true {
            do {
                return try await body()
            } catch where isTransient(error) && endsBefore(deadline) {
                await onRetry(error, next)
                await wait()
            }
        }
    }

    /// ``retry(until:if:_:onRetry:)`` for code on a blocking thread (never the cooperative pool):
    /// the waits sleep the thread.
    package mutating func retryBlocking<T, E: Error>(
        until deadline: ContinuousClock.Instant, if isTransient: (E) -> Bool, _ body: () throws(E) -> T
    ) throws(E) -> T {
        while true {
            do {
                return try body()
            } catch where isTransient(error) && endsBefore(deadline) {
                Self.sleepThread(for: advance())
            }
        }
    }

    /// Sleeps the calling thread for `duration` (again after a signal interrupts the sleep).
    private static func sleepThread(for duration: Duration) {
        let (seconds, attoseconds) = duration.components
        var request = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }
}
