import ByteKeys
import EventLog
import Foundation
import LMDB

// The raw LMDB baselines `share-ledger bench` measures the ledger next to: the same commit pattern
// and value sizes on a bare environment. Not a product: the CLI's bench uses it, so that the CLI
// itself does not import LMDB.

/// Replays a commit pattern against a bare LMDB environment: one write transaction per commit (same
/// durability), `MDB_APPEND` cursor puts of same-sized values under 8-byte big-endian keys.
///
/// With `sameWrites`, each record also gets the other writes the ledger makes for it, as bare puts:
/// a 20-byte idempotency record under a time-ordered 41-byte key, a 16-byte stream record under one
/// of `streams` keys (format 2 keeps no head record: the head is the last log entry).
package final class RawReplayer {
    package let environment: Environment
    package let log: Database
    package let meta: Database
    package let commands: Database
    package let streams: Database
    package let sameWrites: Bool
    package let streamKeys: [[UInt8]]
    package let prefix: [UInt8] = Array("iCloud.com.example.bench".utf8) + [0]
    package var position: UInt64 = 0

    package init(path: String, durability: Durability, sameWrites: Bool = false, streams: Int = 1) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        environment = try Environment(options: EnvironmentOptions(path: path, mapSize: 1 << 30, durability: durability.syncMode))
        let databases = try environment.openDatabases([("log", []), ("meta", []), ("commands", []), ("streams", [])])
        (log, meta, commands, self.streams) = (databases[0], databases[1], databases[2], databases[3])
        self.sameWrites = sameWrites
        let prefix = self.prefix
        streamKeys = (0..<max(1, streams)).map { prefix + Array("bench/\($0)".utf8) }
    }

    /// Replays `commitSizes`; returns the seconds it took.
    package func replay(_ commitSizes: [Int], valueSize: Int) throws -> Double {
        let value = [UInt8](repeating: 0xA5, count: valueSize)
        let commandValue = [UInt8](repeating: 1, count: 20)
        let streamValue = [UInt8](repeating: 2, count: 16)
        let started = ContinuousClock.now
        try value.withUnsafeBytes { valueBytes in
            for size in commitSizes {
                try environment.write { txn in
                    try txn.withCursor(log) { cursor in
                        for _ in 0..<size {
                            position += 1
                            try BigEndian.withBytes(of: position) { try cursor.put(key: $0, value: valueBytes, flags: .append) }
                            if sameWrites {
                                let commandKey = prefix + BigEndian.bytes(of: position) + BigEndian.bytes(of: position)
                                try txn.put(commands, key: commandKey, value: commandValue)
                                try txn.put(streams, key: streamKeys[Int(position) % streamKeys.count], value: streamValue)
                            }
                        }
                    }
                }
            }
        }
        let (seconds, attoseconds) = (ContinuousClock.now - started).components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    package func close() { environment.close() }
}

extension RawReplayer {
    /// Appends entries of `valueSize` bytes until the raw log holds `count` of them (no-sync).
    package func fill(upTo count: UInt64, valueSize: Int) throws {
        let value = [UInt8](repeating: 0x5A, count: valueSize)
        while position < count {
            try environment.write { txn in
                try txn.withCursor(log) { cursor in
                    var written = 0
                    while position < count && written < 100_000 {
                        position += 1
                        written += 1
                        try value.withUnsafeBytes { bytes in
                            try BigEndian.withBytes(of: position) { try cursor.put(key: $0, value: bytes, flags: .append) }
                        }
                    }
                }
            }
        }
    }

    /// One raw point read: a read transaction and one `mdb_get`.
    package func pointRead(_ position: UInt64) throws {
        let found = try environment.read { txn in
            try BigEndian.withBytes(of: position) { key in try txn.withValue(log, key: key) { $0.count } ?? 0 }
        }
        if found == 0 { throw LedgerError(.corruptedData, "raw key \(position) is missing from the baseline") }
    }
}
