import EventLog
import Foundation
import LMDB
import ShareLedgerBaselines
import Synchronization
import TestSupport
import Testing

/// The documented way to catch one code: `catch LedgerError.Code.wrongExpectedVersion`.
private func matchesWrongExpectedVersion(_ result: Result<AppendResult, LedgerError>) -> Bool {
    do {
        _ = try result.get() as AppendResult
        return false
    } catch LedgerError.Code.wrongExpectedVersion {
        return true
    } catch {
        return false
    }
}

extension Result where Failure == LedgerError {
    init(catching body: () async throws(LedgerError) -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}

@Suite("Event log")
struct EventLogTests {
    @Test("appended events read back with their envelope, from position 1")
    func appendAndRead() async throws {
        let dir = TemporaryDirectory()
        let clock = FixedClock(micros: 1_700_000_000_123_456)
        let log = try EventLog.open(LogFixtures.configuration(dir.path, clock: clock))
        let correlation = UUID()
        let metadata = CommandMetadata(
            container: LogFixtures.container, actor: "_alice", correlationID: correlation, causationID: nil)
        let result = try await log.append(
            [LogFixtures.draft("one"), LogFixtures.draft("two", type: "shareledger.test.Other")], to: "share/a",
            expectedVersion: .noStream, metadata: metadata)
        #expect(result.positions == LogPosition(1)...LogPosition(2))
        #expect(result.streamVersion == 2)
        #expect(!result.wasAlreadyApplied)

        let first = try #require(try log.event(at: 1))
        #expect(first.position == 1)
        #expect(first.recordedAtMicros == 1_700_000_000_123_456)
        #expect(first.container == LogFixtures.container)
        #expect(first.actor == "_alice")
        #expect(first.commandID == metadata.commandID)
        #expect(first.correlationID == correlation)
        #expect(first.causationID == nil)
        #expect(first.stream == "share/a")
        #expect(first.streamVersion == 1)
        #expect(first.eventType == "shareledger.test.Note")
        #expect(first.payload == Array("one".utf8))
        #expect(first.previousHash == .zero)

        let second = try #require(try log.event(at: 2))
        #expect(second.streamVersion == 2)
        #expect(second.eventType == "shareledger.test.Other")
        #expect(second.previousHash == first.hash)
        #expect(try log.event(at: 3) == nil)
        #expect(try log.head() == LogHead(position: 2, hash: second.hash, recordedAtMicros: 1_700_000_000_123_456))
        #expect(try log.events(after: .start, limit: 10).map(\.position) == [1, 2])
        #expect(try log.streamVersion("share/a", container: LogFixtures.container) == 2)
        #expect(try log.streamPositions("share/a", container: LogFixtures.container) == [1, 2])
        #expect(try log.streamPositions("share/a", container: LogFixtures.container, after: 1) == [2])
        #expect(try log.streamVersion("share/a", container: "iCloud.other") == 0)
        await log.close()
    }

    @Test("64 concurrent appenders get gapless positions, each its own", .timeLimit(.minutes(5)))
    func concurrentAppendersGetGaplessPositions() async throws {
        let dir = TemporaryDirectory()
        let log = try EventLog.open(LogFixtures.configuration(dir.path, durability: .durable))
        let perCaller = 40
        let results = try await withThrowingTaskGroup(of: [(UUID, LogPosition)].self) { group in
            for caller in 0..<64 {
                group.addTask {
                    var mine: [(UUID, LogPosition)] = []
                    for index in 0..<perCaller {
                        let metadata = LogFixtures.metadata("caller-\(caller)")
                        let result = try await log.append(
                            [LogFixtures.draft("\(caller)/\(index)")], to: "stream-\(caller % 8)", metadata: metadata)
                        #expect(result.positions.count == 1)
                        mine.append((metadata.commandID, result.positions.lowerBound))
                    }
                    return mine
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        let positions = results.map { $0.1.rawValue }.sorted()
        #expect(positions == Array(1...UInt64(64 * perCaller)), "positions are gapless and no two callers share one")
        for (commandID, position) in results {
            #expect(try log.event(at: position)?.commandID == commandID)
        }
        for stream in 0..<8 {
            #expect(try log.streamVersion("stream-\(stream)", container: LogFixtures.container) == UInt64(8 * perCaller))
        }
        #expect(try log.verifyChain().isValid)
        await log.close()
    }

    @Test("a retried command id appends nothing and returns the first outcome")
    func idempotentRetry() async throws {
        let dir = TemporaryDirectory()
        let log = try EventLog.open(LogFixtures.configuration(dir.path))
        let metadata = LogFixtures.metadata()
        let first = try await log.append([LogFixtures.draft("a"), LogFixtures.draft("b")], to: "s", metadata: metadata)
        try await log.append([LogFixtures.draft("other")], to: "s", metadata: LogFixtures.metadata())
        // Same id, even with other events and an expectation that no longer holds: the first outcome.
        let retry = try await log.append(
            [LogFixtures.draft("changed")], to: "s", expectedVersion: .noStream, metadata: metadata)
        #expect(retry.wasAlreadyApplied)
        #expect(retry.positions == first.positions)
        #expect(retry.streamVersion == first.streamVersion)
        #expect(try log.head().position == 3)
        // The same id in another container is another command.
        var elsewhere = metadata
        elsewhere.container = "iCloud.com.example.elsewhere"
        let other = try await log.append([LogFixtures.draft("c")], to: "s", metadata: elsewhere)
        #expect(!other.wasAlreadyApplied)
        #expect(other.positions.lowerBound == 4)
        await log.close()
    }

    @Test("duplicates of one command id inside one group commit are applied once")
    func duplicatesInOneBatch() async throws {
        let dir = TemporaryDirectory()
        let log = try LogFixtures.batchingLog(dir.path)
        let metadata = LogFixtures.metadata()
        let outcomes = await appendInOneBatch(log, count: 10) { _ throws(LedgerError) in
            try await log.append([LogFixtures.draft("x")], to: "s", metadata: metadata)
        }
        let results = try outcomes.values.map { try $0.get() }
        #expect(log.commitSizes() == [1])
        #expect(results.filter { !$0.wasAlreadyApplied }.count == 1)
        #expect(Set(results.map(\.positions)).count == 1)
        #expect(try log.head().position == 1)
        await log.close()
    }

    @Test("expected versions: any, noStream, exists, exact; a conflict is a typed error that writes nothing")
    func expectedVersions() async throws {
        let dir = TemporaryDirectory()
        let log = try EventLog.open(LogFixtures.configuration(dir.path))
        let stream = "share/x"
        await #expect(throws: LedgerError.self) {
            try await log.append([LogFixtures.draft("a")], to: stream, expectedVersion: .exists, metadata: LogFixtures.metadata())
        }
        try await log.append([LogFixtures.draft("a")], to: stream, expectedVersion: .noStream, metadata: LogFixtures.metadata())
        let second: Result<AppendResult, LedgerError> = await Result(catching: { () async throws(LedgerError) -> AppendResult in
            try await log.append([LogFixtures.draft("b")], to: stream, expectedVersion: .noStream, metadata: LogFixtures.metadata())
        })
        #expect(matchesWrongExpectedVersion(second), "`catch LedgerError.Code.wrongExpectedVersion` matches the conflict")
        let conflict = await #expect(throws: LedgerError.self) {
            try await log.append([LogFixtures.draft("b")], to: stream, expectedVersion: .exact(5), metadata: LogFixtures.metadata())
        }
        #expect(conflict?.code == .wrongExpectedVersion)
        #expect(conflict?.message.contains("version 1") == true)
        try await log.append([LogFixtures.draft("b")], to: stream, expectedVersion: .exact(1), metadata: LogFixtures.metadata())
        try await log.append([LogFixtures.draft("c")], to: stream, expectedVersion: .exists, metadata: LogFixtures.metadata())
        try await log.append([LogFixtures.draft("d")], to: stream, expectedVersion: .any, metadata: LogFixtures.metadata())
        #expect(try log.streamVersion(stream, container: LogFixtures.container) == 4)
        #expect(try log.head().position == 4)
        await log.close()
    }

    @Test("a refused command in a group commit leaves no trace and does not disturb the others")
    func failuresDoNotDisturbTheBatch() async throws {
        let dir = TemporaryDirectory()
        let log = try LogFixtures.batchingLog(dir.path)
        let outcomes = await appendInOneBatch(log, count: 100) { index throws(LedgerError) in
            // Odd commands expect a version their new stream cannot have.
            let expected: ExpectedVersion = index.isMultiple(of: 2) ? .noStream : .exact(7)
            return try await log.append(
                [LogFixtures.draft("\(index)")], to: "stream-\(index)", expectedVersion: expected,
                metadata: LogFixtures.metadata())
        }
        #expect(log.commitSizes() == [50], "all 100 commands were decided in one group commit")
        var positions: [UInt64] = []
        for (index, outcome) in outcomes {
            switch outcome {
            case .success(let result):
                #expect(index.isMultiple(of: 2))
                positions.append(result.positions.lowerBound.rawValue)
            case .failure(let error):
                #expect(!index.isMultiple(of: 2))
                #expect(error.code == .wrongExpectedVersion)
                #expect(try log.streamVersion("stream-\(index)", container: LogFixtures.container) == 0)
            }
        }
        #expect(positions.sorted() == Array(1...50))
        #expect(try log.statistics().commands == 50, "refused commands record no command id")
        #expect(try log.verifyChain().isValid)
        await log.close()
    }

    @Test("input outside the limits is refused with a typed error and changes nothing")
    func validation() async throws {
        let dir = TemporaryDirectory()
        let log = try EventLog.open(LogFixtures.configuration(dir.path))
        let cases: [([EventDraft], String, CommandMetadata, LedgerError.Code)] = [
            ([], "s", LogFixtures.metadata(), .invalidArguments),
            ([LogFixtures.draft("a")], "", LogFixtures.metadata(), .invalidArguments),
            ([LogFixtures.draft("a")], String(repeating: "x", count: 201), LogFixtures.metadata(), .invalidArguments),
            ([LogFixtures.draft("a")], "bad\u{0}name", LogFixtures.metadata(), .invalidArguments),
            ([LogFixtures.draft("a")], "s", CommandMetadata(container: "", actor: "a"), .invalidArguments),
            ([LogFixtures.draft("a")], "s", CommandMetadata(container: "c", actor: ""), .invalidArguments),
            ([LogFixtures.draft("a", type: "")], "s", LogFixtures.metadata(), .invalidArguments),
            ([EventDraft(type: "t", schemaVersion: 0, payload: [])], "s", LogFixtures.metadata(), .invalidArguments),
            ([EventDraft(type: "t", payload: [UInt8](repeating: 0, count: EventLog.Limits.maxPayloadBytes + 1))],
             "s", LogFixtures.metadata(), .limitExceeded),
            (Array(repeating: LogFixtures.draft("a"), count: EventLog.Limits.maxEventsPerCommand + 1), "s",
             LogFixtures.metadata(), .limitExceeded),
        ]
        for (events, stream, metadata, code) in cases {
            let error = await #expect(throws: LedgerError.self) {
                try await log.append(events, to: stream, metadata: metadata)
            }
            #expect(error?.code == code, "stream \(stream.prefix(10)), \(events.count) events")
            #expect(error?.message.isEmpty == false)
        }
        #expect(try log.head().position == 0)
        #expect(try log.statistics().commands == 0)
        await log.close()
    }

    @Test("reopening keeps events, head, stream versions and command ids")
    func reopenKeepsEverything() async throws {
        let dir = TemporaryDirectory()
        let metadata = LogFixtures.metadata()
        let head: LogHead
        do {
            let log = try EventLog.open(LogFixtures.configuration(dir.path, durability: .durable))
            try await log.append([LogFixtures.draft("a"), LogFixtures.draft("b")], to: "s", metadata: metadata)
            try await log.append([LogFixtures.draft("c")], to: "t", metadata: LogFixtures.metadata())
            head = try log.head()
            await log.close()
            await #expect(throws: LedgerError.self) {
                try await log.append([LogFixtures.draft("late")], to: "s", metadata: LogFixtures.metadata())
            }
        }
        let log = try EventLog.open(LogFixtures.configuration(dir.path, durability: .durable))
        #expect(try log.head() == head)
        #expect(try log.streamVersion("s", container: LogFixtures.container) == 2)
        let retry = try await log.append([LogFixtures.draft("a")], to: "s", metadata: metadata)
        #expect(retry.wasAlreadyApplied)
        let next = try await log.append([LogFixtures.draft("d")], to: "s", expectedVersion: .exact(2), metadata: LogFixtures.metadata())
        #expect(next.positions.lowerBound == 4)
        #expect(try log.event(at: 4)?.previousHash == head.hash)
        #expect(try log.verifyChain().isValid)
        await log.close()
    }

    @Test("recorded times never go backwards, even when the clock does")
    func recordedTimesAreMonotonic() async throws {
        let dir = TemporaryDirectory()
        do {
            let log = try EventLog.open(LogFixtures.configuration(dir.path, clock: FixedClock(micros: 2_000_000)))
            try await log.append([LogFixtures.draft("a")], to: "s", metadata: LogFixtures.metadata())
            await log.close()
        }
        let log = try EventLog.open(LogFixtures.configuration(dir.path, clock: FixedClock(micros: 1_000_000)))
        try await log.append([LogFixtures.draft("b")], to: "s", metadata: LogFixtures.metadata())
        #expect(try log.event(at: 2)?.recordedAtMicros == 2_000_000)
        await log.close()
    }

    @Test("a 64 KiB map grows while 200k events are appended")
    func growsFromTinyMap() async throws {
        let dir = TemporaryDirectory()
        var configuration = LogFixtures.configuration(dir.path)
        configuration.initialMapSize = 64 << 10
        let log = try EventLog.open(configuration)
        let initial = try log.statistics().mapSizeBytes
        let payload = [UInt8](repeating: 0x5A, count: 200)
        let batch = Array(repeating: EventDraft(type: "shareledger.test.Bulk", payload: payload), count: 1_000)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<4 {
                group.addTask {
                    for _ in 0..<50 {
                        try await log.append(batch, to: "bulk-\(writer)", metadata: LogFixtures.metadata())
                    }
                }
            }
            try await group.waitForAll()
        }
        let stats = try log.statistics()
        #expect(initial <= 64 << 10)
        #expect(stats.events == 200_000)
        #expect(stats.mapSizeBytes > stats.usedBytes)
        #expect(stats.usedBytes > 40 << 20)
        let verification = try log.verifyChain()
        #expect(verification.isValid)
        #expect(verification.eventsChecked == 200_000)
        await log.close()
    }

    @Test("at the maximum size an append fails with storageFull, stores nothing, and resumes after the limit is raised")
    func storageFull() async throws {
        let dir = TemporaryDirectory()
        var configuration = LogFixtures.configuration(dir.path)
        configuration.initialMapSize = 64 << 10
        configuration.maximumMapSize = 512 << 10
        let big = EventDraft(type: "shareledger.test.Big", payload: [UInt8](repeating: 1, count: 64 << 10))
        do {
            let log = try EventLog.open(configuration)
            var stored = 0
            var failure: LedgerError?
            while failure == nil && stored < 100 {
                do {
                    try await log.append([big], to: "s", metadata: LogFixtures.metadata())
                    stored += 1
                } catch {
                    failure = error
                }
            }
            #expect(failure?.code == .storageFull)
            #expect(failure?.message.contains("maximum size") == true)
            #expect(stored > 0)
            let head = try log.head()
            #expect(head.position.rawValue == UInt64(stored))
            #expect(try log.verifyChain().isValid)
            await log.close()
        }
        configuration.maximumMapSize = 16 << 20
        let log = try EventLog.open(configuration)
        try await log.append([big], to: "s", metadata: LogFixtures.metadata())
        #expect(try log.verifyChain().isValid)
        await log.close()
    }

    @Test("a read-only ledger reads and refuses appends")
    func readOnly() async throws {
        let dir = TemporaryDirectory()
        do {
            let log = try EventLog.open(LogFixtures.configuration(dir.path))
            try await log.append([LogFixtures.draft("a")], to: "s", metadata: LogFixtures.metadata())
            await log.close()
        }
        var configuration = LogFixtures.configuration(dir.path)
        configuration.readOnly = true
        let log = try EventLog.open(configuration)
        #expect(try log.head().position == 1)
        let error = await #expect(throws: LedgerError.self) {
            try await log.append([LogFixtures.draft("b")], to: "s", metadata: LogFixtures.metadata())
        }
        #expect(error?.code == .readOnly)
        await log.close()
    }

    @Test("another process appending to the same ledger (and growing its map) does not break this one")
    func secondProcessWriter() async throws {
        let dir = TemporaryDirectory()
        var configuration = LogFixtures.configuration(dir.path)
        configuration.initialMapSize = 64 << 10
        let log = try EventLog.open(configuration)
        try await log.append([LogFixtures.draft("before")], to: "s", metadata: LogFixtures.metadata())
        // A read before: its handles wait idle, to be renewed by the read after the child.
        #expect(try log.head().position == 1)
        // The CLI opens the same ledger with a 64 MiB map: LMDB records the larger size, and this
        // process's next transaction meets MDB_MAP_RESIZED (a read first: the renewal meets it).
        let child = try await runProduct("share-ledger", ["demo", "--path", dir.path, "--events", "3000", "--writers", "4"])
        #expect(child.status == 0, "\(child.stderr)")
        #expect(try log.head().position == 3_001)
        let result = try await log.append([LogFixtures.draft("after")], to: "s", metadata: LogFixtures.metadata())
        #expect(result.positions.lowerBound == 3_002)
        #expect(try log.streamVersion("s", container: LogFixtures.container) == 2)
        let verification = try log.verifyChain()
        #expect(verification.isValid)
        #expect(verification.eventsChecked == 3_002)
        await log.close()
    }
}
