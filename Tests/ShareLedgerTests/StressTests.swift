import Foundation
import ShareLedger
import ShareLedgerAudit
import Synchronization
import TestSupport
import Testing

/// 64 writers, 16 readers, a live subscription and the residual-task worker at once, for a bounded
/// time: positions stay gapless, every read sees a consistent snapshot, and the subscription misses
/// no commit (no lost wake-up).
@Suite("Concurrency stress")
struct StressTests {
    @Test("64 writers, 16 readers, a subscription and the worker", .timeLimit(.minutes(5)))
    func stress() async throws {
        let f = try await SharingFixture(worker: ResidualTaskWorker.Configuration(pollInterval: .milliseconds(50)))
        let share = try await f.makeHierarchy()
        _ = try await f.alice.setPublicPermission(.readOnly, for: share.url)
        let startHead = try f.ledger.log.head().position
        let deadline = ContinuousClock.now + .milliseconds(1_500)

        // The subscription: every position after the start, once, in order.
        let seen = Box<[UInt64]>([])
        let subscription = Task {
            for try await event in f.ledger.log.events(after: startHead) {
                seen.withLock { $0.append(event.position.rawValue) }
            }
        }
        let rounds = Counter()
        let writersDone = Counter()
        let inconsistencies = Counter()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<64 {
                group.addTask {
                    var index = 0
                    // Until the deadline, and at least two rounds each however slow the machine is:
                    // the outcome must not depend on how many rounds fit in the time.
                    defer { writersDone.increment() }
                    while index < 2 || ContinuousClock.now < deadline {
                        index += 1
                        let name = "_w\(writer)_\(index)"
                        try await f.ledger.registerUser(name, in: SharingFixture.container)
                        let user = f.as_(name)
                        if index % 2 == 0 {
                            let metadata = try await user.shareMetadata(for: share.url)
                            do {
                                _ = try await user.accept(metadata)
                            } catch LedgerError.Code.tooManyParticipants {
                                // The share is full (100): the expected refusal once enough have joined.
                            }
                        }
                        rounds.increment()
                    }
                }
            }
            for _ in 0..<16 {
                group.addTask {
                    // As long as any writer writes (at least once).
                    repeat {
                        // One read transaction: the counters agree with each other.
                        let stats = try f.ledger.statistics()
                        if stats.acceptedParticipants > stats.participants || stats.headPosition != stats.events {
                            inconsistencies.increment()
                        }
                        let visible = try f.alice.share(for: share.url)
                        if visible.participants.contains(where: { $0.acceptanceStatus == .pending && $0.role == .publicUser }) {
                            inconsistencies.increment()
                        }
                        await Task.yield()
                    } while writersDone.value < 64
                }
            }
            try await group.waitForAll()
        }
        try await f.ledger.waitForResidualTasks(timeout: .seconds(120))
        let finalHead = try f.ledger.log.head().position.rawValue
        // The subscription catches up with the final head.
        let caughtUp = ContinuousClock.now + .seconds(120)
        while seen.withLock({ $0.last ?? 0 }) < finalHead && ContinuousClock.now < caughtUp {
            try await Task.sleep(for: .milliseconds(5))
        }
        subscription.cancel()
        let positions = seen.withLock { $0 }
        #expect(positions == Array((startHead.rawValue + 1)..<(finalHead + 1)), "the subscription skipped or repeated a position")
        #expect(inconsistencies.value == 0)
        let stats = try f.ledger.statistics()
        #expect(stats.events == finalHead)
        #expect(stats.pendingResidualTasks == 0)
        #expect(stats.participantZones == stats.acceptedParticipants)
        #expect(try f.ledger.log.verifyChain().isValid)
        #expect(try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("audit")).ok)
        // Every writer got through its rounds (the work was really concurrent).
        #expect(rounds.value >= 128)
        await f.ledger.close()
    }
}

/// A value behind a mutex that tasks can share.
final class Box<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<R: Sendable>(_ body: (inout Value) -> R) -> R { mutex.withLock { body(&$0) } }
}
