import ByteKeys
import EventLog
import Foundation

// The change indexes behind sync (`records/changes`, `zones/changes`; CloudKit's
// `CKFetchRecordZoneChangesOperation` and `CKFetchDatabaseChangesOperation`): read models like the
// others, written with the events they reflect, rebuilt by `rebuild` and compared by `audit`.
//
// `idx_record_changes`, per zone (zone id = the position of the zone's creation):
// - zone id (8) ‖ 0x00 ‖ position (8) → kind (`S` saved, `H` a share saved, `D` deleted) ‖ name
//   length (2) ‖ record name ‖ a share token (the share's own for `H`; for `D`, the share that
//   covered the record when it was deleted, or the deleted share's): the record's latest change,
//   one entry per record (a tombstone for a deleted one). Shares (`cloudkit.share` records) are
//   records of their zone here, changed by every event that changes what the share record shows.
// - zone id (8) ‖ 0x01 ‖ record name → position (8): where the record's entry is, so a new change
//   moves it instead of adding a second.
//
// `idx_zone_changes`, per user and database:
// container ‖ 0 ‖ user ‖ 0 ‖ scope (`p` private, `s` shared) ‖ owner ‖ 0 ‖ zone name → position (8)
// ‖ deleted (1) ‖ zone id (8): when the zone came into (or left) the user's database.

/// A record's latest change in its zone, as `idx_record_changes` keeps it.
package struct RecordChangeEntry: Equatable {
    package var position: UInt64
    package var recordName: String
    package var deleted: Bool
    /// Whether the record is a share (`cloudkit.share`) saved.
    package var isShare = false
    /// For a share saved: its token; for a deleted record: the share that covered it then, or the
    /// deleted share's (empty: none).
    package var shareToken: String

    package static let saved: UInt8 = 0x53  // "S"
    package static let shareSaved: UInt8 = 0x48  // "H"
    package static let deletedKind: UInt8 = 0x44  // "D"

    package var value: [UInt8] { withValue { Array($0) } }

    /// Calls `body` with the bytes of ``value``, written into a temporary buffer (``ReadModels/withBuilt(count:_:_:)``).
    package func withValue<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        let nameLength = recordName.utf8.count
        let withToken = deleted || isShare
        let kind = deleted ? RecordChangeEntry.deletedKind : (isShare ? RecordChangeEntry.shareSaved : RecordChangeEntry.saved)
        return try ReadModels.withBuilt(count: 3 + nameLength + (withToken ? shareToken.utf8.count : 0)) { out in
            out.append(kind)
            out.append(UInt8(truncatingIfNeeded: nameLength >> 8))
            out.append(UInt8(truncatingIfNeeded: nameLength))
            out.append(recordName)
            if withToken { out.append(shareToken) }
        } _: { try body($0) }
    }

    /// Decodes an entry's value; throws ``LedgerError/Code/corruptedData`` for bytes no projection wrote.
    package init(position: UInt64, value: some Collection<UInt8>) throws {
        let bytes = Array(value)
        guard bytes.count >= 3, [RecordChangeEntry.saved, RecordChangeEntry.shareSaved, RecordChangeEntry.deletedKind].contains(bytes[0])
        else {
            throw LedgerError(.corruptedData, "an entry of idx_record_changes is malformed; run `share-ledger rebuild`")
        }
        let length = Int(bytes[1]) << 8 | Int(bytes[2])
        guard bytes.count >= 3 + length else {
            throw LedgerError(.corruptedData, "an entry of idx_record_changes is cut short; run `share-ledger rebuild`")
        }
        self.position = position
        self.deleted = bytes[0] == RecordChangeEntry.deletedKind
        self.isShare = bytes[0] == RecordChangeEntry.shareSaved
        self.recordName = String(decoding: bytes[3..<(3 + length)], as: UTF8.self)
        self.shareToken = String(decoding: bytes[(3 + length)...], as: UTF8.self)
    }

    package init(position: UInt64, recordName: String, deleted: Bool, isShare: Bool = false, shareToken: String) {
        (self.position, self.recordName, self.deleted, self.isShare, self.shareToken) = (position, recordName, deleted, isShare, shareToken)
    }
}

/// A zone's entry in a user's database, as `idx_zone_changes` keeps it.
package struct ZoneChangeEntry: Equatable {
    package var ownerName: String
    package var zoneName: String
    package var position: UInt64
    package var deleted: Bool
    package var zoneID: UInt64

    package init(ownerName: String, zoneName: String, position: UInt64, deleted: Bool, zoneID: UInt64) {
        (self.ownerName, self.zoneName, self.position, self.deleted, self.zoneID) = (ownerName, zoneName, position, deleted, zoneID)
    }

    package var value: [UInt8] {
        var out = [UInt8](capacity: 17)
        out.appendBigEndian(position)
        out.append(deleted ? 1 : 0)
        out.appendBigEndian(zoneID)
        return out
    }
}

/// Which database of a user a zone change is in.
package enum ChangeScope: UInt8 {
    case `private` = 0x70  // "p"
    case shared = 0x73  // "s"
}

extension ReadModels {
    package static func recordChangeKey(zoneID: UInt64, position: UInt64) -> [UInt8] {
        var out = [UInt8](capacity: 17)
        out.appendBigEndian(zoneID)
        out.append(0)
        out.appendBigEndian(position)
        return out
    }

    package static func recordChangePointerKey(zoneID: UInt64, _ record: String) -> [UInt8] {
        var out = [UInt8](capacity: 9 + record.utf8.count)
        out.appendBigEndian(zoneID)
        out.append(1)
        out.appendUTF8(record)
        return out
    }

    package static func zoneChangePrefix(_ container: String, user: String, _ scope: ChangeScope) -> [UInt8] {
        var out = [UInt8](capacity: container.utf8.count + user.utf8.count + 3)
        out.appendUTF8(container)
        out.append(0)
        out.appendUTF8(user)
        out.append(0)
        out.append(scope.rawValue)
        return out
    }

    package static func zoneChangeKey(_ container: String, user: String, _ scope: ChangeScope, owner: String, zone: String) -> [UInt8] {
        var out = zoneChangePrefix(container, user: user, scope)
        out.reserveCapacity(out.count + owner.utf8.count + 1 + zone.utf8.count)
        out.appendUTF8(owner)
        out.append(0)
        out.appendUTF8(zone)
        return out
    }

    /// Records the latest change of a record (its entry moves to `position`).
    package func noteRecordChange(
        _ txn: borrowing some ReadModelStore & ~Copyable, zoneID: UInt64, _ entry: RecordChangeEntry
    ) throws {
        // The keys of ``recordChangePointerKey(zoneID:_:)`` and ``recordChangeKey(zoneID:position:)``,
        // and the pointer's value, built on the stack (a record name fits a key: at most 255 bytes).
        func withChangeKey(_ position: UInt64, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
            _ = try ReadModels.withKey(count: 17) { key in
                key.append(bigEndian: zoneID)
                key.append(0)
                key.append(bigEndian: position)
            } _: { key -> Void? in try body(key) }
        }
        _ = try ReadModels.withKey(count: 9 + entry.recordName.utf8.count) { key in
            key.append(bigEndian: zoneID)
            key.append(1)
            key.append(entry.recordName)
        } _: { pointer -> Void? in
            if let previous = try txn.withValue(recordChanges, key: pointer, { BigEndian.uint64($0) }) ?? nil {
                try withChangeKey(previous) { key in try txn.delete(recordChanges, key: key, value: nil) }
            }
            try withChangeKey(entry.position) { key in
                try entry.withValue { value in try txn.put(recordChanges, key: key, value: value, flags: []) }
            }
            try BigEndian.withBytes(of: entry.position) { value in try txn.put(recordChanges, key: pointer, value: value, flags: []) }
            return ()
        }
    }

    /// Records the change of share `token`'s record (`recordName` in the zone numbered `zoneID`, which
    /// never change for a share) by the event at `position`: saved while the share exists, a
    /// tombstone once it was `deleted`.
    package func noteShareChange(
        _ txn: borrowing some ReadModelStore & ~Copyable, token: String, zoneID: UInt64, recordName: String, deleted: Bool,
        position: UInt64
    ) throws {
        try noteRecordChange(
            txn, zoneID: zoneID,
            RecordChangeEntry(position: position, recordName: recordName, deleted: deleted, isShare: !deleted, shareToken: token))
    }

    /// Forgets every change of a deleted zone (its id is never used again).
    package func dropRecordChanges(_ txn: borrowing some ReadModelStore & ~Copyable, zoneID: UInt64) throws {
        let prefix = BigEndian.bytes(of: zoneID)
        for entry in try scan(txn, recordChanges, prefix: prefix) { try txn.delete(recordChanges, key: prefix + entry.suffix) }
    }

    /// Records that a zone came into (or left) a user's database.
    package func noteZoneChange(
        _ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, user: String, _ scope: ChangeScope,
        _ entry: ZoneChangeEntry
    ) throws {
        let key = ReadModels.zoneChangeKey(container, user: user, scope, owner: entry.ownerName, zone: entry.zoneName)
        guard ReadModels.isStorable(key) else { return }
        try txn.put(zoneChanges, key: key, value: entry.value)
    }

    /// The changes of a zone after `position`, in position order, at most `limit`.
    package func recordChanges(
        _ txn: borrowing some ReadModelStore & ~Copyable, zoneID: UInt64, after position: UInt64, limit: Int
    ) throws -> [RecordChangeEntry] {
        let prefix = BigEndian.bytes(of: zoneID) + [0]
        let start = ReadModels.recordChangeKey(zoneID: zoneID, position: position &+ 1)
        guard position < UInt64.max else { return [] }
        var raw: [(UInt64, [UInt8])] = []
        try start.withUnsafeBytes { from in
            try txn.visit(recordChanges, from: from) { key, value in
                guard raw.count < limit, key.count == prefix.count + 8, key.prefix(prefix.count).elementsEqual(prefix),
                    let at = BigEndian.uint64(key, at: prefix.count)
                else { return false }
                raw.append((at, Array(value)))
                return true
            }
        }
        return try raw.map { try RecordChangeEntry(position: $0.0, value: $0.1) }
    }

    /// The zones of a user's database, live and deleted, with when each last came or went.
    package func zoneChanges(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, user: String, _ scope: ChangeScope)
        throws -> [ZoneChangeEntry]
    {
        try scan(txn, zoneChanges, prefix: ReadModels.zoneChangePrefix(container, user: user, scope)).map { entry in
            guard entry.value.count == 17, let position = BigEndian.uint64(entry.value),
                let zoneID = BigEndian.uint64(entry.value, at: 9), let separator = entry.suffix.firstIndex(of: 0)
            else {
                throw LedgerError(.corruptedData, "an entry of idx_zone_changes is malformed; run `share-ledger rebuild`")
            }
            return ZoneChangeEntry(
                ownerName: String(decoding: entry.suffix[..<separator], as: UTF8.self),
                zoneName: String(decoding: entry.suffix[(separator + 1)...], as: UTF8.self),
                position: position, deleted: entry.value[8] == 1, zoneID: zoneID)
        }
    }
}
