import EventLog
import Foundation
import LMDB
import Logging
import SharingDomain

/// A saved copy of every read model as of one log position (``ShareLedger/saveReadModelSnapshot()``).
public struct ReadModelSnapshotInfo: Sendable, Hashable, Codable {
    /// The log position the read models were at.
    public var position: UInt64
    /// The hash of the event at ``position`` (hexadecimal): a snapshot is used only while the log
    /// still has this event there.
    public var hash: String
    /// Read-model entries copied.
    public var entries: UInt64
    /// The snapshot's directory.
    public var path: String
}

/// The read-model snapshots of a ledger: saved copies of every read model as of one log position,
/// in `snapshots/` in the ledger's directory. ``ShareLedger`` forwards to it; the residual-task
/// worker saves and prunes them; states as of a past point start from them.
package struct ReadModelSnapshotStore: Sendable {
    /// The ledger's log.
    let log: EventLog
    /// The ledger's directory.
    let ledgerPath: String
    let logger: Logger

    /// Where ``save()`` keeps snapshots: `snapshots/` in the ledger's directory, one folder per
    /// snapshot named by its zero-padded position.
    var directory: String { (ledgerPath as NSString).appendingPathComponent("snapshots") }

    /// ``ShareLedger/saveReadModelSnapshot()``.
    func save() throws(LedgerError) -> ReadModelSnapshotInfo {
        let directory = self.directory
        let temporary = (directory as NSString).appendingPathComponent(".tmp-\(UUID().uuidString)")
        let source = log.store
        do {
            try FileManager.default.createDirectory(atPath: temporary, withIntermediateDirectories: true)
            let target = try LogStore.openLedger(EventLog.Configuration(path: temporary, durability: .unsafeNoSync, logger: logger))
            var entries: UInt64 = 0
            let head = try source.read { txn -> LogHead in
                let head = try source.readHead(txn)
                for (from, to) in zip(source.models.all, target.models.all) {
                    try txn.withCursor(from) { cursor in
                        var entry = try cursor.first()
                        while entry != nil {
                            // The target is written in bounded transactions; the source view stays the same.
                            try target.environment.write { out in
                                entries += UInt64(try LogReplay.copy(&entry, with: cursor, into: to, in: out, limit: 100_000).entries)
                            }
                        }
                    }
                }
                return head
            }
            try target.environment.sync()
            target.environment.close()
            let info = ReadModelSnapshotInfo(
                position: head.position.rawValue, hash: head.hash.hex, entries: entries,
                path: (directory as NSString).appendingPathComponent(Self.folderName(head.position.rawValue)))
            try JSONEncoder().encode(info).write(
                to: URL(fileURLWithPath: (temporary as NSString).appendingPathComponent("snapshot.json")))
            try? FileManager.default.removeItem(atPath: info.path)
            try FileManager.default.moveItem(atPath: temporary, toPath: info.path)
            return info
        } catch {
            try? FileManager.default.removeItem(atPath: temporary)
            throw LedgerError.wrap(error, while: "saving a read-model snapshot in \(directory)")
        }
    }

    /// ``ShareLedger/readModelSnapshots()``.
    func list() -> [ReadModelSnapshotInfo] {
        let directory = self.directory
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { !$0.hasPrefix(".") }.compactMap { name -> ReadModelSnapshotInfo? in
            let folder = (directory as NSString).appendingPathComponent(name)
            guard let data = FileManager.default.contents(atPath: (folder as NSString).appendingPathComponent("snapshot.json")),
                var info = try? JSONDecoder().decode(ReadModelSnapshotInfo.self, from: data)
            else { return nil }
            info.path = folder
            return info
        }.sorted { $0.position < $1.position }
    }

    /// ``ShareLedger/deleteReadModelSnapshots(keepingNewest:)``.
    func delete(keepingNewest count: Int) -> Int {
        Self.removeAbandonedFolders(in: directory, prefix: ".tmp-")
        var deleted = 0
        for info in list().dropLast(max(0, count)) where (try? FileManager.default.removeItem(atPath: info.path)) != nil {
            deleted += 1
        }
        return deleted
    }

    /// The newest snapshot at or before `position` whose event is still in the log with the same hash.
    package func usable(atOrBefore position: UInt64) throws(LedgerError) -> ReadModelSnapshotInfo? {
        for info in list().reversed() where info.position <= position && info.position > 0 {
            if try log.storedHash(at: info.position)?.hex == info.hash { return info }
            logger.warning("ignoring read-model snapshot \(info.path): the log holds another event at \(info.position)")
        }
        return nil
    }

    /// Removes the folders in `directory` whose names start with `prefix` and that were last modified
    /// over an hour ago: scratch folders of a rebuild or a snapshot save that crashed (one running
    /// now is younger).
    package static func removeAbandonedFolders(in directory: String, prefix: String) {
        let fileManager = FileManager.default
        for name in (try? fileManager.contentsOfDirectory(atPath: directory)) ?? [] where name.hasPrefix(prefix) {
            let path = (directory as NSString).appendingPathComponent(name)
            if let modified = (try? fileManager.attributesOfItem(atPath: path))?[.modificationDate] as? Date,
                modified < Date().addingTimeInterval(-3_600)
            {
                try? fileManager.removeItem(atPath: path)
            }
        }
    }

    static func folderName(_ position: UInt64) -> String {
        let digits = String(position)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits
    }
}
