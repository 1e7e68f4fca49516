import EventLog
import Synchronization
import TestSupport
import Testing

/// The package's retry schedule: doubling from the first wait, held at the cap, back to the first
/// wait after a reset; with jitter, each wait in [half, all] of its unjittered value, the same for
/// the same random source.
@Suite struct BackoffTests {
    @Test func doublesUpToTheCapAndResets() {
        var backoff = Backoff(initial: .milliseconds(50), cap: .seconds(1))
        let waits = (0..<7).map { _ in backoff.advance() }
        #expect(waits == [50, 100, 200, 400, 800, 1_000, 1_000].map { Duration.milliseconds($0) })
        backoff.reset()
        #expect(backoff.next == .milliseconds(50))
        #expect(backoff.advance() == .milliseconds(50))
    }

    @Test func aCapBelowTheFirstWaitWins() {
        var backoff = Backoff(initial: .seconds(3), cap: .seconds(2))
        #expect(backoff.advance() == .seconds(2))
        #expect(backoff.advance() == .seconds(2))
    }

    @Test func fitsOnlyBeforeTheDeadline() {
        let backoff = Backoff(initial: .milliseconds(50), cap: .seconds(2))
        #expect(backoff.endsBefore(ContinuousClock.now + .seconds(60)))
        #expect(!backoff.endsBefore(ContinuousClock.now))
    }

    @Test func jitterScalesEachWaitIntoItsUpperHalfDeterministically() {
        func waits(seed: UInt64) -> [Duration] {
            let random = SplitMix64Source(seed: seed)
            var backoff = Backoff(initial: .milliseconds(100), cap: .seconds(60), jitter: { random.next() })
            return (0..<12).map { _ in backoff.advance() }
        }
        let plain = (1...12).map { Backoff.delay(afterAttempts: $0, initial: .milliseconds(100), cap: .seconds(60)) }
        let jittered = waits(seed: 7)
        #expect(jittered == waits(seed: 7))
        #expect(jittered != waits(seed: 8))
        for (wait, full) in zip(jittered, plain) {
            #expect(wait >= full / 2 && wait < full, "\(wait) against \(full)")
        }
        #expect(plain.last == .seconds(60))
    }

    /// A failure the retry loops are given: transient or not.
    struct Failure: Error, Equatable {
        var transient: Bool
    }

    @Test func retryRunsTheBodyAgainAfterTransientFailuresUntilItReturns() async throws {
        var backoff = Backoff(initial: .milliseconds(1), cap: .milliseconds(2))
        var attempts = 0
        var told: [Duration] = []
        let answer = try await backoff.retry(until: .now + .seconds(60), if: { $0.transient }) { () throws(Failure) in
            attempts += 1
            if attempts < 4 { throw Failure(transient: true) }
            return 42
        } onRetry: { _, wait in
            told.append(wait)
        }
        #expect(answer == 42)
        #expect(attempts == 4)
        #expect(told == [1, 2, 2].map { Duration.milliseconds($0) })
    }

    @Test func retryThrowsOtherFailuresAtOnceAndTransientOnesPastTheDeadline() async {
        var backoff = Backoff(initial: .milliseconds(1), cap: .milliseconds(1))
        var attempts = 0
        await #expect(throws: Failure(transient: false)) {
            try await backoff.retry(until: .now + .seconds(60), if: { $0.transient }) { () throws(Failure) in
                attempts += 1
                throw Failure(transient: false)
            }
        }
        #expect(attempts == 1)
        await #expect(throws: Failure(transient: true)) {
            try await backoff.retry(until: .now, if: { $0.transient }) { () throws(Failure) in
                attempts += 1
                throw Failure(transient: true)
            }
        }
        #expect(attempts == 2)
    }

    @Test func retryBlockingSleepsTheThreadBetweenAttempts() throws {
        var backoff = Backoff(initial: .milliseconds(1), cap: .milliseconds(1))
        var attempts = 0
        let started = ContinuousClock.now
        let answer = try backoff.retryBlocking(until: .now + .seconds(60), if: { $0.transient }) { () throws(Failure) in
            attempts += 1
            if attempts < 3 { throw Failure(transient: true) }
            return "done"
        }
        #expect(answer == "done")
        #expect(attempts == 3)
        #expect(ContinuousClock.now - started >= .milliseconds(2))
        #expect(throws: Failure(transient: false)) {
            try backoff.retryBlocking(until: .now + .seconds(60), if: { $0.transient }) { () throws(Failure) in
                throw Failure(transient: false)
            }
        }
    }

    @Test func delayAfterManyAttemptsStaysAtTheCap() {
        #expect(Backoff.delay(afterAttempts: 0, initial: .milliseconds(100), cap: .seconds(60)) == .milliseconds(100))
        #expect(Backoff.delay(afterAttempts: 1_000, initial: .milliseconds(100), cap: .seconds(60)) == .seconds(60))
    }
}

/// ``SplitMix64`` behind a lock, shareable with a `@Sendable` closure.
private final class SplitMix64Source: Sendable {
    private let generator: Mutex<SplitMix64>

    init(seed: UInt64) { generator = Mutex(SplitMix64(state: seed)) }

    func next() -> UInt64 { generator.withLock { $0.next() } }
}
