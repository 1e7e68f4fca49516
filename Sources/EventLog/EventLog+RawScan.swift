import ByteKeys
import LMDB

extension EventLog {
    /// Reads every stored log entry with a bare cursor, in chunks of `chunkSize` with a fresh read
    /// transaction each (like ``verifyChain(chunkSize:)``), touching each value's bytes; returns the
    /// entries and bytes read.
    ///
    /// The baseline `share-ledger bench` compares the chain verification and the rebuild with: what
    /// reading the same log costs when nothing is decoded, hashed or projected.
    package func rawScan(chunkSize: Int = 8192) throws(LedgerError) -> (entries: UInt64, bytes: UInt64, checksum: UInt64) {
        var entries: UInt64 = 0
        var bytes: UInt64 = 0
        var checksum: UInt64 = 0
        var next: UInt64 = 1
        var done = false
        while !done {
            try readLog("scanning the log at position \(next)") { txn in
                try txn.withCursor(store.log) { cursor in
                    var entry = try BigEndian.withBytes(of: next) { try cursor.seek(atLeast: $0) }
                    var count = 0
                    while let current = entry {
                        entries += 1
                        bytes += UInt64(current.value.count)
                        // Read the first and last byte of every value so the pages are really touched.
                        if let first = current.value.first, let last = current.value.last {
                            checksum &+= UInt64(first) &* 31 &+ UInt64(last)
                        }
                        next = (BigEndian.uint64(current.key) ?? next) + 1
                        count += 1
                        if count == chunkSize { return }
                        entry = try cursor.next()
                    }
                    done = true
                }
            }
        }
        return (entries, bytes, checksum)
    }
}
