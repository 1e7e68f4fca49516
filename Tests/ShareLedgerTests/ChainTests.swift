import ByteKeys
import Foundation
import LMDB
import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// Tampering with the stored log, as someone with write access to the files would, and checking that
/// the chain verification catches it.
@Suite("Hash chain")
struct ChainTests {
    /// Makes a ledger of `count` events and closes it.
    private func makeLedger(_ path: String, count: Int) async throws {
        let log = try EventLog.open(Fixtures.configuration(path).log)
        for index in 1...count {
            try await log.append([Fixtures.draft("event \(index)")], to: "s\(index % 3)", metadata: Fixtures.metadata())
        }
        await log.close()
    }

    /// Opens the raw LMDB environment of a closed ledger and runs `body` on its `log` database.
    private func tamper(_ path: String, _ body: (Environment, Database) throws -> Void) throws {
        let env = try Environment(options: EnvironmentOptions(path: path, durability: .durable))
        defer { env.close() }
        let databases = try env.openDatabases([("log", []), ("meta", [])])
        try body(env, databases[0])
    }

    private func verify(_ path: String) throws -> ChainVerification {
        var configuration = Fixtures.configuration(path)
        configuration.createIfMissing = false
        let log = try EventLog.open(configuration.log)
        defer { Task { await log.close() } }
        // One pass, and chunks of 7 checked by 2, 3, 4 and 16 threads: the same answer every way.
        let single = try log.verifyChain(chunkSize: 7, parallelism: 1)
        for threads in [2, 3, 4, 16] {
            #expect(try log.verifyChain(chunkSize: 7, parallelism: threads) == single, "\(threads) threads")
        }
        #expect(try log.verifyChain(chunkSize: 7) == single, "one thread per core")
        return single
    }

    /// Flips a byte of the payload of the event at `position` (made by ``makeLedger(_:count:)``).
    private func alterPayload(_ path: String, at position: UInt64) throws {
        try tamper(path) { env, log in
            try env.write { txn in
                var value = try #require(try txn.get(log, key: BigEndian.bytes(of: position)))
                let payload = Array("event \(position)".utf8)
                let start = try #require(value.firstRange(of: payload)).lowerBound
                value[start + 6] ^= 0x01
                try txn.put(log, key: BigEndian.bytes(of: position), value: value)
            }
        }
    }

    /// Chunks of 7 events: 1–7, 8–14, 15–21… Each thread takes whole chunks, so a break is found by
    /// the thread holding its chunk, while other threads check chunks after it.
    @Test(
        "the parallel check finds a break inside a chunk and at either edge of one, as one pass does",
        arguments: [17, 15, 14, 1, 50] as [UInt64])
    func parallelBreakAtChunkEdges(position: UInt64) async throws {
        let dir = TemporaryDirectory()
        try await makeLedger(dir.path, count: 50)
        try alterPayload(dir.path, at: position)
        let result = try verify(dir.path)
        #expect(result.firstBadPosition == position)
        #expect(result.problem?.contains("altered") == true)
        #expect(result.eventsChecked == position - 1)
        #expect(result.headPosition == position - 1)
    }

    @Test("of two breaks in different chunks, the parallel check reports the first, as one pass does")
    func parallelTwoBreaks() async throws {
        let dir = TemporaryDirectory()
        try await makeLedger(dir.path, count: 50)
        try alterPayload(dir.path, at: 40)
        try tamper(dir.path) { env, log in
            try env.write { txn in _ = try txn.delete(log, key: BigEndian.bytes(of: UInt64(22))) }
        }
        let result = try verify(dir.path)
        #expect(result.firstBadPosition == 22)
        #expect(result.problem?.contains("missing") == true)
        #expect(result.eventsChecked == 21)
    }

    @Test("a last key damaged into a far position: the parallel check reports the gap without walking to it")
    func parallelFarLastKey() async throws {
        let dir = TemporaryDirectory()
        try await makeLedger(dir.path, count: 20)
        try tamper(dir.path) { env, log in
            try env.write { txn in
                let last = try #require(try txn.get(log, key: BigEndian.bytes(of: UInt64(20))))
                _ = try txn.delete(log, key: BigEndian.bytes(of: UInt64(20)))
                try txn.put(log, key: BigEndian.bytes(of: UInt64(1) << 40), value: last)
            }
        }
        // 2^40 / 7 chunks: only the ones started may exist.
        let result = try verify(dir.path)
        #expect(result.firstBadPosition == 20)
        #expect(result.problem?.contains("missing") == true)
        #expect(result.eventsChecked == 19)
    }

    @Test("a deleted event at a chunk's first position is caught as a gap by the parallel check")
    func parallelGapAtChunkStart() async throws {
        let dir = TemporaryDirectory()
        try await makeLedger(dir.path, count: 30)
        try tamper(dir.path) { env, log in
            try env.write { txn in _ = try txn.delete(log, key: BigEndian.bytes(of: UInt64(15))) }
        }
        let result = try verify(dir.path)
        #expect(result.firstBadPosition == 15)
        #expect(result.problem?.contains("missing") == true)
        #expect(result.eventsChecked == 14)
    }

    @Test("an untouched chain verifies, across chunk boundaries")
    func untouchedChainHolds() async throws {
        let dir = TemporaryDirectory()
        try await makeLedger(dir.path, count: 50)
        let result = try verify(dir.path)
        #expect(result.isValid)
        #expect(result.eventsChecked == 50)
        #expect(result.headPosition == 50)
    }

    @Test("a flipped payload byte is caught at its position")
    func flippedByte() async throws {
        let dir = TemporaryDirectory()
        try await makeLedger(dir.path, count: 30)
        try alterPayload(dir.path, at: 17)
        let result = try verify(dir.path)
        #expect(result.firstBadPosition == 17)
        #expect(result.problem?.contains("altered") == true)
        #expect(result.eventsChecked == 16)
    }

    @Test("a deleted event is caught as a gap")
    func deletedEvent() async throws {
        let dir = TemporaryDirectory()
        try await makeLedger(dir.path, count: 20)
        try tamper(dir.path) { env, log in
            try env.write { txn in _ = try txn.delete(log, key: BigEndian.bytes(of: UInt64(9))) }
        }
        let result = try verify(dir.path)
        #expect(result.firstBadPosition == 9)
        #expect(result.problem?.contains("missing") == true)
    }

    @Test("two swapped events are caught")
    func swappedEvents() async throws {
        let dir = TemporaryDirectory()
        try await makeLedger(dir.path, count: 20)
        try tamper(dir.path) { env, log in
            try env.write { txn in
                let a = try #require(try txn.get(log, key: BigEndian.bytes(of: UInt64(5))))
                let b = try #require(try txn.get(log, key: BigEndian.bytes(of: UInt64(6))))
                try txn.put(log, key: BigEndian.bytes(of: UInt64(5)), value: b)
                try txn.put(log, key: BigEndian.bytes(of: UInt64(6)), value: a)
            }
        }
        let result = try verify(dir.path)
        #expect(result.firstBadPosition == 5)
    }

    @Test("a truncated tail is caught by a head pinned outside the ledger")
    func truncatedTail() async throws {
        let dir = TemporaryDirectory()
        try await makeLedger(dir.path, count: 10)
        let pinned = try {
            let log = try EventLog.open(Fixtures.configuration(dir.path).log)
            defer { Task { await log.close() } }
            return try log.head()
        }()
        try tamper(dir.path) { env, log in
            try env.write { txn in _ = try txn.delete(log, key: BigEndian.bytes(of: UInt64(10))) }
        }
        // What is left is a valid chain of 9 (the head is the last entry, so the ledger alone cannot
        // tell a truncated log from a shorter one, as with any log whose writer is the attacker);
        // a head pinned outside the ledger (or a signed checkpoint) catches it.
        #expect(try verify(dir.path).isValid)
        var configuration = Fixtures.configuration(dir.path)
        configuration.createIfMissing = false
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        let report = try LedgerAudit(ledger).audit(
            scratchPath: dir.child("scratch"),
            options: AuditOptions(expectedHeads: [ExpectedHead(position: pinned.position, hash: pinned.hash)]))
        #expect(!report.ok)
        await ledger.close()
    }

    @Test("garbage bytes in place of an event are caught")
    func garbageEntry() async throws {
        let dir = TemporaryDirectory()
        try await makeLedger(dir.path, count: 5)
        try tamper(dir.path) { env, log in
            try env.write { txn in try txn.put(log, key: BigEndian.bytes(of: UInt64(3)), value: [0xFF, 0xFF, 0x01]) }
        }
        let result = try verify(dir.path)
        #expect(result.firstBadPosition == 3)
        #expect(result.problem?.contains("well-formed") == true)
        // Reading it through the API is a typed error, not a crash.
        var configuration = Fixtures.configuration(dir.path)
        configuration.createIfMissing = false
        let log = try EventLog.open(configuration.log)
        let error = #expect(throws: LedgerError.self) { try log.event(at: 3) }
        #expect(error?.code == .corruptedData)
        await log.close()
    }
}
