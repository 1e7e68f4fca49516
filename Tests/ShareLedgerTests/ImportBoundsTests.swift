import Foundation
@testable import ShareLedger
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// An import's lines are bounded, and its read models commit with its events (issue 15, items 7, 8).
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
        let f = try await SharingFixture()
        let share = try await f.makeHierarchy()
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly, to: share.url)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        let exported = f.dir.child("export.ndjson")
        try exportToFile(f.ledger, exported)
        await f.ledger.close()

        var configuration = Fixtures.configuration(f.dir.child("copy"))
        configuration.residualTaskWorker = nil
        let copy = try ShareLedger.open(configuration)
        let summary = try await copy.importLog(from: try #require(FileHandle(forReadingAtPath: exported)))
        #expect(summary.replayed == summary.events)
        let report = try copy.audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok, "\(report.problems)")
        let bob = copy.container(SharingFixture.container, userRecordName: "_bob")
        #expect(try bob.participatingShares().count == 1)
        await copy.close()
    }
}
