import Crypto
import Foundation
import SwiftProtobuf

/// Encodes, hashes and decodes log entries. The byte recipe is in `docs/log-format.md`.
///
/// Stored value = canonical bytes ‖ `0x7A 0x20` ‖ hash, where the canonical bytes are the
/// `shareledger.v1.EventEnvelope` message serialized without its `hash` field, and
/// hash = SHA-256(previous hash ‖ canonical bytes).
package enum EnvelopeCodec {
    /// The tag byte of field 15 (`hash`, wire type 2): (15 << 3) | 2.
    package static let hashTag: UInt8 = 0x7A
    /// Bytes after the canonical bytes: tag, length (32), hash.
    package static let hashSuffixLength = 34

    /// The fields of a new entry, before it has a hash.
    package struct Fields {
        package var position: UInt64
        package var recordedAtMicros: Int64
        package var container: String
        package var actor: String
        package var commandID: UUID
        package var correlationID: UUID?
        package var causationID: UUID?
        package var schemaVersion: UInt32
        package var stream: String
        package var streamVersion: UInt64
        package var streamPreviousPosition: UInt64
        package var eventType: String
        package var payload: [UInt8]
        package var previousHash: [UInt8]

        package init(
            position: UInt64, recordedAtMicros: Int64, container: String, actor: String, commandID: UUID,
            correlationID: UUID?, causationID: UUID?, schemaVersion: UInt32, stream: String, streamVersion: UInt64,
            streamPreviousPosition: UInt64, eventType: String, payload: [UInt8], previousHash: [UInt8]
        ) {
            self.position = position
            self.recordedAtMicros = recordedAtMicros
            self.container = container
            self.actor = actor
            self.commandID = commandID
            self.correlationID = correlationID
            self.causationID = causationID
            self.schemaVersion = schemaVersion
            self.stream = stream
            self.streamVersion = streamVersion
            self.streamPreviousPosition = streamPreviousPosition
            self.eventType = eventType
            self.payload = payload
            self.previousHash = previousHash
        }
    }

    /// Returns the stored bytes of an entry and its hash.
    ///
    /// Written by hand, field by field in field-number order with proto3 defaults left out, into one
    /// buffer: exactly what SwiftProtobuf serializes for the same message (a test holds the two
    /// equal), without building the intermediate message and its `Data` fields.
    package static func encode(_ fields: Fields) -> (stored: [UInt8], hash: [UInt8]) {
        var out = [UInt8]()
        out.reserveCapacity(
            96 + fields.container.utf8.count + fields.actor.utf8.count + fields.stream.utf8.count
                + fields.eventType.utf8.count + fields.payload.count + hashSuffixLength)
        appendVarintField(1, fields.position, to: &out)
        appendVarintField(2, UInt64(bitPattern: fields.recordedAtMicros), to: &out)
        appendStringField(3, fields.container, to: &out)
        appendStringField(4, fields.actor, to: &out)
        appendUUIDField(5, fields.commandID, to: &out)
        if let id = fields.correlationID { appendUUIDField(6, id, to: &out) }
        if let id = fields.causationID { appendUUIDField(7, id, to: &out) }
        appendVarintField(8, UInt64(fields.schemaVersion), to: &out)
        appendStringField(9, fields.stream, to: &out)
        appendVarintField(10, fields.streamVersion, to: &out)
        appendVarintField(11, fields.streamPreviousPosition, to: &out)
        appendStringField(12, fields.eventType, to: &out)
        appendBytesField(13, fields.payload, to: &out)
        appendBytesField(14, fields.previousHash, to: &out)
        let hash = fields.previousHash.withUnsafeBytes { previous in
            out.withUnsafeBytes { chainHash(previous: previous, canonical: $0) }
        }
        out.append(hashTag)
        out.append(32)
        out.append(contentsOf: hash)
        return (out, hash)
    }

    @inline(__always)
    private static func appendVarint(_ value: UInt64, to out: inout [UInt8]) {
        var value = value
        while value >= 0x80 {
            out.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        out.append(UInt8(value))
    }

    @inline(__always)
    private static func appendVarintField(_ number: UInt64, _ value: UInt64, to out: inout [UInt8]) {
        guard value != 0 else { return }  // proto3: a default is not written
        appendVarint(number << 3, to: &out)
        appendVarint(value, to: &out)
    }

    @inline(__always)
    private static func appendBytesField(_ number: UInt64, _ bytes: [UInt8], to out: inout [UInt8]) {
        guard !bytes.isEmpty else { return }
        appendVarint(number << 3 | 2, to: &out)
        appendVarint(UInt64(bytes.count), to: &out)
        out.append(contentsOf: bytes)
    }

    @inline(__always)
    private static func appendStringField(_ number: UInt64, _ string: String, to out: inout [UInt8]) {
        let count = string.utf8.count
        guard count > 0 else { return }
        appendVarint(number << 3 | 2, to: &out)
        appendVarint(UInt64(count), to: &out)
        out.append(contentsOf: string.utf8)
    }

    @inline(__always)
    private static func appendUUIDField(_ number: UInt64, _ id: UUID, to out: inout [UInt8]) {
        appendVarint(number << 3 | 2, to: &out)
        out.append(16)
        withUnsafeBytes(of: id.uuid) { out.append(contentsOf: $0) }
    }

    /// The same entry serialized by SwiftProtobuf, for the test that holds ``encode(_:)`` to it.
    package static func encodeWithSwiftProtobuf(_ fields: Fields) throws -> [UInt8] {
        var message = Shareledger_V1_EventEnvelope()
        message.position = fields.position
        message.recordedAtMicros = fields.recordedAtMicros
        message.container = fields.container
        message.actor = fields.actor
        message.commandID = data(fields.commandID)
        if let id = fields.correlationID { message.correlationID = data(id) }
        if let id = fields.causationID { message.causationID = data(id) }
        message.schemaVersion = fields.schemaVersion
        message.stream = fields.stream
        message.streamVersion = fields.streamVersion
        message.streamPreviousPosition = fields.streamPreviousPosition
        message.eventType = fields.eventType
        message.payload = Data(fields.payload)
        message.previousHash = Data(fields.previousHash)
        let canonical: [UInt8] = try message.serializedBytes()
        message.hash = Data(
            fields.previousHash.withUnsafeBytes { previous in
                canonical.withUnsafeBytes { chainHash(previous: previous, canonical: $0) }
            })
        return try message.serializedBytes()
    }

    /// SHA-256(previous ‖ canonical): the chain's one hash recipe.
    @inline(__always)
    package static func chainDigest(previous: UnsafeRawBufferPointer, canonical: UnsafeRawBufferPointer) -> SHA256Digest {
        var hasher = SHA256()
        hasher.update(bufferPointer: previous)
        hasher.update(bufferPointer: canonical)
        return hasher.finalize()
    }

    /// ``chainDigest(previous:canonical:)`` as bytes (copied in one go: `Array(digest)` went through
    /// the digest's iterator byte by byte, about 1,800 instructions on every append).
    @inline(__always)
    package static func chainHash(previous: UnsafeRawBufferPointer, canonical: UnsafeRawBufferPointer) -> [UInt8] {
        chainDigest(previous: previous, canonical: canonical).withUnsafeBytes { Array($0) }
    }

    /// Decodes a stored entry found under `key`. Checks the hash suffix's shape, not the chain.
    /// Whether `stored` ends with the 34-byte hash field (tag, length 32, hash).
    @inline(__always)
    package static func endsWithHashField(_ stored: UnsafeRawBufferPointer) -> Bool {
        stored.count >= hashSuffixLength
            && stored[stored.count - hashSuffixLength] == hashTag
            && stored[stored.count - hashSuffixLength + 1] == 32
    }

    /// The `recorded_at_micros` (field 2) of a stored entry, read without decoding the rest: the
    /// canonical bytes start with field 1 (position) and field 2 (omitted when 0). 0 when absent or
    /// malformed.
    package static func recordedAtMicros(_ stored: UnsafeRawBufferPointer) -> Int64 {
        var index = 0
        if index < stored.count && stored[index] == 0x08 {
            index += 1
            guard readVarint(stored, &index, limit: stored.count) != nil else { return 0 }
        }
        guard index < stored.count && stored[index] == 0x10 else { return 0 }
        index += 1
        return readVarint(stored, &index, limit: stored.count).map { Int64(bitPattern: $0) } ?? 0
    }

    /// Written by hand, like ``encode(_:)``: one pass over the protobuf fields, each string checked as
    /// UTF-8 and copied once, with protobuf's rules (fields in any order, the last of a repeated
    /// field wins, unknown fields skipped). Stricter than SwiftProtobuf in one way: a known field
    /// with the wrong wire type, or a group, is ``LedgerError/Code/corruptedData`` (the writer never
    /// writes either). A test holds it to ``decodeWithSwiftProtobuf(_:key:)``.
    package static func decode(_ stored: UnsafeRawBufferPointer, key: UInt64) throws(LedgerError) -> EventEnvelope {
        guard endsWithHashField(stored) else {
            throw LedgerError(.corruptedData, "the event at position \(key) does not end with its 32-byte hash field")
        }
        var fields = DecodedFields()
        let count = stored.count
        var offset = 0
        while offset < count {
            guard let tag = readVarint(stored, &offset, limit: count), tag >> 3 > 0, tag >> 3 <= 536_870_911 else {
                throw malformed(key, "a field tag is malformed")
            }
            let field = tag >> 3
            let wireType = tag & 7
            let known = field <= 15
            switch wireType {
            case 0:
                guard let value = readVarint(stored, &offset, limit: count) else { throw malformed(key, "a varint runs past the end") }
                guard fields.setVarint(field, value) || !known else { throw malformed(key, "field \(field) has the wrong wire type") }
            case 2:
                guard let length = readVarint(stored, &offset, limit: count), length <= UInt64(count - offset) else {
                    throw malformed(key, "a length-delimited field runs past the end")
                }
                let bytes = UnsafeRawBufferPointer(rebasing: stored[offset..<(offset + Int(length))])
                offset += Int(length)
                guard try fields.setBytes(field, bytes, key: key) || !known else {
                    throw malformed(key, "field \(field) has the wrong wire type")
                }
            case 1, 5:
                let size = wireType == 1 ? 8 : 4
                guard !known else { throw malformed(key, "field \(field) has the wrong wire type") }
                guard count - offset >= size else { throw malformed(key, "a fixed-size field runs past the end") }
                offset += size
            default:
                throw malformed(key, "wire type \(wireType) is not one an event uses")
            }
        }
        return try fields.envelope(key: key)
    }

    /// The error of an event at `key` that does not decode.
    private static func malformed(_ key: UInt64, _ what: String) -> LedgerError {
        LedgerError(.corruptedData, "the event at position \(key) does not decode: \(what)")
    }

    /// The envelope's fields as ``decode(_:key:)`` reads them, the bytes ones still in the stored
    /// buffer (copied only into the envelope).
    private struct DecodedFields {
        var position: UInt64 = 0
        var recordedAtMicros: Int64 = 0
        var container = ""
        var actor = ""
        var commandID: UnsafeRawBufferPointer?
        var correlationID: UnsafeRawBufferPointer?
        var causationID: UnsafeRawBufferPointer?
        var schemaVersion: UInt32 = 0
        var stream = ""
        var streamVersion: UInt64 = 0
        var streamPreviousPosition: UInt64 = 0
        var eventType = ""
        var payload: UnsafeRawBufferPointer?
        var previousHash: UnsafeRawBufferPointer?
        var hash: UnsafeRawBufferPointer?

        /// Sets varint field `field`; false when the envelope has no varint field by that number.
        @inline(__always)
        mutating func setVarint(_ field: UInt64, _ value: UInt64) -> Bool {
            switch field {
            case 1: position = value
            case 2: recordedAtMicros = Int64(bitPattern: value)
            case 8: schemaVersion = UInt32(truncatingIfNeeded: value)
            case 10: streamVersion = value
            case 11: streamPreviousPosition = value
            default: return false
            }
            return true
        }

        /// Sets length-delimited field `field` (a string checked as UTF-8); false when the envelope
        /// has no such field by that number.
        @inline(__always)
        mutating func setBytes(_ field: UInt64, _ bytes: UnsafeRawBufferPointer, key: UInt64) throws(LedgerError) -> Bool {
            func text() throws(LedgerError) -> String {
                guard let value = validatedText(bytes) else { throw malformed(key, "field \(field) is not valid UTF-8") }
                return value
            }
            switch field {
            case 3: container = try text()
            case 4: actor = try text()
            case 5: commandID = bytes
            case 6: correlationID = bytes
            case 7: causationID = bytes
            case 9: stream = try text()
            case 12: eventType = try text()
            case 13: payload = bytes
            case 14: previousHash = bytes
            case 15: hash = bytes
            default: return false
            }
            return true
        }

        /// The envelope, once its position is checked against the key it was stored under and its
        /// id and hashes against their sizes.
        func envelope(key: UInt64) throws(LedgerError) -> EventEnvelope {
            guard position == key else {
                throw LedgerError(.corruptedData, "the event stored at position \(key) says it is at position \(position)")
            }
            guard let commandID = commandID.flatMap(uuid(_:)),
                let previous = EventHash(bytes: previousHash ?? UnsafeRawBufferPointer(start: nil, count: 0)),
                let hash = hash.flatMap({ EventHash(bytes: $0) })
            else {
                throw LedgerError(.corruptedData, "the event at position \(key) has a malformed id or hash field")
            }
            return EventEnvelope(
                position: LogPosition(position),
                recordedAtMicros: recordedAtMicros,
                container: container,
                actor: actor,
                commandID: commandID,
                correlationID: correlationID.flatMap(uuid(_:)),
                causationID: causationID.flatMap(uuid(_:)),
                schemaVersion: schemaVersion,
                stream: stream,
                streamVersion: streamVersion,
                streamPreviousPosition: LogPosition(streamPreviousPosition),
                eventType: eventType,
                payload: payload.map { Array($0) } ?? [],
                previousHash: previous,
                hash: hash)
        }
    }

    /// A UUID from exactly 16 bytes.
    private static func uuid(_ bytes: UnsafeRawBufferPointer) -> UUID? {
        guard bytes.count == 16 else { return nil }
        return UUID(uuid: bytes.loadUnaligned(as: uuid_t.self))
    }

    /// The same entry decoded by SwiftProtobuf, for the test that holds ``decode(_:key:)`` to it.
    package static func decodeWithSwiftProtobuf(_ stored: UnsafeRawBufferPointer, key: UInt64) throws(LedgerError) -> EventEnvelope {
        guard endsWithHashField(stored) else {
            throw LedgerError(.corruptedData, "the event at position \(key) does not end with its 32-byte hash field")
        }
        let message: Shareledger_V1_EventEnvelope
        do {
            // No copy: the decoder copies every bytes field out of the buffer it reads.
            let bytes = Data(
                bytesNoCopy: UnsafeMutableRawPointer(mutating: stored.baseAddress!), count: stored.count,
                deallocator: .none)
            message = try Shareledger_V1_EventEnvelope(serializedBytes: bytes)
        } catch {
            throw LedgerError(.corruptedData, "the event at position \(key) does not decode: \(error)")
        }
        guard message.position == key else {
            throw LedgerError(
                .corruptedData, "the event stored at position \(key) says it is at position \(message.position)")
        }
        guard let commandID = uuid(message.commandID),
            let previous = EventHash(bytes: message.previousHash),
            let hash = EventHash(bytes: message.hash)
        else {
            throw LedgerError(.corruptedData, "the event at position \(key) has a malformed id or hash field")
        }
        return EventEnvelope(
            position: LogPosition(message.position),
            recordedAtMicros: message.recordedAtMicros,
            container: message.container,
            actor: message.actor,
            commandID: commandID,
            correlationID: uuid(message.correlationID),
            causationID: uuid(message.causationID),
            schemaVersion: message.schemaVersion,
            stream: message.stream,
            streamVersion: message.streamVersion,
            streamPreviousPosition: LogPosition(message.streamPreviousPosition),
            eventType: message.eventType,
            payload: Array(message.payload),
            previousHash: previous,
            hash: hash)
    }

    package static func data(_ id: UUID) -> Data {
        withUnsafeBytes(of: id.uuid) { Data($0) }
    }

    package static func bytes(_ id: UUID) -> [UInt8] {
        withUnsafeBytes(of: id.uuid) { Array($0) }
    }

    package static func uuid(_ data: Data) -> UUID? {
        guard data.count == 16 else { return nil }
        return data.withUnsafeBytes { raw in
            UUID(uuid: raw.loadUnaligned(as: uuid_t.self))
        }
    }

    // MARK: - Fast scanning for chain verification

    /// What chain verification and stream walks need of a stored entry, read without a full decode.
    package struct ChainFields {
        package var position: UInt64?
        package var streamPreviousPosition: UInt64 = 0
        package var previousHash: UnsafeRawBufferPointer?
        package var canonical: UnsafeRawBufferPointer
        package var hash: UnsafeRawBufferPointer
    }

    /// Walks the protobuf fields of `stored` to find `position` (1), `stream_previous_position` (11) and
    /// `previous_hash` (14), and splits
    /// off the hash suffix. Returns `nil` when the bytes are not well-formed protobuf or the hash field
    /// is not last.
    package static func scanChainFields(_ stored: UnsafeRawBufferPointer) -> ChainFields? {
        let count = stored.count
        guard endsWithHashField(stored) else { return nil }
        let canonicalCount = count - hashSuffixLength
        var fields = ChainFields(
            position: nil, previousHash: nil,
            canonical: UnsafeRawBufferPointer(rebasing: stored[0..<canonicalCount]),
            hash: UnsafeRawBufferPointer(rebasing: stored[(count - 32)..<count]))
        var offset = 0
        while offset < canonicalCount {
            guard let tag = readVarint(stored, &offset, limit: canonicalCount) else { return nil }
            let fieldNumber = tag >> 3
            switch tag & 7 {
            case 0:
                guard let value = readVarint(stored, &offset, limit: canonicalCount) else { return nil }
                if fieldNumber == 1 {
                    fields.position = value
                } else if fieldNumber == 11 {
                    fields.streamPreviousPosition = value
                }
            case 1:
                offset += 8
            case 2:
                guard let length = readVarint(stored, &offset, limit: canonicalCount),
                    length <= UInt64(canonicalCount - offset)
                else { return nil }
                if fieldNumber == 14 {
                    fields.previousHash = UnsafeRawBufferPointer(rebasing: stored[offset..<(offset + Int(length))])
                } else if fieldNumber == 15 {
                    return nil  // a second hash field inside the canonical bytes
                }
                offset += Int(length)
            case 5:
                offset += 4
            default:
                return nil
            }
        }
        guard offset == canonicalCount else { return nil }
        return fields
    }

    /// `bytes` as a string when they are valid UTF-8, nil when they are not. ASCII, the common case, is
    /// checked eight bytes at a time and decoded directly; anything else is validated by the standard
    /// library (`String(validating:as:)`, whose generic entry point looked up type metadata for every
    /// text field: about 3 % of a replay's samples).
    package static func validatedText(_ bytes: UnsafeRawBufferPointer) -> String? {
        let count = bytes.count
        var index = 0
        var ascii = true
        while index + 8 <= count {
            if bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self) & 0x8080_8080_8080_8080 != 0 {
                ascii = false
                break
            }
            index += 8
        }
        if ascii {
            while index < count {
                if bytes[index] >= 0x80 {
                    ascii = false
                    break
                }
                index += 1
            }
        }
        return ascii ? String(decoding: bytes, as: UTF8.self) : String(validating: bytes, as: UTF8.self)
    }

    /// Reads a base-128 varint at `offset` (advanced past it), or nil when it runs past `limit`.
    @inline(__always)
    package static func readVarint(_ buffer: UnsafeRawBufferPointer, _ offset: inout Int, limit: Int) -> UInt64? {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while offset < limit && shift < 64 {
            let byte = buffer[offset]
            offset += 1
            // The tenth byte holds bit 63 only: anything more is not a 64-bit varint.
            if shift == 63 && byte > 1 { return nil }
            result |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 { return result }
            shift += 7
        }
        return nil
    }
}
