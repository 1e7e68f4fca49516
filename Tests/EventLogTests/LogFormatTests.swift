import ByteKeys
import Crypto
import EventLog
import Foundation
import LMDB
import TestSupport
import Testing

/// Pins the stored format of the log byte for byte: the worked example of `docs/log-format.md`.
/// The canonical bytes are built here by hand from the documented field list (not with SwiftProtobuf),
/// so a change in the encoder or the recipe fails this test.
@Suite("Log format")
struct LogFormatTests {
    static let commandID = UUID(uuidString: "0189F2B2-1C4E-7A3B-8D2F-6C1E5B4A3F20")!
    static let recordedAt: Int64 = 1_700_000_000_000_000

    private func varint(_ value: UInt64) -> [UInt8] {
        var value = value
        var out: [UInt8] = []
        while value >= 0x80 {
            out.append(UInt8(value & 0x7F) | 0x80)
            value >>= 7
        }
        out.append(UInt8(value))
        return out
    }

    private func field(_ number: UInt64, varint value: UInt64) -> [UInt8] { varint(number << 3) + varint(value) }
    private func field(_ number: UInt64, bytes: [UInt8]) -> [UInt8] {
        varint(number << 3 | 2) + varint(UInt64(bytes.count)) + bytes
    }

    @Test("the worked example: stored bytes and hash of the first event")
    func workedExample() async throws {
        let dir = TemporaryDirectory()
        do {
            let log = try EventLog.open(
                EventLog.Configuration(path: dir.path, durability: .unsafeNoSync, clock: FixedClock(micros: Self.recordedAt)))
            try await log.append(
                [EventDraft(type: "shareledger.demo.Note", schemaVersion: 1, payload: Array("hello, ledger".utf8))],
                to: "share/demo", expectedVersion: .noStream,
                metadata: CommandMetadata(commandID: Self.commandID, container: "iCloud.com.example.notes", actor: "_alice"))
            await log.close()
        }
        let env = try Environment(options: EnvironmentOptions(path: dir.path, readOnly: true))
        let databases = try env.openDatabases([("log", []), ("meta", [])])
        let stored = try #require(try env.read { txn in try txn.get(databases[0], key: BigEndian.bytes(of: UInt64(1))) })
        // Format 2: no head record; the head is the last log entry.
        let headRecord = try env.read { txn in try txn.get(databases[1], key: Array("head".utf8)) }
        let format = try #require(try env.read { txn in try txn.get(databases[1], key: Array("format_version".utf8)) })

        let commandIDBytes = withUnsafeBytes(of: Self.commandID.uuid) { Array($0) }
        let canonical: [UInt8] =
            field(1, varint: 1)
            + field(2, varint: UInt64(Self.recordedAt))
            + field(3, bytes: Array("iCloud.com.example.notes".utf8))
            + field(4, bytes: Array("_alice".utf8))
            + field(5, bytes: commandIDBytes)
            + field(8, varint: 1)
            + field(9, bytes: Array("share/demo".utf8))
            + field(10, varint: 1)
            + field(12, bytes: Array("shareledger.demo.Note".utf8))
            + field(13, bytes: Array("hello, ledger".utf8))
            + field(14, bytes: [UInt8](repeating: 0, count: 32))
        let hash = Array(SHA256.hash(data: [UInt8](repeating: 0, count: 32) + canonical))
        #expect(stored == canonical + [0x7A, 0x20] + hash)
        // The value in docs/log-format.md, cross-checked there with Python's hashlib.
        #expect(EventHash(bytes: hash)?.hex == "3222a59519d1838db829d7db233bd604a9409cf1c84200cd394d62940dd67d60")
        #expect(canonical.count == 151)
        #expect(headRecord == nil)
        #expect(format == [0, 0, 0, 5])
    }
}

@Suite("Envelope encoder")
struct EnvelopeEncoderTests {
    @Test("text fields are accepted exactly when the standard library's validation accepts them")
    func validatedTextMatchesStandardLibrary() {
        var random = SplitMix64(state: 0x7E_57)
        let pieces: [[UInt8]] = [
            Array("a".utf8), Array("Z9_.-".utf8), Array("é".utf8), Array("€".utf8), Array("😀".utf8),
            [0x80], [0xC3], [0xE2, 0x82], [0xF0, 0x9F, 0x98], [0xFF], [0xC0, 0x80], [0xED, 0xA0, 0x80], [0],
        ]
        for round in 0..<5_000 {
            var bytes: [UInt8] = []
            // Mostly ASCII runs (past the eight-byte steps), with a piece of anything at a random place.
            for _ in 0..<Int.random(in: 0...12, using: &random) {
                bytes += round % 3 == 0
                    ? pieces.randomElement(using: &random)!
                    : Array(repeating: UInt8.random(in: 0x20...0x7E, using: &random), count: Int.random(in: 0...9, using: &random))
            }
            let expected = bytes.withUnsafeBytes { String(validating: $0, as: UTF8.self) }
            #expect(bytes.withUnsafeBytes { EnvelopeCodec.validatedText($0) } == expected, "\(bytes)")
        }
    }

    @Test("the hand-written encoder writes exactly what SwiftProtobuf writes", arguments: 0..<200)
    func matchesSwiftProtobuf(seed: Int) throws {
        var random = SplitMix64(state: UInt64(seed) &* 0x9E37_79B9 &+ 1)
        func text(_ max: Int) -> String {
            let alphabet = Array("abcXYZ019_./-é€😀")
            return String((0..<Int.random(in: 0...max, using: &random)).map { _ in alphabet.randomElement(using: &random)! })
        }
        func bytes(_ max: Int) -> [UInt8] { (0..<Int.random(in: 0...max, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) } }
        func uuid() -> UUID { UUID(uuid: withUnsafeBytes(of: (random.next(), random.next())) { $0.loadUnaligned(as: uuid_t.self) }) }
        let edge: [UInt64] = [0, 1, 127, 128, 16_383, 16_384, UInt64(UInt32.max), UInt64.max]
        func number() -> UInt64 { Bool.random(using: &random) ? edge.randomElement(using: &random)! : random.next() >> UInt64.random(in: 0...63, using: &random) }
        let fields = EnvelopeCodec.Fields(
            position: number(), recordedAtMicros: Int64(bitPattern: number()), container: text(40), actor: text(20),
            commandID: uuid(), correlationID: Bool.random(using: &random) ? uuid() : nil,
            causationID: Bool.random(using: &random) ? uuid() : nil, schemaVersion: UInt32(truncatingIfNeeded: number()),
            stream: text(60), streamVersion: number(), streamPreviousPosition: number(), eventType: text(50),
            payload: bytes(seed.isMultiple(of: 50) ? 300_000 : 600), previousHash: (0..<32).map { _ in UInt8.random(in: 0...255, using: &random) })
        let (stored, hash) = EnvelopeCodec.encode(fields)
        #expect(stored == (try EnvelopeCodec.encodeWithSwiftProtobuf(fields)))
        #expect(Array(stored.suffix(32)) == hash)

        // The hand-written decoder reads what SwiftProtobuf reads...
        let decoded = try stored.withUnsafeBytes { try EnvelopeCodec.decode($0, key: fields.position) }
        #expect(decoded == (try stored.withUnsafeBytes { try EnvelopeCodec.decodeWithSwiftProtobuf($0, key: fields.position) }))
        #expect(decoded.payload == fields.payload && decoded.hash.bytes == hash && decoded.container == fields.container)

        // ...and of damaged or unusual bytes, never more: what it accepts SwiftProtobuf accepts the
        // same, and what SwiftProtobuf refuses it refuses (it may refuse more: a known field with the
        // wrong wire type, a group).
        let canonical = Array(stored.dropLast(EnvelopeCodec.hashSuffixLength))
        let suffix = Array(stored.suffix(EnvelopeCodec.hashSuffixLength))
        for _ in 0..<40 {
            var damaged = canonical
            switch Int.random(in: 0..<5, using: &random) {
            case 0 where !damaged.isEmpty:  // a flipped byte
                damaged[Int.random(in: 0..<damaged.count, using: &random)] ^= UInt8.random(in: 1...255, using: &random)
            case 1:  // cut short
                damaged = Array(damaged.prefix(Int.random(in: 0...damaged.count, using: &random)))
            case 2:  // an unknown field of each wire type
                damaged += [0x80, 0x01, 0x05] + [0x89, 0x01] + Array(repeating: 7, count: 8) + [0x92, 0x01, 0x02, 0x41, 0x42]
                    + [0x9D, 0x01, 1, 2, 3, 4]
            case 3:  // a field repeated: the last wins
                damaged += [0x1A, 0x03, 0x61, 0x62, 0x63, 0x40, 0x07]
            default:  // random bytes appended
                damaged += bytes(12)
            }
            let candidate = damaged + suffix
            let ours = try? candidate.withUnsafeBytes { try EnvelopeCodec.decode($0, key: fields.position) }
            let theirs = try? candidate.withUnsafeBytes { try EnvelopeCodec.decodeWithSwiftProtobuf($0, key: fields.position) }
            if let ours { #expect(ours == theirs) }
            if theirs == nil { #expect(ours == nil) }
        }
    }
}

@Suite("Command ids")
struct CommandIDTests {
    @Test("a command's key is its container's UTF-8 bytes, a 0 byte, then the id's 16 bytes (log-format.md)")
    func commandKeyLayout() {
        let id = UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16))
        #expect(LogStore.commandKey(container: "iCloud.a", commandID: id) == Array("iCloud.a".utf8) + [0] + Array(1...16))
        #expect(LogStore.streamKey(container: "iCloud.a", stream: "share/x") == Array("iCloud.a".utf8) + [0] + Array("share/x".utf8))
    }

    @Test("default command ids are UUIDv7, unique, and sort in the order they were made")
    func timeOrdered() {
        let ids = (0..<20_000).map { _ in CommandID.make() }
        #expect(Set(ids).count == ids.count)
        let bytes = ids.map { id in withUnsafeBytes(of: id.uuid) { Array($0) } }
        for (earlier, later) in zip(bytes, bytes.dropFirst()) {
            #expect(earlier.lexicographicallyPrecedes(later))
        }
        for id in bytes.prefix(100) {
            #expect(id[6] >> 4 == 7, "version 7")
            #expect(id[8] >> 6 == 0b10, "RFC 9562 variant")
        }
        // The first 48 bits are the Unix time in milliseconds (big-endian): within a day of now.
        let millis = bytes[0].prefix(6).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let now = UInt64(Date().timeIntervalSince1970 * 1_000)
        #expect(millis <= now + 1_000 && now - millis < 86_400_000)
    }
}
