import Foundation

/// A position in the event log: 1 for the first event, then 2, 3, ... without gaps.
/// Position 0 means "before the first event".
public struct LogPosition: RawRepresentable, Sendable, Hashable, Comparable, Codable, CustomStringConvertible,
    ExpressibleByIntegerLiteral
{
    /// The number.
    public var rawValue: UInt64

    /// Makes a position.
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    /// Makes a position.
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    /// Makes a position from a literal.
    public init(integerLiteral value: UInt64) { self.rawValue = value }

    /// Before the first event.
    public static let start = LogPosition(0)

    /// Orders positions by number.
    public static func < (lhs: LogPosition, rhs: LogPosition) -> Bool { lhs.rawValue < rhs.rawValue }
    /// The number, in decimal.
    public var description: String { String(rawValue) }
}

extension LogPosition: Strideable {
    /// The number of positions from this one to `other`.
    public func distance(to other: LogPosition) -> Int64 {
        Int64(bitPattern: other.rawValue &- rawValue)
    }

    /// The position `n` positions after this one.
    public func advanced(by n: Int64) -> LogPosition {
        LogPosition(rawValue &+ UInt64(bitPattern: n))
    }
}

/// A SHA-256 hash of the hash chain (32 bytes).
public struct EventHash: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The 32 bytes.
    public let bytes: [UInt8]

    /// Makes a hash from 32 bytes; `nil` for any other length.
    public init?(bytes: some Collection<UInt8>) {
        guard bytes.count == 32 else { return nil }
        self.bytes = Array(bytes)
    }

    /// Parses 64 hexadecimal digits; `nil` for anything else.
    public init?(hex: String) {
        let utf8 = Array(hex.utf8)
        guard utf8.count == 64, let bytes = Hex.decode(utf8) else { return nil }
        self.bytes = bytes
    }

    /// The hash that stands before the first event: 32 zero bytes.
    public static let zero = EventHash(bytes: [UInt8](repeating: 0, count: 32))!

    /// The 64 lowercase hexadecimal digits.
    public var hex: String { Hex.encode(bytes) }
    /// The 64 lowercase hexadecimal digits.
    public var description: String { hex }

    /// Decodes a hash from its 64 hexadecimal digits.
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let hash = EventHash(hex: text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not 64 hex digits"))
        }
        self = hash
    }

    /// Encodes the hash as its 64 hexadecimal digits.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(hex)
    }
}

/// A new event to append: its type, schema version and payload bytes.
public struct EventDraft: Sendable, Hashable {
    /// The payload's type, by convention the fully qualified protobuf message name
    /// (e.g. `shareledger.events.v1.ShareCreated`). 1...200 bytes of UTF-8.
    public var type: String
    /// The payload's schema version (≥ 1), for upcasting on read.
    public var schemaVersion: UInt32
    /// The payload bytes (at most ``EventLog/Limits/maxPayloadBytes``).
    public var payload: [UInt8]

    /// Makes a draft.
    public init(type: String, schemaVersion: UInt32 = 1, payload: [UInt8]) {
        self.type = type
        self.schemaVersion = schemaVersion
        self.payload = payload
    }
}

/// One event as stored in the log, with its envelope.
public struct EventEnvelope: Sendable, Hashable {
    /// Position in the log.
    public var position: LogPosition
    /// When the writer recorded it, in microseconds since 1970-01-01T00:00:00Z.
    public var recordedAtMicros: Int64
    /// The container it belongs to.
    public var container: String
    /// Who caused it.
    public var actor: String
    /// The command that appended it.
    public var commandID: UUID
    /// The workflow it belongs to, if given.
    public var correlationID: UUID?
    /// What caused the command, if given.
    public var causationID: UUID?
    /// The payload's schema version.
    public var schemaVersion: UInt32
    /// The stream it belongs to.
    public var stream: String
    /// Its number within the stream (1, 2, ...).
    public var streamVersion: UInt64
    /// The position of the stream's previous event (``LogPosition/start`` for its first).
    public var streamPreviousPosition: LogPosition
    /// The payload's type.
    public var eventType: String
    /// The payload bytes.
    public var payload: [UInt8]
    /// The hash of the event before it (``EventHash/zero`` for position 1).
    public var previousHash: EventHash
    /// This event's hash.
    public var hash: EventHash

    /// When the writer recorded it.
    public var recordedAt: Date { Date(timeIntervalSince1970: Double(recordedAtMicros) / 1_000_000) }
}

/// The stream version an append expects (optimistic concurrency).
///
/// A stream's version is the number of events in it: 0 for a stream that does not exist yet.
public enum ExpectedVersion: Sendable, Hashable, CustomStringConvertible {
    /// No check.
    case any
    /// The stream must not exist yet (version 0).
    case noStream
    /// The stream must exist (version ≥ 1).
    case exists
    /// The stream must be at exactly this version.
    case exact(UInt64)

    /// Whether `current` satisfies the expectation.
    public func isSatisfied(by current: UInt64) -> Bool {
        switch self {
        case .any: return true
        case .noStream: return current == 0
        case .exists: return current > 0
        case .exact(let version): return current == version
        }
    }

    /// The expectation in words, for messages.
    public var description: String {
        switch self {
        case .any: return "any"
        case .noStream: return "noStream"
        case .exists: return "exists"
        case .exact(let version): return "exactly \(version)"
        }
    }
}

/// Who sends a command, for what, and how to recognise it when it is sent again.
public struct CommandMetadata: Sendable, Hashable {
    /// Identifies the command. Sending a command with an id the ledger has seen before (in the same
    /// container) appends nothing and returns the first outcome: make retries safe by reusing the id.
    /// Time-ordered ids (UUIDv7, the default) are cheapest to index; random (v4) ids work but each one
    /// dirties its own index page at commit.
    public var commandID: UUID
    /// The container the command acts in, e.g. `iCloud.com.example.notes`.
    public var container: String
    /// Who sends it: a user record name, or `system`.
    public var actor: String
    /// Ties together the commands of one workflow.
    public var correlationID: UUID?
    /// The command or event that caused this one.
    public var causationID: UUID?

    /// Makes metadata; a fresh time-ordered command id (``CommandID/make()``) when none is given.
    public init(
        commandID: UUID = CommandID.make(), container: String, actor: String, correlationID: UUID? = nil,
        causationID: UUID? = nil
    ) {
        self.commandID = commandID
        self.container = container
        self.actor = actor
        self.correlationID = correlationID
        self.causationID = causationID
    }
}

/// What an append did.
public struct AppendResult: Sendable, Hashable {
    /// The positions of the appended events, in order.
    public var positions: ClosedRange<LogPosition>
    /// The stream's version after the append.
    public var streamVersion: UInt64
    /// `true` when the command id was seen before and this is the first outcome returned again
    /// (nothing was appended this time).
    public var wasAlreadyApplied: Bool
}

/// The last event of the log.
public struct LogHead: Sendable, Hashable {
    /// Its position (``LogPosition/start`` for an empty log).
    public var position: LogPosition
    /// Its hash (``EventHash/zero`` for an empty log).
    public var hash: EventHash
    /// Its recorded-at time in microseconds (0 for an empty log). Recorded times never go backwards.
    public var recordedAtMicros: Int64

    /// Makes a head.
    public init(position: LogPosition, hash: EventHash, recordedAtMicros: Int64 = 0) {
        self.position = position
        self.hash = hash
        self.recordedAtMicros = recordedAtMicros
    }
}

/// How hard a commit works to survive a power loss. A process crash loses no acknowledged command in
/// any mode: only an operating-system crash or a power loss tells them apart.
public enum Durability: String, Sendable, Hashable, CaseIterable, Codable {
    /// Every group commit is flushed to disk before its callers resume (the default).
    case durable
    /// One flush per commit instead of two (LMDB `MDB_NOMETASYNC`): a power loss may undo the last commit.
    case relaxed
    /// No flush at commit (LMDB `MDB_NOSYNC`); flushed when the ledger closes. A power loss can lose
    /// recent commits. For bulk imports and benchmarks.
    case unsafeNoSync
}
