/// Exponential backoff between retries of a NATS operation: the first wait is `initial`, each wait
/// doubles the next, never beyond `cap`. The one retry schedule of the replication loops.
struct Backoff: Sendable {
    /// The first wait, and the wait after ``reset()``.
    let initial: Duration
    /// The longest wait.
    let cap: Duration
    /// The wait ``wait()`` sleeps for next.
    private(set) var next: Duration

    init(initial: Duration = .milliseconds(50), cap: Duration) {
        self.initial = initial
        self.cap = cap
        self.next = min(initial, cap)
    }

    /// Whether the next wait ends before `deadline`.
    func endsBefore(_ deadline: ContinuousClock.Instant) -> Bool { ContinuousClock.now + next < deadline }

    /// The wait to sleep for now; doubles the next one, up to ``cap``.
    mutating func advance() -> Duration {
        let delay = next
        next = min(next * 2, cap)
        return delay
    }

    /// Sleeps for the next wait (returning early when the task is cancelled) and doubles it.
    mutating func wait() async {
        try? await Task.sleep(for: advance())
    }

    /// Starts again from ``initial`` (after a success).
    mutating func reset() { next = min(initial, cap) }
}
