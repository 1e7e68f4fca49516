import ByteKeys
import EventLog
import Foundation
import LMDB
import ShareLedger
import SharingDomain

/// The NDJSON form of the log (`docs/log-format.md`, "Export and import as NDJSON"): one event per
/// line, every envelope field, keys in a fixed order, no spaces, so the same log always exports to
/// the same bytes.
public enum LogNDJSON {
    /// The line of `envelope`, without its newline.
    public static func line(_ envelope: EventEnvelope) -> String {
        var out = "{\"position\":\(envelope.position.rawValue)"
        out += ",\"recordedAtMicros\":\(envelope.recordedAtMicros)"
        out += ",\"container\":" + quoted(envelope.container)
        out += ",\"actor\":" + quoted(envelope.actor)
        out += ",\"commandID\":" + uuid(envelope.commandID)
        out += ",\"correlationID\":" + (envelope.correlationID.map(uuid) ?? "null")
        out += ",\"causationID\":" + (envelope.causationID.map(uuid) ?? "null")
        out += ",\"schemaVersion\":\(envelope.schemaVersion)"
        out += ",\"stream\":" + quoted(envelope.stream)
        out += ",\"streamVersion\":\(envelope.streamVersion)"
        out += ",\"streamPreviousPosition\":\(envelope.streamPreviousPosition.rawValue)"
        out += ",\"eventType\":" + quoted(envelope.eventType)
        out += ",\"payload\":\"" + Data(envelope.payload).base64EncodedString() + "\""
        out += ",\"previousHash\":\"" + envelope.previousHash.hex + "\""
        out += ",\"hash\":\"" + envelope.hash.hex + "\"}"
        return out
    }

    private static func uuid(_ id: UUID) -> String { "\"" + id.uuidString.lowercased() + "\"" }

    /// A JSON string: `"` and `\` escaped with a backslash, control characters (below U+0020) as
    /// `\u00xx` with lowercase hex digits, everything else as UTF-8.
    static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u00" + (hex.count == 1 ? "0" : "") + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// What is wrong with a line.
    package struct LineProblem: Error {
        var text: String
        init(_ text: String) { self.text = text }
    }

    private struct Line: Decodable {
        var position: UInt64
        var recordedAtMicros: Int64
        var container: String
        var actor: String
        var commandID: String
        var correlationID: String?
        var causationID: String?
        var schemaVersion: UInt32
        var stream: String
        var streamVersion: UInt64
        var streamPreviousPosition: UInt64
        var eventType: String
        var payload: String
        var previousHash: String
        var hash: String
    }

    /// Parses one line (without its newline) into the fields to encode and the hash the line claims.
    /// Returns what is wrong instead when the line is not the canonical form of an event.
    package static func parse(_ bytes: ArraySlice<UInt8>) -> Result<(EnvelopeCodec.Fields, EventHash), LineProblem> {
        let line: Line
        do {
            line = try JSONDecoder().decode(Line.self, from: Data(bytes))
        } catch {
            return .failure(LineProblem("not a JSON event line: \(describe(error))"))
        }
        guard let commandID = UUID(uuidString: line.commandID) else { return .failure(LineProblem("commandID is not a UUID")) }
        var correlation: UUID?
        if let text = line.correlationID {
            guard let id = UUID(uuidString: text) else { return .failure(LineProblem("correlationID is not a UUID")) }
            correlation = id
        }
        var causation: UUID?
        if let text = line.causationID {
            guard let id = UUID(uuidString: text) else { return .failure(LineProblem("causationID is not a UUID")) }
            causation = id
        }
        guard let payload = Data(base64Encoded: line.payload) else { return .failure(LineProblem("payload is not base64")) }
        guard let previous = EventHash(hex: line.previousHash) else { return .failure(LineProblem("previousHash is not 64 hex digits")) }
        guard let hash = EventHash(hex: line.hash) else { return .failure(LineProblem("hash is not 64 hex digits")) }
        return .success(
            (
                EnvelopeCodec.Fields(
                    position: line.position, recordedAtMicros: line.recordedAtMicros, container: line.container,
                    actor: line.actor, commandID: commandID, correlationID: correlation, causationID: causation,
                    schemaVersion: line.schemaVersion, stream: line.stream, streamVersion: line.streamVersion,
                    streamPreviousPosition: line.streamPreviousPosition, eventType: line.eventType,
                    payload: Array(payload), previousHash: previous.bytes),
                hash
            ))
    }

    private static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.keyNotFound(let key, _): return "the key \"\(key.stringValue)\" is missing"
        case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context):
            return "\"\(context.codingPath.map(\.stringValue).joined(separator: "."))\" has the wrong type"
        case DecodingError.dataCorrupted(let context):
            return context.codingPath.isEmpty
                ? "malformed JSON" : "\"\(context.codingPath.map(\.stringValue).joined(separator: "."))\" is malformed"
        default: return "\(error)"
        }
    }
}

/// What ``LedgerAudit/export(since:to:progress:)`` wrote.
public struct ExportSummary: Sendable, Hashable, Codable {
    /// Lines (events) written.
    public var events: UInt64
    /// The first position written (0 when none).
    public var firstPosition: UInt64
    /// The last position written (0 when none).
    public var lastPosition: UInt64
    /// The hash of the last event written (hex), or of the export's starting point when none was.
    public var lastHash: String
}

/// What ``LedgerAudit/importLog(from:progress:)`` imported.
public struct ImportSummary: Sendable, Hashable, Codable {
    /// Events imported.
    public var events: UInt64
    /// The position of the last imported event (the head the import left).
    public var headPosition: UInt64
    /// The hash of the last imported event (hex).
    public var headHash: String
    /// Events projected into the read models (in the transactions that wrote them).
    public var replayed: UInt64
}

extension LedgerAudit {
    /// Writes the events after `since` to `handle` as NDJSON (``LogNDJSON/line(_:)`` and a newline
    /// each), reading in chunks of short read transactions. `progress` gets (position, head).
    ///
    /// The chain is verified as the events are read: at the first event it rejects (missing,
    /// altered, not linking to the one before), the export throws `LedgerError.Code.corruptedData`
    /// naming that position, having written only the events before it.
    @discardableResult
    public func export(
        since: LogPosition = .start, to handle: FileHandle, progress: (@Sendable (UInt64, UInt64) -> Void)? = nil
    ) throws(LedgerError) -> ExportSummary {
        let head = try log.head().position.rawValue
        var summary = ExportSummary(events: 0, firstPosition: 0, lastPosition: 0, lastHash: EventHash.zero.hex)
        if since.rawValue > 0, let hash = try storedHash(at: since.rawValue) { summary.lastHash = hash.hex }
        var after = since
        while after.rawValue < head {
            var chunk = try log.events(after: after, limit: 4096).filter { $0.position.rawValue <= head }
            guard let chunkLast = chunk.last else { break }
            // The chain is verified as the events are read: an export never hands on an event the
            // chain rejects (what `verify` would report), it stops before it with an error.
            let broken = try log.firstBreak(in: (after.rawValue + 1)...chunkLast.position.rawValue)
            if let broken { chunk = chunk.filter { $0.position.rawValue < broken.position } }
            var text = ""
            for envelope in chunk {
                text += LogNDJSON.line(envelope)
                text += "\n"
            }
            do {
                try handle.write(contentsOf: Data(text.utf8))
            } catch {
                throw LedgerError(.storageFailure, "writing the export failed: \(error)")
            }
            if let last = chunk.last {
                if summary.firstPosition == 0 { summary.firstPosition = chunk[0].position.rawValue }
                summary.events += UInt64(chunk.count)
                summary.lastPosition = last.position.rawValue
                summary.lastHash = last.hash.hex
                after = last.position
                progress?(after.rawValue, head)
            }
            if let broken {
                throw LedgerError(
                    .corruptedData, "the log's hash chain does not hold at position \(broken.position) (\(broken.problem)); "
                        + "the export stopped before it, after \(summary.events) events. Run `share-ledger verify`, and "
                        + "restore the ledger from a backup or export a good copy")
            }
        }
        return summary
    }

    /// Imports an NDJSON export (``export(since:to:progress:)``) read from `handle`, projecting its
    /// events into the read models in the same transactions that write them.
    ///
    /// The ledger must be empty, or the file must continue its head (its first line at head + 1 with
    /// the head's hash as previous hash). Every line is checked before anything is written: it must be
    /// the canonical line of its event, positions must follow one another, each previous hash must be
    /// the hash before it, the hash recomputed from the fields (the envelope codec) must be the line's,
    /// streams must be continuous and a command's events consecutive. Then the events are written in
    /// batches through the writer thread, with the stream, command and head records the writer keeps;
    /// a batch never splits a command and projects its events into the read models in its own
    /// transaction, so a crash at any moment leaves whole commands with read models that match them,
    /// and the rest can be imported with an export `--since` the head.
    ///
    /// Then every domain event is checked against the sharing rules (`EventValidator`: one the
    /// rules could have produced from the state before it), replayed into a scratch ledger that
    /// starts from the live read models; the first that is not refuses the whole import, before
    /// anything is written.
    ///
    /// - Throws: `LedgerError.Code.invalidArguments` naming the first bad line (nothing is written),
    ///   or the first event the sharing rules could not have produced (its line, position, type and
    ///   why; nothing is written);
    ///   `LedgerError.Code.invalidArguments` when the ledger is not empty and the file does not
    ///   continue it; `LedgerError.Code.serverRecordChanged` when another writer appends during the
    ///   import; storage errors.
    ///
    /// The whole file and the encoded events are held in memory while they are checked; a line longer
    /// than ``LogNDJSON/maxLineBytes`` is refused as soon as that many bytes of it were read.
    @discardableResult
    public func importLog(
        from handle: FileHandle, progress: (@Sendable (UInt64, UInt64) -> Void)? = nil
    ) async throws(LedgerError) -> ImportSummary {
        let data = try LogNDJSON.readImport(from: handle)
        let start = try log.head()
        let entries = try validateImport(data, after: start)
        try checkImportRules(entries.events, after: start)
        // Write in batches, each one transaction on the writer thread.
        let store = log.store
        let total = UInt64(entries.events.count)
        var done = 0
        while done < entries.events.count {
            // About 8,192 events, never splitting a command, so that each commit leaves whole
            // commands with their records (a crash between batches leaves a ledger that audits clean).
            var end = min(done + 8192, entries.events.count)
            while end < entries.events.count && entries.events[end].command == entries.events[end - 1].command { end += 1 }
            let batch = Array(entries.events[done..<end])
            let commands = Array(entries.commands[batch[0].command...batch[batch.count - 1].command])
            _ = try await maintain { txn in
                let head = try store.readHead(txn)
                guard let first = batch.first, head.position.rawValue + 1 == first.position else {
                    throw LedgerError(
                        .serverRecordChanged, "the ledger changed during the import (its head is now \(head.position)); "
                            + "import into a ledger nobody else writes to")
                }
                for event in batch {
                    try txn.put(store.log, key: BigEndian.bytes(of: event.position), value: event.stored)
                    if event.streamVersion != 0 {
                        try store.writeStreamRecord(txn, key: event.streamKey, version: event.streamVersion, last: event.position)
                    }
                }
                for command in commands {
                    try store.writeCommandRecord(
                        txn, key: command.key, first: command.first, count: command.count, streamVersion: command.streamVersion)
                }
                // The batch's read models commit with its events, as every command's do: a kill at any
                // moment leaves read models that match the log.
                try ReplayedEvent.project(batch.lazy.compactMap(\.projection), into: store.models, txn)
                return batch.count
            }
            done += batch.count
            progress?(UInt64(done), total)
        }
        try finishForgets(among: entries.events.lazy.map { $0.projection?.event })
        let replayed = total
        let last = entries.events.last
        return ImportSummary(
            events: total, headPosition: last?.position ?? start.position.rawValue, headHash: (last?.hash ?? start.hash).hex,
            replayed: replayed)
    }

    /// Replays the import's domain events, each checked by the `EventValidator` against the state
    /// before it, into a scratch ledger next to this one (`.import-check-*`, no fsync, removed after)
    /// that starts from a copy of the live read models: throws naming the first event the sharing
    /// rules could not have produced, before anything is written.
    func checkImportRules(_ events: [ImportEvent], after start: LogHead) throws(LedgerError) {
        guard events.contains(where: { $0.projection != nil }) else { return }
        guard !configuration.readOnly else {
            throw LedgerError(.readOnly, "the ledger at \(configuration.path) was opened read-only")
        }
        let scratchPath = (configuration.path as NSString).appendingPathComponent(".import-check-\(UUID().uuidString)")
        ReadModelSnapshotStore.removeAbandonedFolders(in: configuration.path, prefix: ".import-check-")
        defer { try? FileManager.default.removeItem(atPath: scratchPath) }
        let store = log.store
        do {
            try FileManager.default.createDirectory(atPath: scratchPath, withIntermediateDirectories: true)
            let scratch = try LogStore.openLedger(
                EventLog.Configuration.scratch(at: scratchPath, logger: configuration.logger))
            defer { scratch.environment.close() }
            if start.position.rawValue > 0 {
                // The state the import continues: the live read models, copied (sorted appends).
                try store.read { live in
                    try scratch.environment.write { txn in
                        for (source, copy) in zip(store.models.all, scratch.models.all) {
                            try live.withCursor(source) { cursor in
                                var entry = try cursor.first()
                                try LogReplay.copy(&entry, with: cursor, into: copy, in: txn)
                            }
                        }
                    }
                }
            }
            // The scratch copy projects with this ledger's key store, as the live read models do.
            if let (index, text) = try ReplayedEvent.firstInadmissible(events.map(\.projection), into: scratch, sealingWith: store.models) {
                throw LedgerError(.invalidArguments, "line \(index + 1) of the import is refused: \(text); nothing was imported")
            }
        } catch {
            throw LedgerError.wrap(error, while: "checking the import against the sharing rules in \(scratchPath)")
        }
    }
}
