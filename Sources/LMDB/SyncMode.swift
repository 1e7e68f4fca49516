import CLMDB

/// How hard a commit works to survive a power loss. A process crash (SIGKILL, a trap) loses no
/// committed transaction in any mode: the pages are in the operating system's page cache.
package enum SyncMode: String, Sendable, Hashable, CaseIterable {
    /// Default LMDB: data pages and the meta page are flushed at every commit (full ACID).
    case durable
    /// `MDB_NOMETASYNC`: one flush per commit; an OS crash or power loss may undo the last commit,
    /// the file stays consistent.
    case relaxed
    /// `MDB_NOSYNC`: no flush at commit; an OS crash may lose recent commits. The environment
    /// flushes when it is closed. For bulk imports and benchmarks.
    case unsafeNoSync

    var environmentFlags: UInt32 {
        switch self {
        case .durable: return 0
        case .relaxed: return UInt32(MDB_NOMETASYNC)
        case .unsafeNoSync: return UInt32(MDB_NOSYNC)
        }
    }
}
