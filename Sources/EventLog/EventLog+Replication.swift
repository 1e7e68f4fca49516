import ByteKeys
import Foundation
import LMDB

/// One committed event exactly as the log stores it: its position, its hash and its stored bytes
/// (`docs/log-format.md`: `canonical ‖ 7A 20 ‖ hash`). What replication ships and what a replica
/// applies; the bytes are never re-encoded, so the hash chain holds across machines.
public struct StoredEvent: Sendable, Hashable {
    /// The event's position in the log.
    public var position: LogPosition
    /// The event's hash (the last 32 bytes of ``bytes``).
    public var hash: EventHash
    /// The stored envelope, hash field included.
    public var bytes: [UInt8]

    /// Makes a stored event from the bytes found at `position`; `nil` when the bytes do not end with
    /// the 34-byte hash field (then they cannot be an event of any ledger).
    public init?(position: LogPosition, bytes: [UInt8]) {
        guard bytes.count > EnvelopeCodec.hashSuffixLength,
            bytes[bytes.count - EnvelopeCodec.hashSuffixLength] == EnvelopeCodec.hashTag,
            bytes[bytes.count - EnvelopeCodec.hashSuffixLength + 1] == 32,
            let hash = EventHash(bytes: bytes.suffix(32))
        else { return nil }
        self.position = position
        self.hash = hash
        self.bytes = bytes
    }
}

extension EventLog {
    /// Up to `limit` stored events after `position`, in order, at most about `maxBytes` of them (at
    /// least one when there is one), read in one short read transaction. For shipping the log
    /// elsewhere: nothing is decoded.
    public func storedEvents(
        after position: LogPosition, limit: Int, maxBytes: Int = 4 << 20
    ) throws(LedgerError) -> [StoredEvent] {
        guard limit > 0 else { return [] }
        return try readLog("reading stored events after \(position)") { txn in
            try txn.withCursor(store.log) { cursor in
                var out: [StoredEvent] = []
                var bytes = 0
                var entry = try BigEndian.withBytes(of: position.rawValue + 1) { try cursor.seek(atLeast: $0) }
                while let current = entry, out.count < limit, out.isEmpty || bytes + current.value.count <= maxBytes {
                    guard let key = BigEndian.uint64(current.key),
                        let event = StoredEvent(position: LogPosition(key), bytes: Array(current.value))
                    else {
                        throw LedgerError(
                            .corruptedData, "the log entry after position \(out.last?.position ?? position) is damaged; "
                                + "run share-ledger verify")
                    }
                    bytes += event.bytes.count
                    out.append(event)
                    entry = try cursor.next()
                }
                return out
            }
        }
    }

    /// The stored event at `position`, or `nil` when there is none.
    public func storedEvent(at position: LogPosition) throws(LedgerError) -> StoredEvent? {
        try storedEvents(after: LogPosition(position.rawValue &- 1), limit: 1).first { $0.position == position }
    }

    /// Returns the head once it is past `position`, or the head as it is when `timeout` ends, the
    /// log closes or the task is cancelled: whichever comes first. Commits of this process wake it at
    /// once; commits of another process that has the ledger open are seen within `pollInterval`.
    public func waitForCommit(
        after position: LogPosition, timeout: Duration, pollInterval: Duration = .milliseconds(20)
    ) async throws(LedgerError) -> LogHead {
        let deadline = ContinuousClock.now + timeout
        while true {
            let head = try self.head()
            if head.position > position || writer.notifier.isClosed || Task.isCancelled { return head }
            let now = ContinuousClock.now
            guard now < deadline else { return head }
            let notifier = writer.notifier
            let slice = min(pollInterval, deadline - now)
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await notifier.wait(after: position.rawValue) }
                group.addTask { try? await Task.sleep(for: slice) }
                await group.next()
                group.cancelAll()
            }
        }
    }
}
