import Foundation
import LMDB
@testable import ShareLedger
@testable import ShareLedgerAudit
import TestSupport
import Testing

@Suite("Read-model snapshots")
struct ReadModelSnapshotTests {
    /// A ledger with some history: shares, invitations, fetches, accepts, completions, removals.
    private func busy(_ f: SharingFixture, rounds: Range<Int>) async throws {
        _ = try await f.alice.save(RecordZone(zoneID: SharingFixture.zone))
        for round in rounds {
            let id = SharingFixture.recordID("list\(round)")
            _ = try await f.alice.save(Record(recordType: "List", recordID: id))
            let share = try await f.alice.share(rootRecord: id, title: "t\(round)")
            _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readWrite, to: share.url)
            _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
            try await f.ledger.completeResidualTasks()
            if round % 3 == 2 { try await f.bob.leaveShare(share.url) }
        }
    }

    /// Every read model of a view, as one comparable dump.
    private func dump(_ view: ShareLedger) throws -> [String: [([UInt8], [UInt8])]] {
        var out: [String: [([UInt8], [UInt8])]] = [:]
        for db in view.log.store.models.all { out[db.name] = try ReadModelRebuild.dump(view.log.store.environment, db) }
        return out
    }

    private func same(_ a: [String: [([UInt8], [UInt8])]], _ b: [String: [([UInt8], [UInt8])]]) -> Bool {
        a.keys == b.keys && a.keys.allSatisfy { key in
            a[key]!.count == b[key]!.count && zip(a[key]!, b[key]!).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        }
    }

    @Test("a view built from the nearest saved snapshot equals a view replayed from the start, at every kind of point")
    func viewsMatch() async throws {
        let f = try await SharingFixture()
        try await busy(f, rounds: 0..<3)
        let first = try f.ledger.saveReadModelSnapshot()
        try await busy(f, rounds: 3..<6)
        let second = try f.ledger.saveReadModelSnapshot()
        try await busy(f, rounds: 6..<8)
        #expect(f.ledger.readModelSnapshots().map(\.position) == [first.position, second.position])
        #expect(first.entries > 0 && second.entries > first.entries)

        // The reference: views replayed from the start (no snapshots: set them aside).
        let head = try f.ledger.log.head().position.rawValue
        let points: [UInt64] = [1, first.position - 1, first.position, first.position + 1, second.position, (second.position + head) / 2, head]
        var reference: [UInt64: [String: [([UInt8], [UInt8])]]] = [:]
        let aside = f.dir.child("aside")
        try FileManager.default.moveItem(atPath: f.ledger.readModelSnapshotsDirectory, toPath: aside)
        for point in points {
            let view = try LedgerAudit(f.ledger).snapshot(at: .position(LogPosition(point)), path: f.dir.child("full-\(point)"))
            reference[point] = try dump(view)
            await view.close()
        }
        try FileManager.default.moveItem(atPath: aside, toPath: f.ledger.readModelSnapshotsDirectory)
        for point in points {
            #expect(try f.ledger.snapshots.usable(atOrBefore: point)?.position == (point >= second.position ? second.position : point >= first.position ? first.position : nil))
            let view = try LedgerAudit(f.ledger).snapshot(at: .position(LogPosition(point)), path: f.dir.child("fast-\(point)"))
            #expect(same(try dump(view), reference[point]!), "at \(point)")
            await view.close()
        }
        // The live read models equal the view at the head.
        #expect(same(try dump(f.ledger), reference[head]!))
        await f.ledger.close()
    }

    @Test("a snapshot whose event is no longer in the log is not used; a half-written one is invisible")
    func staleSnapshotIgnored() async throws {
        let f = try await SharingFixture()
        try await busy(f, rounds: 0..<2)
        let saved = try f.ledger.saveReadModelSnapshot()
        // Claim another history: the hash no longer matches the log at that position.
        var info = saved
        info.hash = String(repeating: "0", count: 64)
        try JSONEncoder().encode(info).write(to: URL(fileURLWithPath: (saved.path as NSString).appendingPathComponent("snapshot.json")))
        #expect(try f.ledger.snapshots.usable(atOrBefore: saved.position) == nil)
        // A folder a crash left behind (no snapshot.json; a dot name) is not a snapshot.
        try FileManager.default.createDirectory(
            atPath: (f.ledger.readModelSnapshotsDirectory as NSString).appendingPathComponent(".tmp-crashed"), withIntermediateDirectories: true)
        #expect(f.ledger.readModelSnapshots().count == 1)
        // The view is still right: replayed from the start.
        let view = try LedgerAudit(f.ledger).snapshot(at: .position(LogPosition(saved.position)), path: f.dir.child("view"))
        #expect(try view.statistics().shares == f.ledger.statistics().shares)
        await view.close()
        await f.ledger.close()
    }
}

@Suite("Read-model snapshots saved by the worker")
struct ScheduledSnapshotTests {
    /// Appends `count` events (user registrations).
    private func register(_ f: SharingFixture, _ count: Int, from start: Int) async throws {
        for index in start..<(start + count) { try await f.ledger.registerUser("_u\(index)", in: SharingFixture.container) }
    }

    private func positions(_ f: SharingFixture) -> [UInt64] { f.ledger.readModelSnapshots().map(\.position) }

    /// What the worker does between batches: a pass (which takes or renews the lease), then the check.
    private func betweenBatches(_ worker: ResidualTaskWorker) async throws {
        #expect(try await worker.runPass(limit: 1).holdsLease)
        await worker.saveSnapshotIfDue()
    }

    @Test("only the worker holding the lease saves snapshots")
    func leaseHolderOnly() async throws {
        let f = try await SharingFixture()
        let configuration = ResidualTaskWorker.Configuration(snapshotInterval: 2)
        let holder = ResidualTaskWorker(ledger: f.ledger, configuration: configuration)
        let other = ResidualTaskWorker(ledger: f.ledger, configuration: configuration)
        #expect(try await holder.runPass(limit: 1).holdsLease)
        #expect(try await other.runPass(limit: 1).holdsLease == false)
        await other.saveSnapshotIfDue()
        #expect(positions(f).isEmpty)
        await holder.saveSnapshotIfDue()
        #expect(positions(f) == [3])
        await holder.releaseLease()
        try await register(f, 2, from: 0)
        await holder.saveSnapshotIfDue()
        #expect(positions(f) == [3], "released: not the holder any more")
        try await betweenBatches(other)
        #expect(positions(f) == [3, 5])
        await f.ledger.close()
    }

    @Test("every interval of events one snapshot at the head; the oldest beyond the kept number are deleted; a failure waits for another interval")
    func interval() async throws {
        let f = try await SharingFixture()
        let worker = ResidualTaskWorker(
            ledger: f.ledger, configuration: ResidualTaskWorker.Configuration(snapshotInterval: 20, snapshotsKept: 2))
        var head: UInt64 { (try? f.ledger.log.head().position.rawValue) ?? 0 }
        // 3 events so far (the fixture's users): not due.
        try await betweenBatches(worker)
        #expect(positions(f).isEmpty)

        try await register(f, 17, from: 0)
        #expect(head == 20)
        try await betweenBatches(worker)
        #expect(positions(f) == [20])
        try await betweenBatches(worker)
        #expect(positions(f) == [20], "not due again until 20 more events")

        try await register(f, 19, from: 100)
        try await betweenBatches(worker)
        #expect(positions(f) == [20])
        try await register(f, 1, from: 200)
        try await betweenBatches(worker)
        #expect(positions(f) == [20, 40])
        try await register(f, 25, from: 300)
        try await betweenBatches(worker)
        #expect(positions(f) == [40, 65], "two kept: the oldest went")

        // A snapshot directory that cannot be written (a file in its place): logged, nothing saved,
        // and not tried on every call after that, only after another interval.
        for info in f.ledger.readModelSnapshots() { try FileManager.default.removeItem(atPath: info.path) }
        try FileManager.default.removeItem(atPath: f.ledger.readModelSnapshotsDirectory)
        #expect(FileManager.default.createFile(atPath: f.ledger.readModelSnapshotsDirectory, contents: Data("x".utf8)))
        try await register(f, 20, from: 400)
        try await betweenBatches(worker)
        try FileManager.default.removeItem(atPath: f.ledger.readModelSnapshotsDirectory)
        try await betweenBatches(worker)
        #expect(positions(f).isEmpty, "the failed attempt at 85 counts: due again at 105")
        try await register(f, 20, from: 500)
        try await betweenBatches(worker)
        #expect(positions(f) == [105])

        // A view as of 95 (every event so far is a registration: 95 users then).
        let view = try LedgerAudit(f.ledger).snapshot(at: .position(LogPosition(95)), path: f.dir.child("view"))
        #expect(try view.statistics().users == 95)
        await view.close()
        await f.ledger.close()
    }

    @Test("a worker that finds snapshots on disk counts from the newest; run() saves them between batches")
    func fromDiskAndRun() async throws {
        let f = try await SharingFixture()
        try await register(f, 27, from: 0)
        try f.ledger.saveReadModelSnapshot()
        #expect(positions(f) == [30])
        let worker = ResidualTaskWorker(
            ledger: f.ledger,
            configuration: ResidualTaskWorker.Configuration(pollInterval: .milliseconds(20), snapshotInterval: 30))
        try await register(f, 29, from: 100)
        try await betweenBatches(worker)
        #expect(positions(f) == [30], "59 < 30 + 30")

        let running = Task { try await worker.run() }
        try await register(f, 1, from: 200)
        let deadline = ContinuousClock.now + .seconds(60)
        while positions(f) != [30, 60] && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(positions(f) == [30, 60])
        running.cancel()
        try await running.value
        await f.ledger.close()
    }

    @Test("deleting all but the newest N snapshots, and the folders of saves that crashed")
    func deleting() async throws {
        let f = try await SharingFixture()
        for round in 0..<4 {
            try await register(f, 1, from: round)
            try f.ledger.saveReadModelSnapshot()
        }
        #expect(positions(f) == [4, 5, 6, 7])
        let stale = (f.ledger.readModelSnapshotsDirectory as NSString).appendingPathComponent(".tmp-crashed")
        try FileManager.default.createDirectory(atPath: stale, withIntermediateDirectories: true)
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-7_200)], ofItemAtPath: stale)
        let fresh = (f.ledger.readModelSnapshotsDirectory as NSString).appendingPathComponent(".tmp-running")
        try FileManager.default.createDirectory(atPath: fresh, withIntermediateDirectories: true)
        #expect(f.ledger.deleteReadModelSnapshots(keepingNewest: 3) == 1)
        #expect(positions(f) == [5, 6, 7])
        #expect(!FileManager.default.fileExists(atPath: stale))
        #expect(FileManager.default.fileExists(atPath: fresh), "a save under way is left alone")
        #expect(f.ledger.deleteReadModelSnapshots(keepingNewest: 0) == 3)
        #expect(positions(f).isEmpty)
        await f.ledger.close()
    }
}
