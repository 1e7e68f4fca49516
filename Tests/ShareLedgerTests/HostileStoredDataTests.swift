import ByteKeys
import Foundation
import LMDB
@testable import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// Stored data nobody should have written: damaged event bytes, unknown enum values in read-model
/// rows and in events, hostile import files, and ledgers the caller may not or cannot write.
@Suite("Hostile input: stored data")
struct HostileStoredDataTests {
    /// Five raw events in one stream.
    static func rawLog(_ dir: TemporaryDirectory) async throws -> EventLog {
        let log = try EventLog.open(Fixtures.configuration(dir.path).log)
        for index in 0..<5 { try await log.append([Fixtures.draft("event \(index)")], to: "s", metadata: Fixtures.metadata()) }
        return log
    }

    @Test("damaged bytes of one event: its reads fail with corruptedData, the chain check and the audit name it, other events still read",
          arguments: ["empty", "truncated to 10 bytes", "hash suffix cut", "junk appended", "one byte flipped", "another event's bytes", "random bytes"])
    func damagedEvent(damage: String) async throws {
        let dir = TemporaryDirectory()
        let log = try await Self.rawLog(dir)
        let store = log.store
        let original = try #require(try store.environment.read { txn in try txn.get(store.log, key: BigEndian.bytes(of: UInt64(3))) })
        let other = try #require(try store.environment.read { txn in try txn.get(store.log, key: BigEndian.bytes(of: UInt64(4))) })
        var generator = SplitMix64(state: 3)
        let damaged: [UInt8] =
            switch damage {
            case "empty": []
            case "truncated to 10 bytes": Array(original.prefix(10))
            case "hash suffix cut": Array(original.dropLast(20))
            case "junk appended": original + [0x08, 0x01]
            case "one byte flipped":
                {
                    var bytes = original
                    bytes[bytes.count - 40] ^= 0x01
                    return bytes
                }()
            case "another event's bytes": other
            default: (0..<original.count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            }
        try store.environment.write { txn in try txn.put(store.log, key: BigEndian.bytes(of: UInt64(3)), value: damaged) }

        let head = try log.head()
        #expect(head.position == 5)
        let verification = try log.verifyChain()
        #expect(!verification.isValid)
        #expect(verification.firstBadPosition == 3, "\(damage): \(verification.problem ?? "")")
        if damage != "one byte flipped" {
            // The decoder refuses the entry itself (a flipped payload byte decodes; only the chain sees it).
            let error = #expect(throws: LedgerError.self) { try log.event(at: LogPosition(3)) }
            #expect(error?.code == .corruptedData, "\(damage)")
            #expect(error?.message.contains("position 3") == true, "\(damage): \(String(describing: error))")
        }
        #expect(try log.event(at: LogPosition(2))?.payload == Array("event 1".utf8))
        #expect(try log.event(at: LogPosition(5))?.payload == Array("event 4".utf8))
        #expect(try log.head() == head)
        await log.close()

        let verify = try await runProduct("share-ledger", ["verify", "--path", dir.path, "--json"], input: Data())
        #expect(verify.status == 1, "\(damage): \(verify.stdout)")
        let audit = try await runProduct("share-ledger", ["audit", "--path", dir.path, "--json"], input: Data())
        #expect(audit.status == 1, "\(damage): \(audit.stdout)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(audit.stdout.utf8)) as? [String: Any])
        #expect(report["firstBadPosition"] as? Int == 3, "\(damage)")
    }

    @Test("unknown enum values in read-model rows: nobody gains access (fail closed), the audit reports the rows, a rebuild repairs them")
    func unknownEnumsInReadModels() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let token = share.token.text
        let invited = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readWrite, role: .administrator, to: share.url)
        let bobID = try #require(invited.participants.first { $0.userIdentity.userRecordID?.recordName == "_bob" }?.participantID)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        let models = f.ledger.models
        let store = f.ledger.log.store

        // Bob's row: an unknown role, permission and status.
        try store.environment.write { txn in
            let key = ReadModels.participantKey(token, bobID)
            var state = try #require(try models.message(ParticipantState.self, txn, models.participants, key))
            state.role = PBRole(rawValue: 42)!
            state.permission = PBPermission(rawValue: 9)!
            state.status = PBStatus(rawValue: 7)!
            try models.put(txn, models.participants, key, state)
        }
        let seen = try f.alice.share(for: share.url).participants.first { $0.participantID == bobID }
        #expect(seen?.role == .unknown)
        #expect(seen?.permission == .unknown)
        #expect(seen?.acceptanceStatus == .unknown)
        let itemID = RecordID(recordName: "item", zoneID: RecordZoneID(zoneName: "Notes", ownerName: "_alice"))
        #expect(await errorCode { try f.bob.record(for: itemID) } == .unknownItem)
        #expect(await errorCode { try await f.bob.setTitle("x", for: share.url) } == .permissionFailure)
        #expect(await errorCode { try await f.bob.addParticipant(LookupInfo(emailAddress: "carol@example.com"), permission: .readOnly, to: share.url) } == .permissionFailure)

        // The share's row: an unknown public permission does not make the share public.
        try store.environment.write { txn in
            var state = try #require(try models.share(txn, token))
            state.publicPermission = PBPermission(rawValue: 9)!
            try models.put(txn, models.shares, Array(token.utf8), state)
        }
        #expect(await errorCode { try await f.carol.shareMetadata(for: share.url) } == .unknownItem)
        #expect(await errorCode { try f.carol.shareMetadataWithoutLogging(for: share.url) } == .unknownItem)
        let bobMetadata = try await f.alice.shareMetadata(for: share.url)
        #expect(await errorCode { try await f.carol.accept(bobMetadata) } == .permissionFailure)
        #expect(await errorCode { try f.carol.record(for: itemID) } == .unknownItem)

        // The audit sees both rows; a rebuild puts them right.
        var report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("audit1"))
        #expect(!report.ok)
        #expect(Set(report.projectionDifferences.keys).isSuperset(of: ["rm_participants", "rm_shares"]), "\(report.projectionDifferences)")
        _ = try await LedgerAudit(f.ledger).rebuildReadModels()
        report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("audit2"))
        #expect(report.ok, "\(report.problems)")
        #expect(try f.bob.record(for: itemID)["name"] == .string("milk"))
        await f.ledger.close()
    }

    /// The NDJSON export of a small sharing ledger, and the ledger's last events.
    static func export(_ f: SharingFixture) throws -> [UInt8] {
        let file = f.dir.child("export.ndjson")
        _ = FileManager.default.createFile(atPath: file, contents: nil)
        let handle = try #require(FileHandle(forWritingAtPath: file))
        try LedgerAudit(f.ledger).export(to: handle)
        try handle.close()
        return Array(try Data(contentsOf: URL(fileURLWithPath: file)))
    }

    /// Events continuing `ledger`'s head with `events` (domain events by `actor` appended to the
    /// share's stream, one command each), with the hash chain recomputed as a forger would.
    static func forgedEvents(_ ledger: ShareLedger, token: String, actor: String = "_alice", _ events: [DomainEvent]) throws
        -> [(fields: EnvelopeCodec.Fields, stored: [UInt8], envelope: EventEnvelope)]
    {
        var head = try ledger.log.head()
        let stream = Streams.share(token)
        let streamEvents = try ledger.log.events(after: .start, limit: 10_000).filter { $0.stream == stream }
        var streamVersion = UInt64(streamEvents.count)
        var streamLast = streamEvents.last?.position.rawValue ?? 0
        var out: [(fields: EnvelopeCodec.Fields, stored: [UInt8], envelope: EventEnvelope)] = []
        for event in events {
            let position = head.position.rawValue + 1
            let fields = EnvelopeCodec.Fields(
                position: position, recordedAtMicros: head.recordedAtMicros + 1, container: SharingFixture.container, actor: actor,
                commandID: UUID(), correlationID: nil, causationID: nil, schemaVersion: 1, stream: stream,
                streamVersion: streamVersion + 1, streamPreviousPosition: streamLast, eventType: event.typeName,
                payload: try event.payload(), previousHash: head.hash.bytes)
            let (stored, hash) = EnvelopeCodec.encode(fields)
            let envelope = try stored.withUnsafeBytes { raw throws(LedgerError) in try EnvelopeCodec.decode(raw, key: position) }
            out.append((fields, stored, envelope))
            head = LogHead(position: LogPosition(position), hash: EventHash(bytes: hash)!, recordedAtMicros: fields.recordedAtMicros)
            streamVersion += 1
            streamLast = position
        }
        return out
    }

    /// Lines continuing `ledger`'s head with `events` (``forgedEvents(_:token:actor:_:)``).
    static func forgedLines(_ ledger: ShareLedger, token: String, actor: String = "_alice", _ events: [DomainEvent]) throws -> [UInt8] {
        try forgedEvents(ledger, token: token, actor: actor, events).flatMap { Array(LogNDJSON.line($0.envelope).utf8) + [UInt8(ascii: "\n")] }
    }

    /// Writes `events` into `ledger` behind its back, as someone with write access to its files would:
    /// chained, with their stream and command records, and projected into the live read models (so
    /// that they match a rebuild). Returns the position of the first.
    @discardableResult
    static func forgeBehindTheBack(_ ledger: ShareLedger, token: String, actor: String, _ events: [DomainEvent]) throws -> UInt64 {
        let forged = try forgedEvents(ledger, token: token, actor: actor, events)
        let store = ledger.log.store
        let projector = Projector(models: store.models)
        try store.environment.write { txn in
            for (fields, stored, _) in forged {
                try txn.put(store.log, key: BigEndian.bytes(of: fields.position), value: stored)
                try store.writeStreamRecord(
                    txn, key: LogStore.streamKey(container: fields.container, stream: fields.stream), version: fields.streamVersion,
                    last: fields.position)
                try store.writeCommandRecord(
                    txn, key: LogStore.commandKey(container: fields.container, commandID: fields.commandID), first: fields.position,
                    count: 1, streamVersion: 0)
                let event = try #require(
                    try DomainEvent.decode(type: fields.eventType, schemaVersion: 1, payload: fields.payload, position: fields.position))
                try projector.apply(
                    event,
                    Projector.Context(
                        position: fields.position, recordedAtMicros: fields.recordedAtMicros, container: fields.container,
                        actor: fields.actor), txn)
            }
            // What the writer records after projecting (the derived state then reflects the head).
            try store.writeDerivedPosition(txn, try store.readHead(txn))
        }
        return forged.first?.fields.position ?? 0
    }

    /// An empty ledger in `dir` with no worker: the target of an import.
    static func emptyLedger(_ dir: TemporaryDirectory) throws -> ShareLedger {
        var configuration = ShareLedger.Configuration(path: dir.child("ledger"), durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        return try ShareLedger.open(configuration)
    }

    static func importing(_ bytes: [UInt8], into ledger: ShareLedger, _ dir: TemporaryDirectory, _ name: String) async throws(LedgerError) -> ImportSummary {
        let file = dir.child(name)
        _ = FileManager.default.createFile(atPath: file, contents: Data(bytes))
        guard let handle = FileHandle(forReadingAtPath: file) else { throw LedgerError(.storageFailure, "no file") }
        defer { try? handle.close() }
        return try await LedgerAudit(ledger).importLog(from: handle)
    }

    @Test("unknown enum values forged into the log: an import refuses them; written behind the ledger's back they grant nothing and the audit names them")
    func forgedUnknownEnums() async throws {
        let (f, share) = try await SharingFixture.withShare()
        var added = Shareledger_Events_V1_ParticipantAdded()
        added.token = share.token.text
        added.participantID = "forged"
        added.userRecordName = "_bob"
        added.lookupInfo.userRecordName = "_bob"
        added.role = PBRole(rawValue: 42)!
        added.permission = PBPermission(rawValue: 9)!
        var accepted = Shareledger_Events_V1_ShareAccepted()
        accepted.token = share.token.text
        accepted.participantID = "forged"
        accepted.userRecordName = "_bob"
        let forged: [DomainEvent] = [.participantAdded(added), .shareAccepted(accepted)]
        let file = try Self.export(f) + (try Self.forgedLines(f.ledger, token: share.token.text, forged))

        // The target must be empty: a fresh directory. The import is refused, nothing written.
        let dir = TemporaryDirectory()
        let ledger = try HostileStoredDataTests.emptyLedger(dir)
        let first = try f.ledger.log.head().position.rawValue + 1
        do {
            _ = try await Self.importing(file, into: ledger, dir, "file.ndjson")
            Issue.record("the forged import was accepted")
        } catch {
            #expect(error.code == .invalidArguments)
            #expect(error.message.contains("event \(first) (shareledger.events.v1.ParticipantAdded by _alice)"), "\(error.message)")
        }
        #expect(try ledger.log.head().position == .start)
        await ledger.close()

        // Behind the ledger's back: the values read as unknown and grant nothing.
        try Self.forgeBehindTheBack(f.ledger, token: share.token.text, actor: "_alice", forged)
        let seen = try f.alice.share(for: share.url).participants.first { $0.participantID == "forged" }
        #expect(seen?.role == .unknown)
        #expect(seen?.permission == .unknown)
        // Accepted with an unknown permission: Bob may read (he accepted), never write or manage.
        var item = try f.bob.record(for: RecordID(recordName: "item", zoneID: RecordZoneID(zoneName: "Notes", ownerName: "_alice")))
        item["name"] = .string("forged")
        #expect(await errorCode { try await f.bob.save(item) } == .permissionFailure)
        #expect(await errorCode { try await f.bob.setTitle("forged", for: share.url) } == .permissionFailure)
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("audit"))
        #expect(!report.ok)
        #expect(report.firstBadPosition == first, "\(report.problems)")
        await f.ledger.close()
    }

    @Test("a forged import whose events contradict each other is refused; written behind the ledger's back, it is projected without a crash")
    func forgedContradictions() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let token = share.token.text
        // An invitation to an email with no account, verified by nobody, then removed: the counter of
        // unmatched invitations must not go below zero.
        var added = Shareledger_Events_V1_ParticipantAdded()
        added.token = token
        added.participantID = "p1"
        added.lookupInfo.emailAddress = "nobody@nowhere.org"
        added.role = .privateUser
        added.permission = .readOnly
        var verified = Shareledger_Events_V1_ParticipantVerified()
        verified.token = token
        verified.participantID = "p1"
        var removed = Shareledger_Events_V1_ParticipantRemoved()
        removed.token = token
        removed.participantID = "p1"
        // The owner removed, an acceptance of nobody, a second acceptance.
        var ownerRemoved = Shareledger_Events_V1_ParticipantRemoved()
        ownerRemoved.token = token
        ownerRemoved.participantID = share.owner.participantID
        var ghost = Shareledger_Events_V1_ShareAccepted()
        ghost.token = token
        ghost.participantID = "nobody"
        let file = try Self.export(f) + (try Self.forgedLines(f.ledger, token: token, [
            .participantAdded(added), .participantVerified(verified), .participantRemoved(removed), .participantRemoved(ownerRemoved),
            .shareAccepted(ghost), .participantRemoved(removed),
        ]))
        let dir = TemporaryDirectory()
        let ledger = try HostileStoredDataTests.emptyLedger(dir)
        let outcome = await errorCode { try await Self.importing(file, into: ledger, dir, "file.ndjson") }
        // Refused (they break the sharing rules), and the ledger still answers.
        #expect(outcome == .invalidArguments, "\(String(describing: outcome))")
        _ = try ledger.statistics()
        #expect(try LedgerAudit(ledger).audit(scratchPath: dir.child("audit")).ok)
        await ledger.close()
        // Written behind the ledger's back, they are projected without a crash (no counter below
        // zero), and the audit names the first.
        let first = try Self.forgeBehindTheBack(f.ledger, token: token, actor: "_alice", [
            .participantAdded(added), .participantVerified(verified), .participantRemoved(removed), .participantRemoved(ownerRemoved),
            .shareAccepted(ghost), .participantRemoved(removed),
        ])
        _ = try f.ledger.statistics()
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("audit"))
        #expect(!report.ok)
        #expect(report.firstBadPosition == first + 1, "\(report.problems)")
        await f.ledger.close()
    }
}
