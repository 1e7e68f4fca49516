import Foundation
import Logging
import ShareLedger

/// Names of a shard's stream, subject and lease key on NATS.
public struct ShardNames: Sendable, Hashable {
    /// The shard, 1 to 64 characters of `A-Z a-z 0-9 _ -`.
    public let shard: String

    /// Checks the name.
    public init(shard: String) throws(ReplicationError) {
        guard !shard.isEmpty, shard.utf8.count <= 64,
            shard.unicodeScalars.allSatisfy({ $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "_" || $0 == "-") })
        else {
            throw ReplicationError(.invalidArguments, "the shard name \"\(shard.prefix(80))\" is not 1 to 64 characters of A-Z a-z 0-9 _ -")
        }
        self.shard = shard
    }

    /// The JetStream stream: `LEDGER_<shard>`.
    public var stream: String { "LEDGER_\(shard)" }
    /// The stream's one subject: `ledger.<shard>.events`.
    public var subject: String { "ledger.\(shard).events" }
    /// The writer lease's key in the leases bucket: `writer.<shard>`.
    public var leaseKey: String { "writer.\(shard)" }
    /// The subject the shard's writer answers commands on: `ledger.<shard>.commands`.
    public var commandSubject: String { "ledger.\(shard).commands" }

    /// `Nats-Msg-Id` of an event: its position and hash, so a deduplicated retry is the same event
    /// and a different event at the same position is never taken for a duplicate.
    static func messageID(_ position: LogPosition, _ hash: EventHash) -> String { "\(position.rawValue):\(hash.hex)" }
}

/// How a ``LedgerShipper`` ships.
public struct ShipperConfiguration: Sendable {
    /// The NATS servers (any of the cluster's).
    public var servers: [String]
    /// The shard this ledger is (one stream per shard).
    public var shard: ShardNames
    /// Replicas of the stream (3 in production; the stream is created with it).
    public var replicas: Int = 3
    /// The stream's duplicates window (deduplication by message id holds only inside it;
    /// `Nats-Expected-Last-Sequence` is the guard that always holds).
    public var duplicatesWindow: Duration = .seconds(120)
    /// Events published per pipelined batch (each batch waits for all its acks).
    public var batchLimit: Int = 256
    /// The wait for one NATS call (a batch's acks, a stream lookup).
    public var callTimeout: Duration = .seconds(2)
    /// Where the shipper logs (it never prints).
    public var logger: Logger
    /// Check the ledger directory's role before every publish (`ShareLedger.LedgerRole.checkWritable(at:now:)`):
    /// a writer publishes only under its current term with more than its lease's safety margin left,
    /// a replica or a deposed writer never. A standalone ledger ships unchecked (a library user who
    /// fences by other means). On by default.
    public var checksRole = true
    /// The monotonic clock the lease token is checked against (inject one in tests).
    public var monotonic: @Sendable () -> UInt64 = LedgerRole.monotonicNanos

    /// Makes a configuration.
    public init(servers: [String], shard: ShardNames, logger: Logger = Logger(label: "shareledger.replication.shipper")) {
        self.servers = servers
        self.shard = shard
        self.logger = logger
    }
}

/// When a writer tells a caller that its command is done (docs/operations.md, "Durability across
/// machines").
public enum ReplicationDurability: String, Sendable, Hashable, Codable, CaseIterable {
    /// After the LMDB commit (with the ledger's own `Durability`); shipping follows. A
    /// failover can lose the commands acknowledged but not yet in the stream when the writer died:
    /// the standby continues from the stream, and the old writer's unshipped events are not part
    /// of the history.
    case local
    /// After the LMDB commit and the stream's acknowledgement. On nats-server 2.9.x that
    /// acknowledgement means a majority of the stream's replicas have the event in their page cache,
    /// not on disk (2.9 has no `sync_interval`): a simultaneous crash of that majority's machines can
    /// still lose it; a process crash or one machine's loss cannot.
    case replicated
}

/// What a ``LedgerShipper`` has done, for `stats` and monitoring.
public struct ShipperStatistics: Sendable, Hashable, Codable {
    /// The shard.
    public var shard: String
    /// The stream.
    public var stream: String
    /// The last position the stream acknowledged (its last sequence, as far as this shipper knows).
    public var shippedPosition: UInt64
    /// The ledger's head when last looked at.
    public var headPosition: UInt64
    /// Positions committed and not yet acknowledged by the stream.
    public var lagPositions: UInt64
    /// Seconds between the oldest unshipped event's commit and now (0 when nothing waits).
    public var lagSeconds: Double
    /// Events published since the shipper started.
    public var eventsShipped: UInt64
    /// Times it re-read the stream after a failed or unanswered batch.
    public var resyncs: UInt64
    /// Whether another writer fenced it off (then it stopped).
    public var fenced: Bool
}
