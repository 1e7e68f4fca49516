import ShareLedger
@testable import ShareLedgerReplication
import Testing

/// The replication loops' retry schedule: doubling from the first wait, held at the cap, and back
/// to the first wait after a reset.
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
}
