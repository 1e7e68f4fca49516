import ByteKeys
import EventLog
import LMDB
import ShareLedger
import SharingDomain

/// A log whose tail was removed: the chain alone cannot see it (what is left still links up), but
/// the ledger's own records can, when they name events the log no longer holds.
extension LedgerAudit {
    /// The highest position beyond `head` that a stream record (its last event) or a command record
    /// (its last event) names, or `nil` when every record stays within the log. Reads both databases
    /// in chunks of short read transactions.
    func recordsBeyondHead(_ head: UInt64) throws(LedgerError) -> UInt64? {
        var highest: UInt64?
        for (database, lastPosition) in [
            (log.store.streams, { (value: UnsafeRawBufferPointer) -> UInt64? in
                value.count == 16 ? BigEndian.uint64(value, at: 8) : nil
            }),
            (log.store.commands, { (value: UnsafeRawBufferPointer) -> UInt64? in
                guard value.count == 20, let first = BigEndian.uint64(value), let count = BigEndian.uint32(value, at: 8),
                    count > 0
                else { return nil }
                return first.addingReportingOverflow(UInt64(count) - 1).partialValue
            }),
        ] {
            var resume: [UInt8]?
            repeat {
                let start = resume
                resume = nil
                try read("looking for records beyond the head") { txn in
                    try txn.withCursor(database) { cursor in
                        var entry = try start.map { key in try withBytes(key) { try cursor.seek(atLeast: $0) } } ?? cursor.first()
                        var seen = 0
                        while let current = entry {
                            if seen == 8_192 {
                                resume = Array(current.key)
                                return
                            }
                            if let last = lastPosition(current.value), last > head { highest = max(highest ?? 0, last) }
                            seen += 1
                            entry = try cursor.next()
                        }
                    }
                }
            } while resume != nil
        }
        return highest
    }
}

extension AuditReport {
    /// The problem an audit reports for a cut tail.
    static func cutTailProblem(head: UInt64, named: UInt64) -> String {
        "the log ends at position \(head), but the stream and command records name events up to \(named): "
            + "the events after \(head) were removed (a cut tail); restore the ledger from a backup or an export"
    }
}
