import Foundation
import ShareLedger

/// How far a shard's stream is behind a ledger, read from both (for `share-ledger stats --nats`).
public struct ReplicationLag: Sendable, Hashable, Codable {
    /// The stream.
    public var stream: String
    /// The stream's last sequence (the last position it holds).
    public var streamPosition: UInt64
    /// The ledger's head.
    public var headPosition: UInt64
    /// Positions committed in the ledger and not in the stream (0 when the stream is level or ahead).
    public var lagPositions: UInt64
    /// Seconds since the oldest event not in the stream was committed (0 when none).
    public var lagSeconds: Double

    /// Reads the stream's state and the ledger's head and compares them.
    public static func read(log: EventLog, servers: [String], shard: ShardNames) async throws(ReplicationError) -> ReplicationLag {
        let connection = try await NATSConnection.connect(servers: servers, name: "share-ledger stats")
        defer { connection.close() }
        let state = try await connection.call("reading stream \(shard.stream)") { connection throws(ReplicationError) in
            try connection.streamState(name: shard.stream)
        }
        guard let state else {
            throw ReplicationError(
                .invalidArguments, "stream \(shard.stream) does not exist: is \(shard.shard) the shard's name, and has its writer shipped yet?")
        }
        let streamPosition = state.lastSequence
        do {
            let head = try log.head().position.rawValue
            let lag = head &- min(head, streamPosition)
            var seconds = 0.0
            if lag > 0, let oldest = try log.event(at: LogPosition(streamPosition + 1)) {
                seconds = max(0, Date().timeIntervalSince1970 - Double(oldest.recordedAtMicros) / 1_000_000)
            }
            return ReplicationLag(
                stream: shard.stream, streamPosition: streamPosition, headPosition: head, lagPositions: lag, lagSeconds: seconds)
        } catch {
            throw ReplicationError(error, while: "reading the ledger's head")
        }
    }
}
