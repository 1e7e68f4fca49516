import Foundation
import LMDB
@testable import ShareLedger
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
            let view = try f.ledger.snapshot(at: .position(LogPosition(point)), path: f.dir.child("full-\(point)"))
            reference[point] = try dump(view)
            await view.close()
        }
        try FileManager.default.moveItem(atPath: aside, toPath: f.ledger.readModelSnapshotsDirectory)
        for point in points {
            #expect(try f.ledger.usableSnapshot(atOrBefore: point)?.position == (point >= second.position ? second.position : point >= first.position ? first.position : nil))
            let view = try f.ledger.snapshot(at: .position(LogPosition(point)), path: f.dir.child("fast-\(point)"))
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
        #expect(try f.ledger.usableSnapshot(atOrBefore: saved.position) == nil)
        // A folder a crash left behind (no snapshot.json; a dot name) is not a snapshot.
        try FileManager.default.createDirectory(
            atPath: (f.ledger.readModelSnapshotsDirectory as NSString).appendingPathComponent(".tmp-crashed"), withIntermediateDirectories: true)
        #expect(f.ledger.readModelSnapshots().count == 1)
        // The view is still right: replayed from the start.
        let view = try f.ledger.snapshot(at: .position(LogPosition(saved.position)), path: f.dir.child("view"))
        #expect(try view.statistics().shares == f.ledger.statistics().shares)
        await view.close()
        await f.ledger.close()
    }
}
