import CLMDB
import Foundation

/// Options for opening an ``Environment``.
package struct EnvironmentOptions: Sendable {
    /// The directory that holds `data.mdb` and `lock.mdb`. It must exist.
    package var path: String
    /// The map size to start with, in bytes (rounded up to whole pages). The map grows on demand.
    package var mapSize: Int
    /// The largest the map may grow to; `nil` for no limit. Reaching it makes writes fail with
    /// ``LMDBError/Code/storageFull`` and change nothing.
    package var maxMapSize: Int?
    /// The number of named databases the environment may hold.
    package var maxDatabases: Int
    /// The number of reader slots (concurrent read transactions, across processes).
    package var maxReaders: Int
    /// What a commit does to survive a power loss.
    package var durability: SyncMode
    /// Opens with `MDB_RDONLY`: no write transaction can begin.
    package var readOnly: Bool
    /// Opens with `MDB_WRITEMAP | MDB_MAPASYNC`: write transactions change the mapped file directly
    /// (no malloc'd page copies, no write at commit). Only for scratch environments opened with
    /// `.unsafeNoSync`: a stray write through a bad pointer could then damage the file, and
    /// `MDB_MAPASYNC` leaves flushing to the kernel.
    package var writeMap = false

    package init(
        path: String,
        mapSize: Int = 64 << 20,
        maxMapSize: Int? = nil,
        maxDatabases: Int = 32,
        maxReaders: Int = 126,
        durability: SyncMode = .durable,
        readOnly: Bool = false
    ) {
        self.path = path
        self.mapSize = mapSize
        self.maxMapSize = maxMapSize
        self.maxDatabases = maxDatabases
        self.maxReaders = maxReaders
        self.durability = durability
        self.readOnly = readOnly
    }
}

/// Sizes and counters of an open environment.
package struct EnvironmentInfo: Sendable, Hashable {
    /// The current map size in bytes.
    package var mapSize: Int
    /// The page size in bytes.
    package var pageSize: Int
    /// Bytes in use: (last used page number + 1) × page size.
    package var usedBytes: Int
    /// The id of the last committed transaction.
    package var lastTransactionID: Int
    /// Reader slots configured.
    package var maxReaders: Int
    /// Reader slots in use (including stale ones not yet cleared).
    package var readersInUse: Int
}
