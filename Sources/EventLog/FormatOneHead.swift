import ByteKeys
import LMDB

extension EventLog {
    /// The position a format-1 ledger's `meta`/`head` record names (format 2 has none: `nil`).
    ///
    /// A format-1 ledger opened read-only keeps the record; when it names a position beyond the last
    /// event, the log's tail was removed, which ``verifyChain(chunkSize:parallelism:after:)`` reports
    /// at the position after the last event.
    func formatOneHeadRecord() throws(LedgerError) -> UInt64? {
        try readLog("reading the format-1 head record") { txn in
            try txn.get(store.meta, key: LogStore.headKey).flatMap { bytes in
                bytes.count == 48 ? BigEndian.uint64(bytes) : nil
            }
        }
    }
}
