import EventLog
import Foundation
import TestSupport
import Testing

@Suite("Subscriptions")
struct SubscriptionTests {
    @Test("a subscription started mid-stream sees every later event once, in order, while appends go on",
          .timeLimit(.minutes(5)))
    func catchUpThenFollow() async throws {
        let dir = TemporaryDirectory()
        let log = try EventLog.open(LogFixtures.configuration(dir.path))
        for index in 1...100 {
            try await log.append([LogFixtures.draft("early \(index)")], to: "s", metadata: LogFixtures.metadata())
        }
        let appender = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<8 {
                    group.addTask {
                        for index in 0..<50 {
                            try await log.append(
                                [LogFixtures.draft("late \(writer)/\(index)"), LogFixtures.draft("pair")], to: "w\(writer)",
                                metadata: LogFixtures.metadata())
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        var subscription = log.events(after: 40)
        subscription.chunkSize = 16
        var seen: [UInt64] = []
        var previousHash: EventHash?
        for try await event in subscription {
            seen.append(event.position.rawValue)
            if let previousHash { #expect(event.previousHash == previousHash) }
            previousHash = event.hash
            if seen.count == 860 { break }
        }
        try await appender.value
        #expect(seen == Array(41...900))
        await log.close()
    }

    @Test("a waiting subscription ends when its task is cancelled or the log closes", .timeLimit(.minutes(5)))
    func endsOnCancelAndClose() async throws {
        let dir = TemporaryDirectory()
        let log = try EventLog.open(LogFixtures.configuration(dir.path))
        try await log.append([LogFixtures.draft("a")], to: "s", metadata: LogFixtures.metadata())
        let cancelledSeen = Counter()
        let cancelled = Task {
            for try await _ in log.events(after: .start) { cancelledSeen.increment() }
            return cancelledSeen.value
        }
        // Cancel once it has delivered the event and is (or is about to be) waiting for the next.
        while cancelledSeen.value < 1 { try await Task.sleep(for: .milliseconds(1)) }
        try await Task.sleep(for: .milliseconds(20))
        cancelled.cancel()
        #expect(try await cancelled.value == 1)

        let closingSeen = Counter()
        let closing = Task {
            for try await _ in log.events(after: .start) { closingSeen.increment() }
            return closingSeen.value
        }
        while closingSeen.value < 1 { try await Task.sleep(for: .milliseconds(1)) }
        try await Task.sleep(for: .milliseconds(20))
        await log.close()
        #expect(try await closing.value == 1)
    }
}
