import ByteKeys
import Foundation
import LMDB
@testable import ShareLedger
@testable import ShareLedgerAudit
import TestSupport
import Testing

/// Rewrites the event at `target` with `change` and recomputes the hash of it and of every later
/// event, as an attacker with write access to the file could: the chain holds.
private func rewriteHistory(_ store: LogStore, at target: UInt64, _ change: (inout EnvelopeCodec.Fields) -> Void) throws {
    try store.environment.write { txn in
        let head = try store.readHead(txn)
        var previous = [UInt8]()
        var recordedAt: Int64 = 0
        for position in 1...head.position.rawValue {
            let stored = try #require(try txn.get(store.log, key: BigEndian.bytes(of: position)))
            let envelope = try stored.withUnsafeBytes { raw throws(LedgerError) in try EnvelopeCodec.decode(raw, key: position) }
            if position < target {
                previous = envelope.hash.bytes
                continue
            }
            var fields = EnvelopeCodec.Fields(
                position: position, recordedAtMicros: envelope.recordedAtMicros, container: envelope.container,
                actor: envelope.actor, commandID: envelope.commandID, correlationID: envelope.correlationID,
                causationID: envelope.causationID, schemaVersion: envelope.schemaVersion, stream: envelope.stream,
                streamVersion: envelope.streamVersion, streamPreviousPosition: envelope.streamPreviousPosition.rawValue,
                eventType: envelope.eventType, payload: envelope.payload,
                previousHash: position == 1 ? EventHash.zero.bytes : previous)
            if position == target { change(&fields) }
            let (bytes, hash) = EnvelopeCodec.encode(fields)
            try txn.put(store.log, key: BigEndian.bytes(of: position), value: bytes)
            previous = hash
            recordedAt = envelope.recordedAtMicros
        }
        // The head is the last entry itself (format 2): nothing else to forge.
        _ = recordedAt
    }
}

@Suite("Signed checkpoints")
struct CheckpointTests {
    @Test("the signed message is byte-exact and a checkpoint does not move the head")
    func message() async throws {
        let (f, _) = try await busyLedger(#function)
        let head = try f.ledger.log.head()
        let key = CheckpointSigningKey.generate()
        let checkpoint = try await LedgerAudit(f.ledger).checkpoint(signingKey: key)
        #expect(try f.ledger.log.head() == head)
        #expect(checkpoint.position == head.position && checkpoint.hash == head.hash)
        #expect(checkpoint.headRecordedAtMicros == head.recordedAtMicros)
        let message = checkpoint.signedMessage
        #expect(message.count == 81)  // 25 + 8 + 32 + 8 + 8
        #expect(Array(message.prefix(25)) == Array("shareledger-checkpoint-v1".utf8))
        #expect(Array(message[25..<33]) == BigEndian.bytes(of: head.position.rawValue))
        #expect(Array(message[33..<65]) == head.hash.bytes)
        #expect(Array(message[65..<73]) == BigEndian.bytes(of: UInt64(bitPattern: head.recordedAtMicros)))
        #expect(Array(message[73..<81]) == BigEndian.bytes(of: UInt64(bitPattern: checkpoint.signedAtMicros)))
        #expect(checkpoint.isSigned(by: key.publicKey))
        #expect(try LedgerAudit(f.ledger).checkpoints() == [checkpoint])
        // The key files round-trip.
        let path = f.dir.child("k.pub")
        try CheckpointKeyFile.text(key.publicKey.rawRepresentation).write(toFile: path, atomically: true, encoding: .utf8)
        #expect(try CheckpointPublicKey(contentsOfFile: path) == key.publicKey)
        await f.ledger.close()
    }

    @Test("a history rewritten with the whole chain recomputed passes verify but fails the signed checkpoint")
    func recomputedChain() async throws {
        let (f, share) = try await busyLedger(#function)
        let key = CheckpointSigningKey.generate()
        let first = try await LedgerAudit(f.ledger).checkpoint(signingKey: key)
        _ = try await f.alice.setTitle("Errands", for: share.url)
        let second = try await LedgerAudit(f.ledger).checkpoint(signingKey: key)
        let options = AuditOptions(trustedKeys: [key.publicKey])
        var report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"), options: options)
        #expect(report.ok, "\(report.problems)")
        #expect(report.checkpoints == 2 && report.checkpointsVerified == 2)

        // Rewrite event 3's actor and recompute every later hash.
        try rewriteHistory(f.ledger.log.store, at: 3) { $0.actor = "_mallory" }
        #expect(try f.ledger.log.verifyChain().isValid)
        report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"), options: options)
        #expect(!report.ok)
        #expect(report.checkpointsVerified == 0)
        #expect(report.firstBadPosition == first.position.rawValue)
        #expect(report.problems.contains { $0.contains("checkpointed") && $0.contains("\(second.position)") })
        await f.ledger.close()
    }

    @Test("--from-checkpoint needs a trusted checkpoint and still recomputes the chain from the first event")
    func auditFromCheckpoint() async throws {
        let (f, share) = try await busyLedger(#function)
        let key = CheckpointSigningKey.generate()
        let checkpoint = try await LedgerAudit(f.ledger).checkpoint(signingKey: key).position.rawValue
        _ = try await f.alice.setTitle("Errands", for: share.url)
        _ = try await f.alice.setTitle("Chores", for: share.url)
        let head = try f.ledger.log.head().position.rawValue
        let from = AuditOptions(trustedKeys: [key.publicKey], fromCheckpoint: true)
        var report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"), options: from)
        #expect(report.ok, "\(report.problems)")
        #expect(report.chainVerifiedFrom == 1)
        #expect(try f.ledger.log.verifyChain(after: checkpoint).eventsChecked == head - checkpoint)
        // Without a trusted key there is nothing to start from.
        #expect(await errorCode { try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("s2"), options: AuditOptions(fromCheckpoint: true)) } == .invalidArguments)

        // An altered event after the checkpoint is caught, and so is one before it: the checkpoint
        // vouches for that part only while it still hashes to it.
        func flip(_ position: UInt64) throws {
            try f.ledger.log.store.environment.write { txn in
                var value = try #require(try txn.get(f.ledger.log.store.log, key: BigEndian.bytes(of: position)))
                value[value.count - 40] ^= 0x01
                try txn.put(f.ledger.log.store.log, key: BigEndian.bytes(of: position), value: value)
            }
        }
        try flip(head)
        report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"), options: from)
        #expect(!report.ok && report.firstBadPosition == head)
        try flip(head)
        try flip(2)
        report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"), options: from)
        #expect(!report.ok && report.firstBadPosition == 2, "\(report.problems)")
        let full = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"), options: AuditOptions(trustedKeys: [key.publicKey]))
        #expect(!full.ok && full.firstBadPosition == 2)
        #expect(full.chainVerifiedFrom == 1)
        await f.ledger.close()
    }

    @Test("a checkpoint signed by another key, or with an altered signature, is refused; no checkpoint fails too")
    func otherKey() async throws {
        let (f, _) = try await busyLedger(#function)
        let trusted = CheckpointSigningKey.generate()
        let other = CheckpointSigningKey.generate()
        var report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"), options: AuditOptions(trustedKeys: [trusted.publicKey]))
        #expect(!report.ok)
        #expect(report.problems.contains { $0.contains("no checkpoint") })

        let checkpoint = try await LedgerAudit(f.ledger).checkpoint(signingKey: other)
        report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"), options: AuditOptions(trustedKeys: [trusted.publicKey]))
        #expect(!report.ok)
        #expect(report.firstBadPosition == checkpoint.position.rawValue)
        #expect(report.problems.contains { $0.contains("not trusted") })
        // Without trusted keys the checkpoint still has to match the log, and does.
        report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok, "\(report.problems)")
        #expect(report.checkpoints == 1 && report.checkpointsVerified == 0)

        // A forged signature under the trusted key's name.
        try f.ledger.log.store.environment.write { txn in
            var forged = checkpoint
            forged.publicKey = trusted.publicKey.rawRepresentation
            try txn.put(f.ledger.log.store.checkpoints, key: BigEndian.bytes(of: checkpoint.position.rawValue), value: forged.storedValue)
        }
        report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"), options: AuditOptions(trustedKeys: [trusted.publicKey]))
        #expect(!report.ok)
        #expect(report.problems.contains { $0.contains("invalid signature") })
        await f.ledger.close()
    }

    @Test("an expected head pinned outside the ledger must still be in the log")
    func expectedHead() async throws {
        let (f, _) = try await busyLedger(#function)
        let head = try f.ledger.log.head()
        let pinned = try #require(ExpectedHead("\(head.position):\(head.hash.hex)"))
        var report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"), options: AuditOptions(expectedHeads: [pinned]))
        #expect(report.ok, "\(report.problems)")
        #expect(report.expectedHeadsVerified == 1)
        #expect(ExpectedHead("12:abc") == nil && ExpectedHead("x:\(head.hash.hex)") == nil)

        let wrong = ExpectedHead(position: 4, hash: head.hash)
        let beyond = ExpectedHead(position: LogPosition(head.position.rawValue + 5), hash: head.hash)
        report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"), options: AuditOptions(expectedHeads: [pinned, wrong, beyond]))
        #expect(!report.ok)
        #expect(report.firstBadPosition == 4)
        #expect(report.expectedHeadsVerified == 1)
        #expect(report.problems.contains { $0.contains("truncated") })
        await f.ledger.close()
    }
}

@Suite("Export and import as NDJSON")
struct ExportImportTests {
    private func exportText(_ ledger: ShareLedger, _ path: String, since: LogPosition = .start) throws -> [UInt8] {
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try LedgerAudit(ledger).export(since: since, to: handle)
        try handle.close()
        return Array(try Data(contentsOf: URL(fileURLWithPath: path)))
    }

    private func importBytes(_ ledger: ShareLedger, _ bytes: [UInt8], _ path: String) async throws(LedgerError) -> ImportSummary {
        _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
        let handle = FileHandle(forReadingAtPath: path)!
        defer { try? handle.close() }
        return try await LedgerAudit(ledger).importLog(from: handle)
    }

    private func openLedger(_ path: String) throws -> ShareLedger {
        var configuration = ShareLedger.Configuration(path: path, durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        return try ShareLedger.open(configuration)
    }

    @Test("export, import, export again is byte-identical; the import audits clean and answers the same")
    func roundTrip() async throws {
        let (f, share) = try await busyLedger(#function)
        // Raw appends too (their command records keep the stream version), with ids and odd characters.
        _ = try await f.ledger.log.append(
            [EventDraft(type: "example.Note", payload: Array("a\"b\\c\n\u{1}é".utf8)), EventDraft(type: "example.Empty", payload: [])],
            to: "notes/\"quoted\"\t", expectedVersion: .noStream,
            metadata: CommandMetadata(container: SharingFixture.container, actor: "_al\"ice\n", correlationID: UUID(), causationID: UUID()))
        let first = try exportText(f.ledger, f.dir.child("one.ndjson"))
        let lines = first.split(separator: UInt8(ascii: "\n"))
        #expect(UInt64(lines.count) == (try f.ledger.statistics().events))
        let line = String(decoding: lines[0], as: UTF8.self)
        #expect(line.hasPrefix("{\"position\":1,\"recordedAtMicros\":"))
        #expect(!line.contains(" ") || line.contains("\"actor\":"))

        // With the key store copied in first (docs/operations.md), the copy opens the sealed data.
        try FileManager.default.createDirectory(atPath: f.dir.child("copy"), withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            atPath: f.dir.child("ledger") + "/" + ShareLedger.keyStoreFileName,
            toPath: f.dir.child("copy") + "/" + ShareLedger.keyStoreFileName)
        let copy = try openLedger(f.dir.child("copy"))
        let summary = try await importBytes(copy, first, f.dir.child("in.ndjson"))
        #expect(summary.events == UInt64(lines.count))
        #expect(summary.headHash == (try f.ledger.log.head().hash.hex))
        #expect(try exportText(copy, f.dir.child("two.ndjson")) == first)
        let report = try LedgerAudit(copy).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok, "\(report.problems)")
        #expect(try ReadModelRebuild.compare(f.ledger.log.store, copy.log.store).matches)
        for (a, b) in [(f.ledger.log.store.commands, copy.log.store.commands), (f.ledger.log.store.streams, copy.log.store.streams)] {
            let original = try ReadModelRebuild.dump(f.ledger.log.store.environment, a)
            let imported = try ReadModelRebuild.dump(copy.log.store.environment, b)
            #expect(original.map(\.0) == imported.map(\.0) && original.map(\.1) == imported.map(\.1), "\(a.name)")
        }
        let bob = copy.container(SharingFixture.container, userRecordName: "_bob")
        let original = try f.bob.participatingShares(status: [.accepted]).map(\.url)
        #expect(original.count == 1)
        #expect(try bob.participatingShares(status: [.accepted]).map(\.url) == original)
        #expect(try LedgerAudit(copy).history(of: .share(share.url)).map(\.name) == (try LedgerAudit(f.ledger).history(of: .share(share.url)).map(\.name)))

        // An export since a position continues a copy whose head is there.
        _ = try await f.alice.setTitle("Errands", for: share.url)
        let head = try copy.log.head().position
        let more = try exportText(f.ledger, f.dir.child("more.ndjson"), since: head)
        #expect(more.split(separator: UInt8(ascii: "\n")).count == 1)
        _ = try await importBytes(copy, more, f.dir.child("in2.ndjson"))
        #expect(try copy.log.head() == (try f.ledger.log.head()))
        #expect(try LedgerAudit(copy).audit(scratchPath: f.dir.child("scratch")).ok)
        // The whole file again does not continue the copy's head.
        #expect(await errorCode { try await importBytes(copy, first, f.dir.child("in3.ndjson")) } == .invalidArguments)
        await copy.close()
        await f.ledger.close()
    }

    @Test("an import larger than one batch keeps commands whole and its records equal to the original's")
    func largeImport() async throws {
        let dir = TemporaryDirectory()
        let original = try openLedger(dir.child("original"))
        // 1,301 commands of 7 events: the 8,192-event batch boundary falls inside a command.
        for index in 0..<1_301 {
            _ = try await original.log.append(
                (0..<7).map { EventDraft(type: "example.Note", payload: Array("\(index).\($0)".utf8)) }, to: "notes/\(index % 10)",
                metadata: CommandMetadata(container: SharingFixture.container, actor: "_alice"))
        }
        let text = try exportText(original, dir.child("all.ndjson"))
        let copy = try openLedger(dir.child("copy"))
        let summary = try await importBytes(copy, text, dir.child("in.ndjson"))
        #expect(summary.events == 9_107)
        #expect(try copy.log.head() == (try original.log.head()))
        #expect(try LedgerAudit(copy).audit(scratchPath: dir.child("scratch")).ok)
        for (a, b) in [(original.log.store.commands, copy.log.store.commands), (original.log.store.streams, copy.log.store.streams)] {
            let left = try ReadModelRebuild.dump(original.log.store.environment, a)
            let right = try ReadModelRebuild.dump(copy.log.store.environment, b)
            #expect(left.map(\.0) == right.map(\.0) && left.map(\.1) == right.map(\.1), "\(a.name)")
        }
        await copy.close()
        await original.close()
    }

    @Test("a flipped character, a deleted line, swapped lines, a truncated last line: refused at the right line, nothing written")
    func brokenFiles() async throws {
        let (f, _) = try await busyLedger(#function)
        let text = try exportText(f.ledger, f.dir.child("all.ndjson"))
        await f.ledger.close()
        var lines = text.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map(Array.init)
        lines.removeLast()  // after the final newline
        #expect(lines.count > 8)
        func join(_ lines: [[UInt8]]) -> [UInt8] { lines.flatMap { $0 + [UInt8(ascii: "\n")] } }

        var flipped = lines
        let middle = flipped[4].count / 2
        flipped[4][middle] = flipped[4][middle] == UInt8(ascii: "x") ? UInt8(ascii: "y") : UInt8(ascii: "x")
        var deleted = lines
        deleted.remove(at: 4)
        var swapped = lines
        swapped.swapAt(4, 5)
        var truncated = join(lines)
        truncated.removeLast(10)
        var payloadFlip = lines
        let payload = String(decoding: payloadFlip[6], as: UTF8.self).range(of: "\"payload\":\"")!
        let index = String(decoding: payloadFlip[6], as: UTF8.self).utf8.distance(
            from: String(decoding: payloadFlip[6], as: UTF8.self).startIndex, to: payload.upperBound) + 2
        payloadFlip[6][index] = payloadFlip[6][index] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")

        var cases: [(String, [UInt8], Int)] = [
            ("flipped", join(flipped), 5), ("deleted", join(deleted), 5), ("swapped", join(swapped), 5),
            ("truncated", truncated, lines.count), ("payload", join(payloadFlip), 7),
        ]
        // A well-chained line whose sharing-domain payload does not decode (the rebuild would fail).
        let firstLine = String(decoding: lines[0], as: UTF8.self)
        let typeRange = try #require(firstLine.range(of: #""eventType":"[^"]+""#, options: .regularExpression))
        let eventType = String(firstLine[typeRange].dropFirst(13).dropLast())
        let (garbage, _) = EnvelopeCodec.encode(
            EnvelopeCodec.Fields(
                position: 1, recordedAtMicros: 1, container: SharingFixture.container, actor: "_alice", commandID: UUID(),
                correlationID: nil, causationID: nil, schemaVersion: 1, stream: "user/_alice", streamVersion: 1,
                streamPreviousPosition: 0, eventType: eventType, payload: [0xFF, 0xFF, 0xFF], previousHash: EventHash.zero.bytes))
        let garbageLine = LogNDJSON.line(try garbage.withUnsafeBytes { raw throws(LedgerError) in try EnvelopeCodec.decode(raw, key: 1) })
        cases.append(("undecodable", Array((garbageLine + "\n").utf8), 1))

        for (name, bytes, line) in cases {
            let target = try openLedger(f.dir.child("target-\(name)"))
            do {
                _ = try await importBytes(target, bytes, f.dir.child("\(name).ndjson"))
                Issue.record("the \(name) file was imported")
            } catch {
                #expect(error.code == .invalidArguments, "\(name)")
                #expect(error.message.hasPrefix("line \(line) "), "\(name): \(error.message)")
                if name == "undecodable" { #expect(error.message.contains("does not decode"), "\(error.message)") }
            }
            #expect(try target.log.head().position == .start, "\(name)")
            #expect(try target.statistics().events == 0, "\(name)")
            await target.close()
        }
    }
}

@Suite("The NDJSON line of the worked example")
struct NDJSONFormatTests {
    @Test("the worked example of docs/log-format.md exports to the line the page shows")
    func workedExample() throws {
        let fields = EnvelopeCodec.Fields(
            position: 1, recordedAtMicros: 1_700_000_000_000_000, container: "iCloud.com.example.notes", actor: "_alice",
            commandID: try #require(UUID(uuidString: "0189F2B2-1C4E-7A3B-8D2F-6C1E5B4A3F20")), correlationID: nil,
            causationID: nil, schemaVersion: 1, stream: "share/demo", streamVersion: 1, streamPreviousPosition: 0,
            eventType: "shareledger.demo.Note", payload: Array("hello, ledger".utf8), previousHash: EventHash.zero.bytes)
        let (stored, _) = EnvelopeCodec.encode(fields)
        let envelope = try stored.withUnsafeBytes { raw throws(LedgerError) in try EnvelopeCodec.decode(raw, key: 1) }
        let line = LogNDJSON.line(envelope)
        #expect(line.hasSuffix("\"hash\":\"3222a59519d1838db829d7db233bd604a9409cf1c84200cd394d62940dd67d60\"}"))
        let page = try String(contentsOf: packageRoot.appendingPathComponent("docs/log-format.md"), encoding: .utf8)
        #expect(page.contains("\n" + line + "\n"))
        // And it parses back to the same fields.
        guard case .success(let parsed) = LogNDJSON.parse(ArraySlice(line.utf8)) else {
            Issue.record("the line does not parse")
            return
        }
        #expect(EnvelopeCodec.encode(parsed.0).stored == stored)
    }
}

@Suite("Maintenance jobs and the head in one group commit")
struct MaintenanceHeadTests {
    private func waitForQueue(_ log: EventLog, _ count: Int) async throws {
        for _ in 0..<2000 where log.queuedCommands < count { try await Task.sleep(for: .milliseconds(1)) }
        #expect(log.queuedCommands == count)
    }

    @Test("a checkpoint batched after an append signs the head that includes the append")
    func checkpointAfterAppend() async throws {
        let f = try await SharingFixture()
        let log = f.ledger.log
        let key = CheckpointSigningKey.generate()
        log.setWriterPaused(true)
        let append = Task {
            try await log.append(
                [EventDraft(type: "example.Note", payload: [1])], to: "notes/a",
                metadata: CommandMetadata(container: SharingFixture.container, actor: "_alice"))
        }
        try await waitForQueue(log, 1)
        let ledger = f.ledger
        let checkpoint = Task { try await LedgerAudit(ledger).checkpoint(signingKey: key) }
        try await waitForQueue(log, 2)
        log.setWriterPaused(false)
        let appended = try await append.value
        #expect(try await checkpoint.value.position == appended.positions.upperBound)
        #expect(try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"), options: AuditOptions(trustedKeys: [key.publicKey])).ok)
        await f.ledger.close()
    }

    @Test("an append batched after an import lands after the imported events")
    func appendAfterImport() async throws {
        let f = try await SharingFixture()
        let file = f.dir.child("log.ndjson")
        _ = FileManager.default.createFile(atPath: file, contents: nil)
        let out = try FileHandle(forWritingTo: URL(fileURLWithPath: file))
        try LedgerAudit(f.ledger).export(to: out)
        try out.close()
        await f.ledger.close()

        var configuration = ShareLedger.Configuration(path: f.dir.child("copy"), durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        configuration.writerProbe = WriterGate()
        let copy = try ShareLedger.open(configuration)
        let log = copy.log
        log.setWriterPaused(true)
        let imported = Task {
            let handle = FileHandle(forReadingAtPath: file)!
            return try await LedgerAudit(copy).importLog(from: handle)
        }
        try await waitForQueue(log, 1)
        let append = Task {
            try await log.append(
                [EventDraft(type: "example.Note", payload: [1])], to: "notes/a",
                metadata: CommandMetadata(container: SharingFixture.container, actor: "_alice"))
        }
        try await waitForQueue(log, 2)
        log.setWriterPaused(false)
        let summary = try await imported.value
        let appended = try await append.value
        #expect(appended.positions.lowerBound.rawValue == summary.headPosition + 1)
        #expect(try log.verifyChain().isValid)
        #expect(try LedgerAudit(copy).audit(scratchPath: f.dir.child("scratch")).ok)
        await copy.close()
    }
}

/// A Python interpreter that can import `lmdb` (what `scripts/verify_chain.py` needs), if any.
func pythonWithLMDB() async -> String? {
    for candidate in ["/usr/bin/python3", "python3"] {
        let probe = try? await runProcess(URL(fileURLWithPath: "/usr/bin/env"), [candidate, "-c", "import lmdb"])
        if probe?.exited(0) == true { return candidate }
    }
    return nil
}

@Suite("The independent verifier: scripts/verify_chain.py")
struct IndependentVerifierTests {
    private func verify(_ ledger: String, keys: [String], reference: Bool = false) async throws -> (status: Int32, output: String) {
        let python = try #require(await pythonWithLMDB())
        let run = try await runProcess(
            URL(fileURLWithPath: "/usr/bin/env"),
            (reference ? ["VERIFY_CHAIN_REFERENCE_ED25519=1"] : [])
                + [python, packageRoot.appendingPathComponent("scripts/verify_chain.py").path, ledger]
                + keys.flatMap { ["--trusted-key", $0] })
        return (run.status, run.stdout + run.stderr)
    }

    @Test("checks checkpoint signatures from the files alone: a trusted key passes; another key, a rewritten history with the chain recomputed, an altered signature and no checkpoint fail",
          .enabled { await pythonWithLMDB() != nil })
    func checkpoints() async throws {
        let (f, share) = try await busyLedger(#function)
        let path = f.dir.child("ledger")
        let key = CheckpointSigningKey.generate()
        let trusted = f.dir.child("trusted.pub")
        let other = f.dir.child("other.pub")
        try CheckpointKeyFile.text(key.publicKey.rawRepresentation).write(toFile: trusted, atomically: true, encoding: .utf8)
        try CheckpointKeyFile.text(CheckpointSigningKey.generate().publicKey.rawRepresentation)
            .write(toFile: other, atomically: true, encoding: .utf8)

        // No checkpoint yet: the chain holds, but a trusted key asks for one.
        #expect(try await verify(path, keys: []).status == 0)
        let none = try await verify(path, keys: [trusted])
        #expect(none.status == 1 && none.output.contains("no signed checkpoint"), "\(none.output)")

        try await LedgerAudit(f.ledger).checkpoint(signingKey: key)
        _ = try await f.alice.setTitle("Errands", for: share.url)
        let last = try await LedgerAudit(f.ledger).checkpoint(signingKey: key)
        for reference in [false, true] {
            let good = try await verify(path, keys: [trusted], reference: reference)
            #expect(good.status == 0 && good.output.contains("2 signed checkpoints verified"), "\(good.output)")
        }
        let stranger = try await verify(path, keys: [other])
        #expect(stranger.status == 1 && stranger.output.contains("not trusted"), "\(stranger.output)")

        // An altered signature byte, by the library and by the reference arithmetic.
        let store = f.ledger.log.store
        let stored = try #require(try store.environment.read { txn in
            try txn.get(store.checkpoints, key: BigEndian.bytes(of: last.position.rawValue))
        })
        var forged = stored
        forged[forged.count - 1] ^= 0x01
        try store.environment.write { txn in
            try txn.put(store.checkpoints, key: BigEndian.bytes(of: last.position.rawValue), value: forged)
        }
        for reference in [false, true] {
            let altered = try await verify(path, keys: [trusted], reference: reference)
            #expect(altered.status == 1 && altered.output.contains("does not verify"), "\(altered.output)")
        }
        try store.environment.write { txn in
            try txn.put(store.checkpoints, key: BigEndian.bytes(of: last.position.rawValue), value: stored)
        }
        #expect(try await verify(path, keys: [trusted]).status == 0)

        // A rewritten history with every later hash recomputed: the chain holds, the checkpoints do not.
        try rewriteHistory(store, at: 3) { $0.actor = "_mallory" }
        #expect(try await verify(path, keys: []).status == 0)
        let rewritten = try await verify(path, keys: [trusted])
        #expect(rewritten.status == 1 && rewritten.output.contains("was rewritten"), "\(rewritten.output)")
        await f.ledger.close()
    }
}
