import Foundation
import LMDB

/// Share metadata already presented to a viewer, reused while nothing about the share has happened
/// since (``Container/shareMetadataWithoutLogging(for:)``).
///
/// The validator is the position of the last event in the share's history index
/// (`idx_share_history`): every event about a share (created, deleted, a participant added, changed,
/// removed, verified, accepted, a title or public permission change, a logged fetch) adds its
/// position there, positions never repeat, and the index is read in the same read transaction as the
/// answer. So an entry is used only when the read models it was built from are, for this share,
/// exactly the ones the transaction sees. What else goes into the metadata cannot change under a
/// fixed validator: user records are written once, at registration; the share URL's host is fixed
/// per open ledger.
final class MetadataCache: @unchecked Sendable {
    // @unchecked: `entries` is only touched under `lock`; the values are immutable `Sendable` structs.
    private let lock = NSLock()
    private var entries: [Key: Entry] = [:]
    let capacity: Int

    struct Key: Hashable, Sendable {
        var token: String
        var container: String
        var viewer: String
    }

    struct Entry: Sendable {
        /// The share's last history position when the metadata was built.
        var validator: UInt64
        var metadata: Share.Metadata
    }

    init(capacity: Int) { self.capacity = capacity }

    func entry(_ key: Key) -> Entry? { lock.withLock { entries[key] } }

    func store(_ key: Key, _ entry: Entry) {
        lock.withLock {
            // Bounded: when full, start over (cheaper than tracking recency; a miss only costs a rebuild).
            if entries.count >= capacity, entries[key] == nil { entries.removeAll(keepingCapacity: true) }
            entries[key] = entry
        }
    }

    var count: Int { lock.withLock { entries.count } }
}

extension ReadModels {
    /// The position of the last event in `token`'s history, or nil when none.
    func lastHistoryPosition(_ txn: borrowing Transaction, token: String) throws -> UInt64? {
        try txn.withCursor(shareHistory) { cursor in
            let found = try token.utf8.withContiguousStorageIfAvailable { key in
                try cursor.seek(exactly: UnsafeRawBufferPointer(key))
            } ?? Array(token.utf8).withUnsafeBytes { try cursor.seek(exactly: $0) }
            guard found != nil, let last = try cursor.lastDuplicate() else { return nil }
            return BigEndian.uint64(last.value)
        }
    }
}
