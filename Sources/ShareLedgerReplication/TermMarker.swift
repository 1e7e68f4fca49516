import Foundation
import ShareLedger

/// The event a new writer of a shard publishes first, at the stream's head + 1 with
/// `Nats-Expected-Last-Sequence` = head, before it writes anything else: from then on, a publish of
/// any older writer expects a sequence the stream no longer has and fails. It is an ordinary event
/// of the log (hash-chained, applied by replicas, checked by `verify`): type
/// `shareledger.replication.WriterTermStarted`, container `_shard`, stream `writer-terms/<shard>`,
/// unversioned, payload JSON `{"holder":…,"shard":…,"term":…}` (docs/events.md).
public struct TermMarker: Sendable, Hashable, Codable {
    /// The event type.
    public static let eventType = "shareledger.replication.WriterTermStarted"
    /// The container every marker is in.
    public static let container = "_shard"

    /// The shard.
    public var shard: String
    /// The lease term that starts.
    public var term: UInt64
    /// The new writer's name in the lease.
    public var holder: String

    /// Makes a marker.
    public init(shard: String, term: UInt64, holder: String) {
        self.shard = shard
        self.term = term
        self.holder = holder
    }

    /// The marker as the stored event at `head + 1` of a ledger whose head is `head`, recorded at
    /// `nowMicros` (not before the head's time).
    public func event(after head: LogHead, nowMicros: Int64) -> StoredEvent {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let payload = Array((try? encoder.encode(self)) ?? Data())
        let (stored, _) = EnvelopeCodec.encode(
            EnvelopeCodec.Fields(
                position: head.position.rawValue + 1, recordedAtMicros: max(head.recordedAtMicros, nowMicros),
                container: TermMarker.container, actor: "system", commandID: CommandID.make(), correlationID: nil,
                causationID: nil, schemaVersion: 1, stream: "writer-terms/\(shard)", streamVersion: 0,
                streamPreviousPosition: 0, eventType: TermMarker.eventType, payload: payload,
                previousHash: head.hash.bytes))
        // The encoder's own output always ends with the hash field.
        return StoredEvent(position: LogPosition(head.position.rawValue + 1), bytes: stored)!
    }

    /// The marker `event` holds, nil when it is another event.
    public static func decode(_ event: StoredEvent) -> TermMarker? {
        guard let envelope = try? event.bytes.withUnsafeBytes({ raw in try EnvelopeCodec.decode(raw, key: event.position.rawValue) }),
            envelope.eventType == eventType
        else { return nil }
        return try? JSONDecoder().decode(TermMarker.self, from: Data(envelope.payload))
    }
}
