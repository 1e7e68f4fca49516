import Foundation
import ShareLedger
import Synchronization
import TestSupport
import Testing

/// The library tour of README.md, as written there (only the path differs).
@Suite("README")
struct ReadmeTests {
    @Test("the library tour runs", .timeLimit(.minutes(5)))
    func libraryTour() async throws {
        let dir = TemporaryDirectory()
        let log = try EventLog.open(.init(path: dir.child("share-ledger")))

        let metadata = CommandMetadata(container: "iCloud.com.example.notes", actor: "_alice")
        let result = try await log.append(
            [EventDraft(type: "example.NoteShared", payload: Array("hello".utf8))],
            to: "share/abc", expectedVersion: .noStream, metadata: metadata)
        #expect("\(result.positions) \(result.streamVersion)" == "1...1 1")

        let first = try log.event(at: result.positions.lowerBound)
        let page = try log.events(after: .start, limit: 100)
        #expect(first?.eventType == "example.NoteShared")
        #expect(page.count == 1)

        let seen = Counter()
        let follower = Task {
            for try await _ in log.events(after: .start) { seen.increment() }
            return seen.value
        }

        let check = try log.verifyChain()
        #expect(check.isValid)

        while seen.value < 1 { try await Task.sleep(for: .milliseconds(1)) }
        follower.cancel()
        #expect(try await follower.value == 1)
        await log.close()
    }
}
