import ByteKeys
import Foundation
import LMDB
@testable import ShareLedger
@testable import ShareLedgerAudit
import TestSupport
import Testing

/// A rebuild that rewrites the read models whole fills their second copies (twins, format 5) in
/// bounded transactions and switches them in with one key (``ReadModelRebuild/fillUnused(_:in:from:in:resume:budget:)``,
/// ``ReadModelRebuild/finishFill(_:in:from:in:limit:force:)``).
@Suite("Rebuild into the second copies")
struct TwinRebuildTests {
    /// A ledger with a few shares, participants, fetches and completed tasks.
    private func busyLedger(_ label: String = #function) async throws -> SharingFixture {
        let f = try await SharingFixture(label)
        try await DerivedStateTests.act(f, title: "A")
        try await DerivedStateTests.act(f, title: "B")
        let share = try await f.makeHierarchy()
        _ = try await f.carol.shareMetadatas(for: [share.url])
        try await f.ledger.completeResidualTasks()
        return f
    }

    /// Whether the read transactions of `store` use the twins now.
    private func usesTwins(_ store: LogStore) throws -> Bool { try store.read { $0.usesTwins } }

    /// Entries in the copies of the read models not in use.
    private func unusedEntries(_ store: LogStore) throws -> Int {
        try store.read { txn in try store.models.all.reduce(0) { $0 + (try txn.statistics(txn.unused($1)).entries) } }
    }

    private func digest(_ f: SharingFixture) throws -> String { try f.ledger.readModelDigest().digest }

    /// Fills the unused copies of `store` from `scratch`, one transaction of `budget` bytes per step,
    /// until done or after `maximum` steps, calling `between` with the step's number after each.
    /// Returns where the fill stopped (nil: done) and the steps taken.
    private func fill(
        _ store: LogStore, from scratch: LogStore, budget: Int, maximum: Int = .max,
        between: (Int) async throws -> Void = { _ in }
    ) async throws -> (point: ReadModelRebuild.FillPoint?, steps: Int) {
        var point: ReadModelRebuild.FillPoint? = nil
        var steps = 0
        repeat {
            let from = point
            point = try store.environment.write { txn in
                try scratch.environment.read { built in
                    try ReadModelRebuild.fillUnused(store.models, in: txn, from: scratch.models, in: built, resume: from, budget: budget)
                }
            }
            steps += 1
            try await between(steps)
        } while point != nil && steps < maximum
        return (point, steps)
    }

    @Test("rewriting everything fills the second copies and switches them in, and back; reopened, the ledger reads the copy in use")
    func switchesAndBack() async throws {
        let f = try await busyLedger()
        let store = f.ledger.log.store
        #expect(store.hasTwins)
        let healthy = try digest(f)
        let shared = try f.bob.participatingShares(status: [.accepted]).count
        #expect(try !usesTwins(store))

        var outcome = try await LedgerAudit(f.ledger).rebuildReadModels(rewritingEverything: true)
        #expect(outcome.switchedCopies)
        #expect(outcome.rewrittenDatabases == store.models.all.map(\.name))
        #expect(try usesTwins(store))
        #expect(try digest(f) == healthy)
        #expect(try unusedEntries(store) == 0, "the copies switched out are emptied")
        #expect(try f.bob.participatingShares(status: [.accepted]).count == shared)

        // Writes after the switch go to the copy in use.
        _ = try await f.alice.save(RecordZone(zoneID: RecordZoneID(zoneName: "After")))
        let after = try digest(f)
        #expect(after != healthy)
        outcome = try await LedgerAudit(f.ledger).rebuildReadModels(rewritingEverything: true)
        #expect(try outcome.switchedCopies && !usesTwins(store))
        #expect(try digest(f) == after)
        outcome = try await LedgerAudit(f.ledger).rebuildReadModels(rewritingEverything: true)
        #expect(try usesTwins(store))
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok, "\(report.problems)")
        await f.ledger.close()

        for readOnly in [true, false] {
            let ledger = try ShareLedger.open(DerivedStateTests.configuration(f.dir.child("ledger"), readOnly: readOnly))
            #expect(try usesTwins(ledger.log.store))
            #expect(try ledger.readModelDigest().digest == after)
            #expect(try ledger.log.statistics().formatVersion == 5)
            await ledger.close()
        }
    }

    @Test("more differences than one transaction may change: the second copies are filled and switched in, not rewritten in place")
    func manyDifferences() async throws {
        let f = try await busyLedger()
        let store = f.ledger.log.store
        let healthy = try digest(f)
        let models = store.models
        try store.environment.write { txn in
            for index in 0..<(ReadModelRebuild.changeLimit + 10) {
                try txn.put(models.sharesByOwner, key: Array("forged\u{0}\(index)".utf8), value: [])
            }
        }
        #expect(try digest(f) != healthy)
        let outcome = try await LedgerAudit(f.ledger).rebuildReadModels(rewritingEverything: false)
        #expect(outcome.switchedCopies)
        #expect(try digest(f) == healthy)
        #expect(try usesTwins(store) && unusedEntries(store) == 0)
        // A few differences are still changed in place, in the copy in use.
        try store.environment.write { txn in try txn.put(models.sharesByOwner, key: Array("forged".utf8), value: []) }
        let inPlace = try await LedgerAudit(f.ledger).rebuildReadModels(rewritingEverything: false)
        #expect(!inPlace.switchedCopies && inPlace.changedEntries == 1)
        #expect(try usesTwins(store) && digest(f) == healthy)
        await f.ledger.close()
    }

    @Test("a fill in many small transactions, with events committed between them, ends equal to a rebuild from the log")
    func fillWithWritesBetween() async throws {
        let f = try await busyLedger()
        let store = f.ledger.log.store
        let scratch = try LogStore.openLedger(EventLog.Configuration(path: f.dir.child("scratch"), durability: .unsafeNoSync))
        defer { scratch.environment.close() }
        var replayed = try LogReplay.replay(from: store, into: scratch)

        let (_, steps) = try await fill(store, from: scratch, budget: 200) { step in
            if step == 5 {
                // The live read models move on; the copies being filled do not see it.
                try await DerivedStateTests.act(f, title: "During")
                #expect(try !usesTwins(store))
            }
        }
        #expect(steps > 20, "a budget of 200 bytes takes many transactions (\(steps))")

        // The copies hold the rebuild as of the replay; the read models in use moved on.
        #expect(try !ReadModelRebuild.compare(store, scratch).differences.isEmpty)
        replayed = try LogReplay.replay(from: store, into: scratch, after: replayed)
        func finish(limit: Int) throws -> ReadModelRebuild.SwapOutcome? {
            try store.environment.write { txn in
                try scratch.environment.read { built in
                    try ReadModelRebuild.finishFill(store, in: txn, from: scratch.models, in: built, limit: limit, force: false)
                }
            }
        }
        #expect(try finish(limit: 3) == nil, "more than 3 entries differ: nothing switched")
        #expect(try !usesTwins(store))
        let outcome = try finish(limit: ReadModelRebuild.changeLimit)
        #expect(outcome != nil && (outcome?.changedEntries ?? 0) > 0, "switched, with the changes since the fill")
        #expect(try replayed == f.ledger.log.head().position.rawValue)
        #expect(try usesTwins(store))
        #expect(try ReadModelRebuild.compare(store, scratch).differences.isEmpty)
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("audit"))
        #expect(report.ok, "\(report.problems)")
        await f.ledger.close()
    }

    @Test("a fill cut short leaves the read models in use untouched; the next rebuild empties the copies and fills them again")
    func interruptedFill() async throws {
        let f = try await busyLedger()
        let store = f.ledger.log.store
        let healthy = try digest(f)
        let scratch = try LogStore.openLedger(EventLog.Configuration(path: f.dir.child("scratch"), durability: .unsafeNoSync))
        try LogReplay.replay(from: store, into: scratch)
        // A crash after three steps: the copies hold part of a rebuild, with a stray entry.
        let (point, _) = try await fill(store, from: scratch, budget: 500, maximum: 3)
        scratch.environment.close()
        try store.environment.write { txn in try txn.put(txn.unused(store.models.counters), key: Array("stray".utf8), value: [1]) }
        #expect(try point != nil && unusedEntries(store) > 0)
        #expect(try !usesTwins(store) && digest(f) == healthy)

        let outcome = try await LedgerAudit(f.ledger).rebuildReadModels(rewritingEverything: true)
        #expect(try outcome.switchedCopies && usesTwins(store))
        #expect(try digest(f) == healthy)
        await f.ledger.close()
    }

    @Test("derived state derived again from the start after a switch is derived into the copy in use")
    func derivedAgainAfterSwitch() async throws {
        let f = try await busyLedger()
        let store = f.ledger.log.store
        let healthy = try digest(f)
        _ = try await LedgerAudit(f.ledger).rebuildReadModels(rewritingEverything: true)
        #expect(try usesTwins(store))
        // A position whose hash is not the log's: everything is cleared and derived again on open.
        let head = try f.ledger.log.head()
        await f.ledger.close()
        let environment = try Environment(options: EnvironmentOptions(path: f.dir.child("ledger") + "/" + DerivedState.directoryName))
        let meta = try environment.openDatabases([("derived_meta", [])], create: false)[0]
        try environment.write { txn in
            try txn.put(meta, key: Array("position".utf8), value: BigEndian.bytes(of: head.position.rawValue) + [UInt8](repeating: 7, count: 32))
        }
        environment.close()

        let ledger = try ShareLedger.open(DerivedStateTests.configuration(f.dir.child("ledger")))
        #expect(try usesTwins(ledger.log.store))
        #expect(try ledger.readModelDigest().digest == healthy)
        #expect(try unusedEntries(ledger.log.store) == 0)
        await ledger.close()
    }

    @Test("a format-4 ledger (no second copies): read-only it is read as it is; opened for writing it gets them, empty, and format 5")
    func formatFourLedger() async throws {
        let f = try await busyLedger()
        let healthy = try digest(f)
        let names = f.ledger.log.store.models.all.map(\.name)
        await f.ledger.close()
        // What a release of format 4 left: no twins, format 4.
        let path = f.dir.child("ledger")
        let derived = try Environment(options: EnvironmentOptions(path: path + "/" + DerivedState.directoryName, maxDatabases: 64))
        let twins = try derived.openDatabases(names.map { ($0 + Database.twinSuffix, DatabaseFlags()) }, create: false)
        try derived.write { txn in for twin in twins { try txn.dropDatabase(twin) } }
        #expect(try !derived.databaseNames().contains { $0.hasSuffix(Database.twinSuffix) })
        derived.close()
        let main = try Environment(options: EnvironmentOptions(path: path))
        let meta = try main.openDatabases([("meta", [])], create: false)[0]
        try main.write { txn in try txn.put(meta, key: Array("format_version".utf8), value: BigEndian.bytes(of: UInt32(4))) }
        main.close()

        let reader = try ShareLedger.open(DerivedStateTests.configuration(path, readOnly: true))
        #expect(!reader.log.store.hasTwins)
        #expect(try reader.log.statistics().formatVersion == 4)
        #expect(try reader.readModelDigest().digest == healthy)
        await reader.close()

        let writer = try ShareLedger.open(DerivedStateTests.configuration(path))
        #expect(writer.log.store.hasTwins)
        #expect(try writer.log.statistics().formatVersion == 5)
        #expect(try writer.readModelDigest().digest == healthy)
        let outcome = try await LedgerAudit(writer).rebuildReadModels(rewritingEverything: true)
        #expect(try outcome.switchedCopies && usesTwins(writer.log.store))
        #expect(try writer.readModelDigest().digest == healthy)
        await writer.close()
    }
}
