import EventLog
import Foundation
import LMDB
import ShareLedger
import SharingDomain

/// Checking an import line by line before anything is written (``LedgerAudit/importLog(from:progress:)``).
extension LedgerAudit {
    struct ImportEvent: Sendable {
        var position: UInt64
        var stored: [UInt8]
        var hash: EventHash
        var recordedAtMicros: Int64
        var streamKey: [UInt8]
        var streamVersion: UInt64
        /// The index of its command in the import's commands.
        var command: Int
        /// A sharing-domain event, decoded, to project in the batch's transaction (nil for a raw append).
        var projection: ReplayedEvent?
    }

    struct ImportCommand: Sendable {
        var key: [UInt8]
        var first: UInt64
        var count: UInt32
        var streamVersion: UInt64
    }

    /// Checks every line of an import; returns the stored bytes and records to write, or throws
    /// naming the first bad line.
    func validateImport(_ bytes: [UInt8], after start: LogHead) throws(LedgerError) -> (
        events: [ImportEvent], commands: [ImportCommand]
    ) {
        var validation = ImportValidation(start: start)
        var lineNumber = 0
        var offset = 0
        while offset < bytes.count {
            lineNumber += 1
            do {
                guard let newline = bytes[offset...].firstIndex(of: UInt8(ascii: "\n")) else {
                    throw ImportRefusal("it has no newline at its end (the file is truncated)")
                }
                let line = bytes[offset..<newline]
                offset = newline + 1
                try validation.accept(line, in: self)
            } catch let refusal as ImportRefusal {
                throw LedgerError(
                    .invalidArguments, "line \(lineNumber) of the import is refused: \(refusal.text); nothing was imported")
            } catch {
                throw LedgerError.wrap(error, while: "checking line \(lineNumber) of the import")
            }
        }
        return (validation.events, validation.commands)
    }

    /// Why a line of an import is refused, in words.
    struct ImportRefusal: Error {
        var text: String
        init(_ text: String) { self.text = text }
    }

    /// The lines of an import checked so far: the events and commands they make, and the chain,
    /// streams and time they leave off at.
    struct ImportValidation {
        let start: LogHead
        var events: [ImportEvent] = []
        var commands: [ImportCommand] = []
        var commandIndex: [[UInt8]: Int] = [:]
        var streams: [[UInt8]: (version: UInt64, last: UInt64)] = [:]
        var previous: EventHash
        var position: UInt64
        var recordedAt: Int64

        init(start: LogHead) {
            self.start = start
            (previous, position, recordedAt) = (start.hash, start.position.rawValue, start.recordedAtMicros)
        }

        /// Checks the next line and adds its event, or throws ``ImportRefusal`` saying what is wrong
        /// with it (or a storage error from reading `ledger`'s records).
        mutating func accept(_ line: ArraySlice<UInt8>, in ledger: LedgerAudit) throws {
            let fields: EnvelopeCodec.Fields
            let claimed: EventHash
            switch LogNDJSON.parse(line) {
            case .failure(let problem): throw ImportRefusal(problem.text)
            case .success(let parsed): (fields, claimed) = parsed
            }
            try checkChain(fields)
            let (stored, hash) = EnvelopeCodec.encode(fields)
            guard hash == claimed.bytes else {
                throw ImportRefusal("its hash does not match SHA-256(previous hash ‖ canonical bytes): the event was altered")
            }
            guard let envelope = try? stored.withUnsafeBytes({ raw throws(LedgerError) in
                try EnvelopeCodec.decode(raw, key: fields.position)
            }) else {
                throw ImportRefusal("its envelope does not decode")
            }
            guard LogNDJSON.line(envelope).utf8.elementsEqual(line) else {
                throw ImportRefusal("it is not in the canonical form `share-ledger export` writes")
            }
            try Self.checkLimits(fields)
            // A sharing-domain event must decode, or rebuilding the read models after the import would fail.
            let projection: ReplayedEvent?
            do {
                projection = try ReplayedEvent.decode(fields)
            } catch {
                throw ImportRefusal("its payload does not decode as \(fields.eventType): \(error.message)")
            }
            let streamKey = try checkStream(fields, in: ledger)
            let command = try recordCommand(fields, in: ledger)
            let eventHash = EventHash(bytes: hash)!
            events.append(
                ImportEvent(
                    position: fields.position, stored: stored, hash: eventHash, recordedAtMicros: fields.recordedAtMicros,
                    streamKey: streamKey, streamVersion: fields.streamVersion, command: command, projection: projection))
            (previous, position, recordedAt) = (eventHash, fields.position, fields.recordedAtMicros)
        }

        /// The line's position, previous hash and time follow the line before it (or the ledger's head).
        private func checkChain(_ fields: EnvelopeCodec.Fields) throws {
            let continuesHead = position == start.position.rawValue && start.position.rawValue > 0
            guard fields.position == position + 1 else {
                throw ImportRefusal(
                    "it is at position \(fields.position), expected \(position + 1)"
                        + (continuesHead
                            ? " (the ledger is not empty: its head is \(start.position); import into an empty ledger or "
                                + "import a file that continues its head)" : " (a line is missing or out of order)"))
            }
            guard fields.previousHash == previous.bytes else {
                throw ImportRefusal(
                    "its previous hash is not the hash of position \(position)" + (continuesHead ? " (the head of the ledger)" : ""))
            }
            guard fields.recordedAtMicros >= recordedAt else {
                throw ImportRefusal("its recorded time goes backwards")
            }
        }

        /// The line's names and payload are within the log's limits.
        private static func checkLimits(_ fields: EnvelopeCodec.Fields) throws {
            for (value, what) in [
                (fields.container, "container"), (fields.actor, "actor"), (fields.stream, "stream"), (fields.eventType, "event type"),
            ] {
                let utf8 = value.utf8
                guard !utf8.isEmpty, utf8.count <= EventLog.Limits.maxNameBytes, !utf8.contains(0) else {
                    throw ImportRefusal("its \(what) is not 1 to \(EventLog.Limits.maxNameBytes) bytes of UTF-8 without NUL")
                }
            }
            guard fields.schemaVersion >= 1, fields.payload.count <= EventLog.Limits.maxPayloadBytes else {
                throw ImportRefusal("its schema version is 0 or its payload is larger than \(EventLog.Limits.maxPayloadBytes) bytes")
            }
        }

        /// The line continues its stream (the import's lines before it, else the ledger's record);
        /// returns the stream's key.
        private mutating func checkStream(_ fields: EnvelopeCodec.Fields, in ledger: LedgerAudit) throws -> [UInt8] {
            let streamKey = LogStore.streamKey(container: fields.container, stream: fields.stream)
            if fields.streamVersion == 0 {
                // Unversioned (a record of a read): no place in its stream, no back-link.
                guard fields.streamPreviousPosition == 0 else {
                    throw ImportRefusal("it has stream version 0 (unversioned) but a stream back-link")
                }
                return streamKey
            }
            let stream: (version: UInt64, last: UInt64)
            if let known = streams[streamKey] { stream = known } else { stream = try ledger.streamRecordForImport(streamKey) }
            guard fields.streamVersion == stream.version + 1, fields.streamPreviousPosition == stream.last else {
                throw ImportRefusal(
                    "stream \(fields.stream) is at version \(stream.version) (last position \(stream.last)), the event "
                        + "says version \(fields.streamVersion) after \(fields.streamPreviousPosition)")
            }
            streams[streamKey] = (fields.streamVersion, fields.position)
            return streamKey
        }

        /// Counts the line in its command, which must be new to the ledger and whose events must be
        /// consecutive; returns the command's index.
        private mutating func recordCommand(_ fields: EnvelopeCodec.Fields, in ledger: LedgerAudit) throws -> Int {
            let commandKey = LogStore.commandKey(container: fields.container, commandID: fields.commandID)
            // As the writer records it (and as deriving the records does): 0 for a command of the
            // sharing layer's namespace, the last event's stream version for a raw append.
            let streamVersion = LogStore.commandStreamVersion(eventType: fields.eventType, streamVersion: fields.streamVersion)
            if let index = commandIndex[commandKey] {
                guard commands[index].first + UInt64(commands[index].count) == fields.position else {
                    throw ImportRefusal("its command id \(fields.commandID) was used by an earlier command")
                }
                commands[index].count += 1
                commands[index].streamVersion = streamVersion
                return index
            }
            guard try !ledger.commandKnownForImport(commandKey) else {
                throw ImportRefusal("its command id \(fields.commandID) is already in the ledger")
            }
            commandIndex[commandKey] = commands.count
            commands.append(ImportCommand(key: commandKey, first: fields.position, count: 1, streamVersion: streamVersion))
            return commands.count - 1
        }
    }

    fileprivate func streamRecordForImport(_ key: [UInt8]) throws(LedgerError) -> (version: UInt64, last: UInt64) {
        try read("reading a stream record") { txn in try log.store.streamRecord(txn, key: key) }
    }

    fileprivate func commandKnownForImport(_ key: [UInt8]) throws(LedgerError) -> Bool {
        try read("reading a command record") { txn in try log.store.commandRecord(txn, key: key) != nil }
    }
}
