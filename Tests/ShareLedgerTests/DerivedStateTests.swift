import Foundation
import LMDB
@testable import ShareLedger
import ShareLedgerAudit
import Synchronization
import TestSupport
import Testing

/// The derived state kept off the commit path (``DerivedState``, format 4): where it lives, how it is
/// brought up to the log after a process crash, derived again after a machine crash or when it is not
/// this log's, and how ledgers that kept it with the log are moved.
@Suite("Derived state apart from the log")
struct DerivedStateTests {
    static func configuration(_ path: String, readOnly: Bool = false) -> ShareLedger.Configuration {
        var configuration = ShareLedger.Configuration(
            path: path, createIfMissing: false, readOnly: readOnly, durability: .unsafeNoSync, clock: SteppingClock())
        configuration.residualTaskWorker = nil
        return configuration
    }

    /// Names of the named databases of the environment at `path`.
    static func databaseNames(_ path: String) throws -> [String] {
        let environment = try Environment(options: EnvironmentOptions(path: path, readOnly: true))
        defer { environment.close() }
        return try environment.databaseNames()
    }

    /// A share with two participants, one accepted, and a few more actions.
    static func act(_ f: SharingFixture, title: String) async throws {
        _ = try await f.alice.save(RecordZone(zoneID: RecordZoneID(zoneName: title)))
        let root = RecordID(recordName: "root", zoneID: RecordZoneID(zoneName: title))
        _ = try await f.alice.save(Record(recordType: "List", recordID: root))
        let share = try await f.alice.share(rootRecord: root, title: title)
        _ = try await f.alice.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_bob")), permission: .readWrite, to: share.url)
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "carol@example.com"), permission: .readOnly, to: share.url)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
    }

    /// ``act(_:title:)`` on `f`, then its ledger closed: its path and its read-model digest.
    static func actAndClose(_ f: SharingFixture) async throws -> (path: String, digest: (head: LogHead, digest: String)) {
        try await act(f, title: "A")
        let digest = try f.ledger.readModelDigest()
        await f.ledger.close()
        return (f.dir.child("ledger"), digest)
    }

    @Test("a new ledger keeps its read models, stream and command records in derived/, its log, checkpoints and the worker's bookkeeping in data.mdb")
    func layout() async throws {
        let f = try await SharingFixture()
        try await Self.act(f, title: "A")
        #expect(f.ledger.log.store.defersDerivedState)
        #expect(try f.ledger.log.statistics().formatVersion == 5)
        await f.ledger.close()
        let path = f.dir.child("ledger")
        let primary = try Self.databaseNames(path)
        #expect(Set(primary) == ["log", "meta", "checkpoints", "worker_tasks", "worker_state"])
        let derived = try Self.databaseNames(path + "/" + DerivedState.directoryName)
        #expect(derived.contains("rm_shares") && derived.contains("idx_history_journal") && derived.contains("derived_meta"))
        #expect(derived.contains("commands") && derived.contains("streams"))
        #expect(!derived.contains("worker_tasks"))
    }

    /// Closes the fixture's ledger and copies its derived state aside: the ledger's path, its
    /// `derived/` directory and the copy's path.
    static func closeKeepingDerived(_ f: SharingFixture) async throws -> (path: String, derived: String, saved: String) {
        await f.ledger.close()
        let path = f.dir.child("ledger")
        let derived = path + "/" + DerivedState.directoryName
        let saved = f.dir.child("saved-derived")
        try FileManager.default.copyItem(atPath: derived, toPath: saved)
        return (path, derived, saved)
    }

    @Test(
        "a read of this process's writer's last commit does not look for a gap between derived/ and the log; after another process's commit, the next read looks and sees that commit"
    )
    func readsOfOwnCommitNeedNoGapLook() async throws {
        let f = try await SharingFixture()
        let share = try await f.makeHierarchy(title: "Gap")
        _ = try await f.alice.addParticipant(
            LookupInfo(userRecordID: RecordID(userRecordName: "_bob")), permission: .readOnly, to: share.url)
        let store = f.ledger.log.store
        let before = store.derivedGapLooks.load(ordering: .relaxed)
        for _ in 0..<3 {
            #expect(try f.alice.ownedShares().count == 1)
            #expect(try f.bob.share(for: share.url).participants.count == 2)
        }
        #expect(store.derivedGapLooks.load(ordering: .relaxed) == before, "a read of this writer's commit looked for a gap")
        // Another process commits: the next read's snapshots are not this writer's last commit.
        let forget = try await runCLI([
            "forget", "--path", f.dir.child("ledger"), "--user", "_bob", "--container", SharingFixture.container,
        ])
        #expect(forget.exited(0), "\(forget.summary)")
        let shown = try f.alice.ownedShares().first?.participants.first { $0.userIdentity.userRecordID?.recordName == "_bob" }
        #expect(shown?.userIdentity.personalDataErased == true, "the other process's forget is not seen")
        #expect(store.derivedGapLooks.load(ordering: .relaxed) > before)
        await f.ledger.close()
    }

    @Test("derived state left behind the log (a crash between the two commits) is brought up to the log when the ledger opens")
    func behindIsCaughtUp() async throws {
        let f = try await SharingFixture()
        try await Self.act(f, title: "A")
        let (path, derived, saved) = try await Self.closeKeepingDerived(f)

        let ledger = try ShareLedger.open(Self.configuration(path))
        let container = ledger.container(SharingFixture.container, userRecordName: "_alice")
        _ = try await container.save(RecordZone(zoneID: RecordZoneID(zoneName: "B")))
        let expected = try ledger.readModelDigest()
        await ledger.close()

        // The derived state as it was before the last actions: the log is ahead of it.
        try FileManager.default.removeItem(atPath: derived)
        try FileManager.default.copyItem(atPath: saved, toPath: derived)
        let reopened = try ShareLedger.open(Self.configuration(path))
        let digest = try reopened.readModelDigest()
        #expect(digest.head == expected.head)
        #expect(digest.digest == expected.digest)
        #expect(try LedgerAudit(reopened).audit(scratchPath: f.dir.child("audit")).ok)
        await reopened.close()
    }

    @Test("after a machine crash (unflushed derived state, another boot) the derived state is derived again from the log; read-only, opening says what to do")
    func machineCrashDerivesAgain() async throws {
        let f = try await SharingFixture()
        let (path, expected) = try await Self.actAndClose(f)
        // Marked unflushed by another boot, and the derived file damaged as a crash may leave it.
        do {
            let environment = try Environment(options: EnvironmentOptions(path: path))
            let meta = try environment.openDatabases([("meta", [])])[0]
            try environment.write { txn in
                try txn.put(meta, key: Array("derived_state".utf8), value: [1] + Array(repeating: 0xAB, count: 16))
            }
            environment.close()
        }
        let derivedFile = path + "/" + DerivedState.directoryName + "/data.mdb"
        let handle = try #require(FileHandle(forWritingAtPath: derivedFile))
        try handle.seek(toOffset: 3 * 4096)
        try handle.write(contentsOf: Data(repeating: 0x5A, count: 4 * 4096))
        try handle.close()

        let readOnly = #expect(throws: LedgerError.self) { try ShareLedger.open(Self.configuration(path, readOnly: true)) }
        #expect(readOnly?.code == .readOnly)
        #expect(readOnly?.message.contains("derived again") == true, "\(String(describing: readOnly))")

        let ledger = try ShareLedger.open(Self.configuration(path))
        #expect(try ledger.readModelDigest() == expected)
        #expect(try LedgerAudit(ledger).audit(scratchPath: f.dir.child("audit")).ok)
        await ledger.close()
        // Closed cleanly: marked flushed, so a read-only open works again.
        let again = try ShareLedger.open(Self.configuration(path, readOnly: true))
        #expect(try again.readModelDigest() == expected)
        await again.close()
    }

    @Test("a derived state that is not this log's (copied from another ledger) is cleared and derived from the start")
    func foreignDerivedState() async throws {
        let a = try await SharingFixture("foreignA")
        try await Self.act(a, title: "A")
        await a.ledger.close()
        let b = try await SharingFixture("foreignB", seed: 7)
        try await Self.act(b, title: "B")
        _ = try await b.alice.save(RecordZone(zoneID: RecordZoneID(zoneName: "Only in B")))
        let expected = try b.ledger.readModelDigest()
        await b.ledger.close()
        let target = b.dir.child("ledger") + "/" + DerivedState.directoryName
        try FileManager.default.removeItem(atPath: target)
        try FileManager.default.copyItem(atPath: a.dir.child("ledger") + "/" + DerivedState.directoryName, toPath: target)

        let ledger = try ShareLedger.open(Self.configuration(b.dir.child("ledger")))
        #expect(try ledger.readModelDigest() == expected)
        await ledger.close()
    }

    @Test("a missing derived/ (a backup of data.mdb alone) is derived again when opened for writing")
    func missingDerivedState() async throws {
        let f = try await SharingFixture()
        let (path, expected) = try await Self.actAndClose(f)
        try FileManager.default.removeItem(atPath: path + "/" + DerivedState.directoryName)
        let readOnly = #expect(throws: LedgerError.self) { try ShareLedger.open(Self.configuration(path, readOnly: true)) }
        #expect(readOnly?.code == .readOnly)
        let ledger = try ShareLedger.open(Self.configuration(path))
        #expect(try ledger.readModelDigest() == expected)
        await ledger.close()
    }

    @Test("a ledger that kept its read models with the log (the release fixture) answers the same after they move to derived/")
    func movesOlderLayout() async throws {
        let dir = TemporaryDirectory()
        let path = try ReleaseFixtureTests.copy(dir)
        // Opened for writing once by a layout that keeps them with the log (adds worker_state),
        // then read as it is.
        do {
            var configuration = EventLog.Configuration(path: path, createIfMissing: false, durability: .unsafeNoSync)
            configuration = ReadModels.ledgerConfiguration(configuration)
            configuration.defersDerivedState = false
            let log = try EventLog.open(configuration)
            await log.close()
        }
        #expect(try Self.databaseNames(path).contains("rm_shares"))
        let before = try ShareLedger.open(Self.configuration(path, readOnly: true))
        let expected = try before.readModelDigest()
        #expect(!before.log.store.defersDerivedState)
        await before.close()

        let ledger = try ShareLedger.open(Self.configuration(path))
        #expect(ledger.log.store.defersDerivedState)
        #expect(try ledger.readModelDigest() == expected)
        #expect(try LedgerAudit(ledger).audit(scratchPath: dir.child("audit")).ok)
        await ledger.close()
        let primary = try Self.databaseNames(path)
        #expect(!primary.contains("rm_shares") && !primary.contains("commands") && primary.contains("worker_tasks"))
        #expect(try Self.databaseNames(path + "/" + DerivedState.directoryName).contains("rm_shares"))
    }

    @Test("while another open holds the ledger in the older layout, opening does not move its databases; opened alone, it does")
    func noMoveWhileOpenElsewhere() async throws {
        let dir = TemporaryDirectory()
        let path = try ReleaseFixtureTests.copy(dir)
        var older = ReadModels.ledgerConfiguration(EventLog.Configuration(path: path, createIfMissing: false, durability: .unsafeNoSync))
        older.defersDerivedState = false
        let first = try EventLog.open(older)
        let second = try ShareLedger.open(Self.configuration(path))
        #expect(!second.log.store.defersDerivedState)
        #expect(try LedgerAudit(second).audit(scratchPath: dir.child("audit")).ok)
        await second.close()
        await first.close()
        let alone = try ShareLedger.open(Self.configuration(path))
        #expect(alone.log.store.defersDerivedState)
        #expect(try LedgerAudit(alone).audit(scratchPath: dir.child("audit2")).ok)
        await alone.close()
    }

    @Test("stream versions and command ids are derived again with the read models: a retried command is still answered, a stream continues")
    func recordsAreDerived() async throws {
        let dir = TemporaryDirectory()
        let path = dir.child("ledger")
        let log = try ShareLedger.openLog(EventLog.Configuration(path: path, durability: .unsafeNoSync))
        let metadata = Fixtures.metadata()
        let first = try await log.append([Fixtures.draft("a"), Fixtures.draft("b")], to: "s", metadata: metadata)
        await log.close()
        try FileManager.default.removeItem(atPath: path + "/" + DerivedState.directoryName)
        let reopened = try ShareLedger.openLog(EventLog.Configuration(path: path, createIfMissing: false, durability: .unsafeNoSync))
        let retried = try await reopened.append([Fixtures.draft("a"), Fixtures.draft("b")], to: "s", metadata: metadata)
        #expect(retried.wasAlreadyApplied && retried.positions == first.positions && retried.streamVersion == 2)
        #expect(try reopened.streamVersion("s", container: Fixtures.container) == 2)
        let next = try await reopened.append([Fixtures.draft("c")], to: "s", expectedVersion: .exact(2), metadata: Fixtures.metadata())
        #expect(next.streamVersion == 3)
        await reopened.close()
    }

    @Test("command records made again from events (derived, replicated): the sharing namespace records 0 whatever its type, a raw append its stream version; a gap starts a record or is refused")
    func commandRecordsFromEvents() async throws {
        let f = try await SharingFixture()
        let store = f.ledger.log.store
        let command = UUID()
        func envelope(_ position: UInt64, type: String, version: UInt64, id: UUID = command) throws -> EventEnvelope {
            let fields = EnvelopeCodec.Fields(
                position: position, recordedAtMicros: 1, container: "c", actor: "a", commandID: id, correlationID: nil,
                causationID: nil, schemaVersion: 1, stream: "s", streamVersion: version, streamPreviousPosition: 0,
                eventType: type, payload: [], previousHash: [UInt8](repeating: 0, count: 32))
            let (stored, _) = EnvelopeCodec.encode(fields)
            return try stored.withUnsafeBytes { raw throws(LedgerError) in try EnvelopeCodec.decode(raw, key: position) }
        }
        let key = LogStore.commandKey(container: "c", commandID: command)
        let other = UUID()
        let otherKey = LogStore.commandKey(container: "c", commandID: other)
        let steps: [(EventEnvelope, refusingGaps: Bool, key: [UInt8])] = [
            // A type of the sharing namespace this release does not know still records 0, as its writer did.
            (try envelope(100, type: "shareledger.events.v9.SomethingNew", version: 7), true, key),
            (try envelope(101, type: "shareledger.events.v9.SomethingNew", version: 8), true, key),
            // Not the next position: refused, or a new record.
            (try envelope(105, type: "shareledger.events.v9.SomethingNew", version: 9), true, key),
            (try envelope(105, type: "shareledger.events.v9.SomethingNew", version: 9), false, key),
            // A raw append records its stream version.
            (try envelope(200, type: "app.Note", version: 3, id: other), true, otherKey),
            (try envelope(201, type: "app.Note", version: 4, id: other), true, otherKey),
        ]
        var results: [(Bool, UInt64?, UInt32?)] = []
        for step in steps {
            let result = try store.environment.write { txn -> (Bool, UInt64?, UInt32?) in
                let written = try store.recordCommand(txn, step.0, position: step.0.position.rawValue, refusingGaps: step.refusingGaps)
                let stored = try store.commandRecord(txn, key: step.key)
                return (written, stored?.streamVersion, stored?.count)
            }
            results.append(result)
        }
        #expect(results.map(\.0) == [true, true, false, true, true, true])
        #expect(results.map(\.1) == [0, 0, 0, 0, 3, 4])
        #expect(results.map(\.2) == [1, 2, 2, 1, 1, 2])
        await f.ledger.close()
    }

    @Test("the writer skips looking at the derived state only right after its own commit: a commit to either file in between sends it to look")
    func consistentCommitIsFollowedOnlyWithNothingBetween() async throws {
        let f = try await SharingFixture()
        let store = f.ledger.log.store
        let derivedMeta = try #require(store.derivedMeta)
        // A write transaction that writes nothing commits nothing: it only asks.
        func follows() throws -> Bool { try store.environment.write { txn in store.followsConsistentCommit(txn) } }
        func commitThroughWriter() async throws {
            _ = try await f.alice.save(RecordZone(zoneID: RecordZoneID(zoneName: "Z\(UUID().uuidString.prefix(8))")))
        }
        try await commitThroughWriter()
        #expect(try follows(), "right after the writer's commit")
        #expect(try follows(), "a transaction that wrote nothing took no id")
        // A commit to the log's file alone (as another process's, whose companion commit was lost).
        try store.environment.write { txn in try txn.put(store.meta, key: Array("test-log-only".utf8), value: [1]) }
        #expect(try !follows(), "the log's file moved on")
        try await commitThroughWriter()
        #expect(try follows())
        // A commit to derived/ alone.
        try store.environment.write { txn in try txn.put(derivedMeta, key: Array("test-derived-only".utf8), value: [1]) }
        #expect(try !follows(), "derived/ moved on")
        try await commitThroughWriter()
        #expect(try follows())
        #expect(try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("audit")).ok)
        await f.ledger.close()
    }
}
