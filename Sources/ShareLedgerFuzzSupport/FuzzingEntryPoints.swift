import Foundation
import ShareLedger
import ShareLedgerAudit
import SwiftProtobuf

/// What the fuzz targets of `Sources/ShareLedgerFuzz` call: the parsers that read bytes from outside
/// (stored log entries, event payloads, share URLs, NDJSON import lines), each followed by the
/// round trip its output must survive. `package` access: not API, only for targets of this package.
///
/// Every function returns normally for any input; a failed check is a `preconditionFailure`, which
/// libFuzzer reports as a crash and saves the input. Inputs that do not parse are not failures.
package enum FuzzingEntryPoints {
    /// The type names of the domain events, in a fixed order, so that a fuzz input can pick one by
    /// its first byte and reach every payload decoder.
    package static let domainEventTypes: [String] = DomainEvent.typeNames

    /// Reads `stored` as a stored log entry, under the key it claims (field 1) and under key 1: the
    /// full decode (``EnvelopeCodec/decode(_:key:)``), the fast scanners chain verification and the
    /// time index use, and the payload decode of a domain event. A decoded entry must encode again to
    /// an entry that decodes to the same fields. Returns whether the full decode succeeded.
    @discardableResult
    package static func storedEntry(_ stored: UnsafeRawBufferPointer) -> Bool {
        _ = EnvelopeCodec.recordedAtMicros(stored)
        let scanned = EnvelopeCodec.scanChainFields(stored)
        var decodedAny = false
        for key in Set([scanned?.position ?? 1, 1]) {
            guard let envelope = try? EnvelopeCodec.decode(stored, key: key) else { continue }
            decodedAny = true
            roundTrip(envelope)
            _ = domainEvent(type: envelope.eventType, schemaVersion: envelope.schemaVersion, payload: envelope.payload)
        }
        return decodedAny
    }

    /// Decodes `payload` as the domain event `type`; a decoded event must serialize and decode
    /// again, and serialize to the same bytes (compared as bytes, not as messages: a NaN double
    /// field is not equal to itself). An older schema version is upcast on the first decode, so the
    /// round trip after it uses the current version. Returns whether it decoded as a domain event.
    @discardableResult
    package static func domainEvent(type: String, schemaVersion: UInt32, payload: [UInt8]) -> Bool {
        guard let event = try? DomainEvent.decode(type: type, schemaVersion: schemaVersion, payload: payload, position: 1)
        else { return false }
        guard let again = try? event.payload(),
            let back = try? DomainEvent.decode(type: type, schemaVersion: event.schemaVersion, payload: again, position: 1),
            let third = try? back.payload()
        else { preconditionFailure("a decoded \(type) does not serialize and decode again") }
        precondition(third == again, "\(type) changed in a serialize-decode round trip")
        return true
    }

    /// Parses `text` as a share URL and as a token, as the public API and the CLI do. A token found
    /// must be a valid token, and the URL the ledger makes of it must give it back. Returns the token.
    @discardableResult
    package static func shareURL(_ text: String) -> ShareToken? {
        if let token = ShareToken(text) {
            precondition(token.text == text, "a parsed token is not its text")
        }
        guard let url = URL(string: text) else { return nil }
        _ = url.lastPathComponent.prefix(64)  // what a batch fetch logs for a URL that is not a share URL
        guard let token = ShareURL.token(in: url) else { return nil }
        precondition(ShareToken(token.text) == token, "the token of a URL does not parse as a token")
        // A title as the ledger takes one (at most 512 bytes, so at most 512 scalars once mangled):
        // a longer fragment could make the URL longer than the parser reads, which no share's can be.
        let title = url.fragment.map { String(String.UnicodeScalarView($0.unicodeScalars.prefix(512))) }
        let made = ShareURL.make(host: "share.localhost", token: token, title: title)
        precondition(made.flatMap(ShareURL.token(in:)) == token, "a made share URL does not give its token back")
        return token
    }

    /// Parses one NDJSON import line (without its newline). A line that parses must encode to an
    /// entry that decodes, and a canonical line must come back byte for byte. Returns whether it parsed.
    @discardableResult
    package static func ndjsonLine(_ bytes: ArraySlice<UInt8>) -> Bool {
        guard case .success(let (fields, _)) = LogNDJSON.parse(bytes) else { return false }
        let (stored, _) = EnvelopeCodec.encode(fields)
        let decoded = stored.withUnsafeBytes { raw in try? EnvelopeCodec.decode(raw, key: fields.position) }
        guard let envelope = decoded else {
            // Fields the JSON allows but protobuf cannot hold (a string with invalid UTF-8 cannot come
            // from JSON; a position 0 is left out of the encoding and decodes as 0): the import refuses
            // such a line after this point, so it is not a failure here.
            return true
        }
        _ = LogNDJSON.line(envelope)
        return true
    }

    /// The bytes the log stores for `envelope` (its fields encoded again; the hash recomputed from
    /// them, which for an envelope read from a ledger is its own): seeds for the envelope target.
    package static func storedBytes(_ envelope: EventEnvelope) -> [UInt8] {
        EnvelopeCodec.encode(fields(envelope)).stored
    }

    private static func fields(_ envelope: EventEnvelope) -> EnvelopeCodec.Fields {
        EnvelopeCodec.Fields(
            position: envelope.position.rawValue, recordedAtMicros: envelope.recordedAtMicros, container: envelope.container,
            actor: envelope.actor, commandID: envelope.commandID, correlationID: envelope.correlationID,
            causationID: envelope.causationID, schemaVersion: envelope.schemaVersion, stream: envelope.stream,
            streamVersion: envelope.streamVersion, streamPreviousPosition: envelope.streamPreviousPosition.rawValue,
            eventType: envelope.eventType, payload: envelope.payload, previousHash: envelope.previousHash.bytes)
    }

    /// Encodes `envelope`'s fields again and checks that they decode to the same envelope (the hash
    /// aside: it is recomputed).
    private static func roundTrip(_ envelope: EventEnvelope) {
        let (stored, hash) = EnvelopeCodec.encode(fields(envelope))
        let again: EventEnvelope
        do {
            again = try stored.withUnsafeBytes { raw throws(LedgerError) in
                try EnvelopeCodec.decode(raw, key: envelope.position.rawValue)
            }
        } catch {
            preconditionFailure("a decoded entry does not decode after encoding it again: \(error)")
        }
        var expected = envelope
        expected.hash = EventHash(bytes: hash)!
        precondition(again == expected, "an entry changed in a decode-encode-decode round trip")
        let chain = stored.withUnsafeBytes { EnvelopeCodec.scanChainFields($0)?.position }
        precondition(
            chain == (envelope.position.rawValue == 0 ? nil : envelope.position.rawValue),
            "the chain scanner reads another position than the decoder")
    }
}
