import ByteKeys
import EventLog
import Foundation
import LMDB
import ShareLedger
import SharingDomain
import SwiftProtobuf

/// Whose history to read.
public enum HistorySubject: Sendable, Hashable {
    /// Every event about the share at this URL: its changes, fetches of its metadata, accepts, and the
    /// residual tasks they caused.
    case share(URL)
    /// Every event a user did or was the subject of, in a container.
    case user(String, container: String)
    /// Every domain event of a container.
    case container(String)
}

/// A bound of a history window: a log position or a time.
public enum HistoryBound: Sendable, Hashable {
    /// A log position (inclusive).
    case position(LogPosition)
    /// A time (inclusive), compared with each event's recorded time.
    case time(Date)
}

/// One event of a history, with its payload readable.
public struct HistoryEntry: Sendable, Hashable {
    /// The event as stored.
    public var envelope: EventEnvelope
    /// The event's name without its package, e.g. `ShareAccepted`.
    public var name: String
    /// The payload in protobuf text format, on one line (for people).
    public var summary: String
    /// The payload as JSON (protobuf's JSON mapping), for programs.
    public var payloadJSON: String
    /// `true` when the event holds personal data sealed under a key that is destroyed (its person
    /// was forgotten, `ShareLedger.forget(user:in:requestedBy:)`): ``summary`` and
    /// ``payloadJSON`` show only ciphertext, which nothing can open any more. Sealed data whose key
    /// exists is shown as ciphertext too (history is not a way around the answers); `false` then.
    public var personalDataErased: Bool = false
}

extension LedgerAudit {
    /// The timeline of a share, a user or a container, oldest first, from the history indexes and
    /// their journal (not a scan of the log), within `since`...`until`, at most `limit` entries.
    public func history(
        of subject: HistorySubject, since: HistoryBound? = nil, until: HistoryBound? = nil, limit: Int = 10_000
    ) throws(LedgerError) -> [HistoryEntry] {
        let db: ReadModelTable
        let key: [UInt8]
        switch subject {
        case .share(let url):
            db = models.shareHistory
            key = Array(try Container.token(of: url).utf8)
        case .user(let user, let container):
            db = models.userHistory
            key = ReadModels.userKey(container, user)
        case .container(let container):
            db = models.containerHistory
            key = Array(container.utf8)
        }
        guard ReadModels.isStorable(key) else { return [] }
        let startPosition: UInt64 = {
            if case .position(let p) = since { return p.rawValue }
            return 0
        }()
        let endPosition: UInt64 = {
            if case .position(let p) = until { return p.rawValue }
            return .max
        }()
        // Positions from the index, in chunks of a fresh read transaction each; the chunk that
        // reaches the end of the index also takes, in the same transaction, the journal's positions
        // (all above the index's: see ``HistoryJournalEntry``).
        let models = self.models
        var positions: [UInt64] = []
        var from = startPosition
        while positions.count < limit {
            let (chunk, complete): ([UInt64], Bool) = try read("reading the history index") { txn in
                var out: [UInt64]
                if txn.readsThroughOverlay(db) {
                    // A read-only open that caught up derived/ in memory: the merged values.
                    out = []
                    try key.withUnsafeBytes { k in
                        try txn.visitValues(db, key: k) { value in
                            if out.count < 4_096, let position = BigEndian.uint64(value), position >= from { out.append(position) }
                        }
                    }
                } else {
                    out = try txn.withCursor(db) { cursor in
                        var out: [UInt64] = []
                        var entry = try key.withUnsafeBytes { k in
                            try BigEndian.withBytes(of: from) { v in try cursor.seek(key: k, valueAtLeast: v) }
                        }
                        while let current = entry, out.count < 4_096 {
                            guard let position = BigEndian.uint64(current.value) else { break }
                            out.append(position)
                            entry = try cursor.nextDuplicate()
                        }
                        return out
                    }
                }
                guard out.count < 4_096 else { return (out, false) }
                out.append(contentsOf: try models.journalPositions(in: txn, db, key: key, from: out.last.map { $0 + 1 } ?? from))
                return (out, true)
            }
            let inWindow = chunk.filter { $0 <= endPosition }
            positions.append(contentsOf: inWindow.prefix(limit - positions.count))
            guard !complete, inWindow.count == chunk.count, let last = chunk.last else { break }
            from = last + 1
        }
        var entries: [HistoryEntry] = []
        for position in positions {
            guard let envelope = try log.event(at: LogPosition(position)) else { continue }
            if case .time(let date) = since, envelope.recordedAt < date { continue }
            if case .time(let date) = until, envelope.recordedAt > date { break }
            entries.append(try HistoryEntry(envelope, models: models))
        }
        return entries
    }
}

extension HistoryEntry {
    init(_ envelope: EventEnvelope, models: ReadModels) throws(LedgerError) {
        self.envelope = envelope
        self.name = String(envelope.eventType.split(separator: ".").last ?? "")
        let event = try DomainEvent.decode(envelope)
        let sealed: Shareledger_Events_V1_SealedPersonalData?
        switch event {
        case .userRegistered(let e) where e.hasSealed: sealed = e.sealed
        case .shareCreated(let e) where e.hasSealedTitle: sealed = e.sealedTitle
        case .shareTitleChanged(let e) where e.hasSealedTitle: sealed = e.sealedTitle
        case .participantAdded(let e) where e.hasSealedLookup: sealed = e.sealedLookup
        case .shareParticipantFetched(let e) where e.hasSealedLookup: sealed = e.sealedLookup
        default: sealed = nil
        }
        if let sealed { personalDataErased = models.vault?.open(sealed, container: envelope.container) == nil }
        if let event {
            (self.summary, self.payloadJSON) = ReplayedEvent.texts(of: event)
        } else {
            self.summary = "\(envelope.payload.count) bytes"
            self.payloadJSON = "{}"
        }
    }
}
