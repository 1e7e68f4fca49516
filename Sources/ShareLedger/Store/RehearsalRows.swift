import SharingDomain
import Synchronization

/// The row cache of rehearsals (``ShareLedger/rehearse(_:container:actor:rowCache:)``) and the read
/// models that keep rows in it, with the serial of the last rehearsal: each rehearsal is a
/// transaction of its own to the cache.
package final class RehearsalRows: Sendable {
    /// The read models with ``cache`` as their row cache (built once: a rehearsal allocates none).
    private let models: ReadModels
    private let cache: RowCache
    private let serial = Mutex<UInt64>(0)

    /// Rehearsals of `models` with a row cache of their own.
    init(_ models: ReadModels) {
        let cache = RowCache(capacity: 4_096)
        self.cache = cache
        self.models = models.keepingRows(in: cache)
    }

    /// The read models, their cache begun for a new rehearsal in the write transaction
    /// `transactionID`. Only inside that transaction: LMDB's write lock keeps a second rehearsal
    /// (the cache is for one thread at a time) waiting until it ends.
    func begin(transactionID: UInt64) -> ReadModels {
        serial.withLock { serial in
            serial &+= 1
            cache.begin(serial: serial, transactionID: transactionID)
        }
        return models
    }
}
