import Foundation
import LMDB
@testable import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// An import's lines are bounded, and its read models commit with its events.
@Suite("Import: bounded lines, read models with every batch")
struct ImportBoundsTests {
    @Test("a line longer than the longest valid event is refused after reading a bounded prefix of it")
    func longLineRefusedEarly() async throws {
        signal(SIGPIPE, SIG_IGN)
        let dir = TemporaryDirectory()
        let input = Pipe()
        let errPath = dir.child("err")
        let child = try ChildProcess(
            builtProduct("share-ledger"), ["import", "--path", dir.child("ledger")],
            stdinHandle: input.fileHandleForReading, stdout: dir.child("out"), stderr: errPath)
        // One 64 MiB line, written 1 MiB at a time until the command stops reading. The writes block
        // while the pipe is full: on a thread of their own, not one of the cooperative pool's.
        let writer = input.fileHandleForWriting
        let written = await withCheckedContinuation { (continuation: CheckedContinuation<Int, Never>) in
            Thread {
                let chunk = [UInt8](repeating: UInt8(ascii: "x"), count: 1 << 20)
                let fd = writer.fileDescriptor
                var written = 0
                writing: while written < 64 << 20 {
                    var offset = 0
                    while offset < chunk.count {
                        let count = chunk[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                        if count < 0 {
                            if errno == EINTR { continue }
                            break writing  // EPIPE: the command has stopped reading
                        }
                        offset += count
                        written += count
                    }
                }
                try? writer.close()
                continuation.resume(returning: written)
            }.start()
        }
        let ended = await child.exit()
        let stderr = String(decoding: FileManager.default.contents(atPath: errPath) ?? Data(), as: UTF8.self)
        #expect(ended.exited(1), "\(ended.summary) \(stderr)")
        #expect(stderr.contains("line 1 of the import is refused: it is longer than \(LogNDJSON.maxLineBytes) bytes"), "\(stderr)")
        // It read about the bound, not the line: the pipe refused the rest.
        #expect(written < 8 << 20, "\(written) bytes were written before the command stopped reading")
        #expect(!FileManager.default.fileExists(atPath: dir.child("ledger")))
    }

    @Test("the longest valid line fits the bound; one byte more does not")
    func boundIsTight() async throws {
        let dir = TemporaryDirectory()
        let log = try EventLog.open(Fixtures.configuration(dir.child("source")).log)
        let name = String(repeating: "\u{01}", count: EventLog.Limits.maxNameBytes)
        let metadata = CommandMetadata(container: name, actor: name)
        try await log.append(
            [EventDraft(type: name, payload: [UInt8](repeating: 0xFF, count: EventLog.Limits.maxPayloadBytes))], to: name,
            metadata: metadata)
        let envelope = try #require(try log.event(at: LogPosition(1)))
        await log.close()
        let line = LogNDJSON.line(envelope)
        #expect(line.utf8.count <= LogNDJSON.maxLineBytes)
        #expect(line.utf8.count > LogNDJSON.maxLineBytes - 1_024)
    }

    @Test("an import's read models commit with each batch: after the import they match a rebuild, without one")
    func readModelsWithBatches() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        let exported = f.dir.child("export.ndjson")
        try exportToFile(f.ledger, exported)
        await f.ledger.close()

        var configuration = Fixtures.configuration(f.dir.child("copy"))
        configuration.residualTaskWorker = nil
        let copy = try ShareLedger.open(configuration)
        let summary = try await LedgerAudit(copy).importLog(from: try #require(FileHandle(forReadingAtPath: exported)))
        #expect(summary.replayed == summary.events)
        let report = try LedgerAudit(copy).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok, "\(report.problems)")
        let bob = copy.container(SharingFixture.container, userRecordName: "_bob")
        #expect(try bob.participatingShares().count == 1)
        await copy.close()
    }

    /// NDJSON lines of raw commands built by hand (chain computed as the writer does): each command is
    /// a list of (stream, stream version, back-link, event type).
    static func rawLines(_ commands: [[(String, UInt64, UInt64, String)]]) throws -> [UInt8] {
        var out: [UInt8] = []
        var previous = [UInt8](repeating: 0, count: 32)
        var position: UInt64 = 0
        for command in commands {
            let id = UUID()
            for (stream, version, back, type) in command {
                position += 1
                let fields = EnvelopeCodec.Fields(
                    position: position, recordedAtMicros: 1_700_000_000_000_000 + Int64(position), container: "iCloud.raw",
                    actor: "_alice", commandID: id, correlationID: nil, causationID: nil, schemaVersion: 1, stream: stream,
                    streamVersion: version, streamPreviousPosition: back, eventType: type, payload: Array("x".utf8),
                    previousHash: previous)
                let (stored, hash) = EnvelopeCodec.encode(fields)
                let envelope = try stored.withUnsafeBytes { raw throws(LedgerError) in try EnvelopeCodec.decode(raw, key: position) }
                out += Array(LogNDJSON.line(envelope).utf8) + [UInt8(ascii: "\n")]
                previous = hash
            }
        }
        return out
    }

    @Test("a command's stream version is its last event's, as deriving records it: import and a rederived derived/ agree")
    func commandStreamVersions() async throws {
        let dir = TemporaryDirectory()
        // 1: versioned then unversioned; 2: unversioned then versioned; 3: a type of the sharing
        // namespace this release does not know (a later release's), versioned.
        let file = try Self.rawLines([
            [("raw/a", 1, 0, "demo.Note"), ("raw/a", 0, 0, "demo.Read")],
            [("raw/b", 0, 0, "demo.Read"), ("raw/b", 1, 0, "demo.Note")],
            [("raw/c", 1, 0, "shareledger.events.v9.Later")],
        ])
        let ledger = try HostileStoredDataTests.emptyLedger(dir)
        _ = try await HostileStoredDataTests.importing(file, into: ledger, dir, "raw.ndjson")
        func versions(_ ledger: ShareLedger) throws -> [UInt64] {
            let events = try ledger.log.events(after: .start, limit: .max)
            var seen: [UUID] = []
            for event in events where !seen.contains(event.commandID) { seen.append(event.commandID) }
            return try ledger.log.store.environment.read { txn in
                try seen.map { id in
                    try #require(try ledger.log.store.commandRecord(txn, key: LogStore.commandKey(container: "iCloud.raw", commandID: id)))
                        .streamVersion
                }
            }
        }
        #expect(try versions(ledger) == [0, 1, 0])
        await ledger.close()
        // Derived again from the log: the same records.
        try FileManager.default.removeItem(atPath: dir.child("ledger") + "/" + DerivedState.directoryName)
        let reopened = try HostileStoredDataTests.emptyLedger(dir)
        #expect(try versions(reopened) == [0, 1, 0])
        await reopened.close()
    }
}
