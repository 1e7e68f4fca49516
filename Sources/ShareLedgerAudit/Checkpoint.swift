import ByteKeys
import Crypto
import EventLog
import Foundation
import LMDB
import ShareLedger
import SharingDomain

/// An Ed25519 private key that signs checkpoints (``LedgerAudit/checkpoint(signingKey:)``).
///
/// Stored by `share-ledger keygen` as the base64 text of its 32 raw bytes (the Ed25519 seed, RFC 8032)
/// and a newline, in a file only its owner can read.
public struct CheckpointSigningKey: Sendable {
    let key: Curve25519.Signing.PrivateKey

    /// A new random key.
    public static func generate() -> CheckpointSigningKey {
        CheckpointSigningKey(key: Curve25519.Signing.PrivateKey())
    }

    private init(key: Curve25519.Signing.PrivateKey) { self.key = key }

    /// Makes a key from its 32 raw bytes.
    ///
    /// - Throws: `LedgerError.Code.invalidArguments` when the bytes are not a 32-byte Ed25519 key.
    public init(rawRepresentation bytes: [UInt8]) throws(LedgerError) {
        guard bytes.count == 32, let key = try? Curve25519.Signing.PrivateKey(rawRepresentation: bytes) else {
            throw LedgerError(
                .invalidArguments, "a checkpoint signing key is 32 bytes, this one is \(bytes.count); "
                    + "make one with `share-ledger keygen`")
        }
        self.key = key
    }

    /// Reads a key from a file holding the base64 text of its 32 raw bytes (what `share-ledger keygen` writes).
    ///
    /// - Throws: `LedgerError.Code.invalidArguments` when the file cannot be read or holds no such key.
    public init(contentsOfFile path: String) throws(LedgerError) {
        try self.init(rawRepresentation: try CheckpointKeyFile.read(path, what: "signing key"))
    }

    /// The 32 raw bytes (secret).
    public var rawRepresentation: [UInt8] { Array(key.rawRepresentation) }

    /// The public key that verifies this key's signatures.
    public var publicKey: CheckpointPublicKey { CheckpointPublicKey(key: key.publicKey) }

    func signature(for message: [UInt8]) throws(LedgerError) -> [UInt8] {
        do {
            return Array(try key.signature(for: message))
        } catch {
            throw LedgerError(.storageFailure, "signing the checkpoint failed: \(error)")
        }
    }
}

/// An Ed25519 public key that verifies checkpoints; `share-ledger keygen` stores it as the base64
/// text of its 32 raw bytes and a newline.
public struct CheckpointPublicKey: Sendable, Hashable {
    let key: Curve25519.Signing.PublicKey

    init(key: Curve25519.Signing.PublicKey) { self.key = key }

    /// Makes a key from its 32 raw bytes.
    ///
    /// - Throws: `LedgerError.Code.invalidArguments` when the bytes are not a 32-byte Ed25519 public key.
    public init(rawRepresentation bytes: [UInt8]) throws(LedgerError) {
        guard bytes.count == 32, let key = try? Curve25519.Signing.PublicKey(rawRepresentation: bytes) else {
            throw LedgerError(
                .invalidArguments, "a checkpoint public key is 32 bytes, this one is \(bytes.count); use the "
                    + "PREFIX.pub file `share-ledger keygen` wrote")
        }
        self.key = key
    }

    /// Reads a key from a file holding the base64 text of its 32 raw bytes (what `share-ledger keygen` writes).
    ///
    /// - Throws: `LedgerError.Code.invalidArguments` when the file cannot be read or holds no such key.
    public init(contentsOfFile path: String) throws(LedgerError) {
        try self.init(rawRepresentation: try CheckpointKeyFile.read(path, what: "public key"))
    }

    /// The 32 raw bytes.
    public var rawRepresentation: [UInt8] { Array(key.rawRepresentation) }

    /// Whether `signature` is this key's signature of `message`.
    func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        key.isValidSignature(signature, for: message)
    }

    /// Keys are equal when their bytes are.
    public static func == (lhs: CheckpointPublicKey, rhs: CheckpointPublicKey) -> Bool {
        lhs.rawRepresentation == rhs.rawRepresentation
    }

    /// Hashes the bytes.
    public func hash(into hasher: inout Hasher) { hasher.combine(rawRepresentation) }
}

/// The key files of `share-ledger keygen`: base64 of the 32 raw bytes, then a newline.
public enum CheckpointKeyFile {
    /// The text of a key file for `bytes`.
    public static func text(_ bytes: [UInt8]) -> String { Data(bytes).base64EncodedString() + "\n" }

    static func read(_ path: String, what: String) throws(LedgerError) -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw LedgerError(.invalidArguments, "cannot read the \(what) file \(path)")
        }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let bytes = Data(base64Encoded: text) else {
            throw LedgerError(
                .invalidArguments, "the \(what) file \(path) is not base64 text; make keys with `share-ledger keygen`")
        }
        return Array(bytes)
    }
}

/// A signed statement that the log's head was at ``position`` with ``hash``: whoever holds the public
/// key can later prove that the history up to that position was not rewritten, even by someone who
/// recomputed the whole hash chain.
///
/// Stored in the `checkpoints` database, not in the log (an event would move the head it signs).
public struct Checkpoint: Sendable, Hashable {
    /// The position of the head event it signs.
    public var position: LogPosition
    /// That event's hash.
    public var hash: EventHash
    /// That event's recorded-at time, in microseconds since 1970.
    public var headRecordedAtMicros: Int64
    /// When it was signed, in microseconds since 1970 (the ledger's clock).
    public var signedAtMicros: Int64
    /// The public key of the signer (32 bytes).
    public var publicKey: [UInt8]
    /// The Ed25519 signature (64 bytes) of ``signedMessage``.
    public var signature: [UInt8]

    /// The ASCII prefix of the signed message.
    public static let messagePrefix = Array("shareledger-checkpoint-v1".utf8)

    /// The bytes that are signed: ASCII `shareledger-checkpoint-v1` ‖ position (8, big-endian) ‖
    /// hash (32) ‖ head recorded-at micros (8, big-endian, two's complement) ‖ signed-at micros (8, same).
    public var signedMessage: [UInt8] {
        Checkpoint.message(
            position: position.rawValue, hash: hash.bytes, headRecordedAtMicros: headRecordedAtMicros,
            signedAtMicros: signedAtMicros)
    }

    static func message(position: UInt64, hash: [UInt8], headRecordedAtMicros: Int64, signedAtMicros: Int64) -> [UInt8] {
        var out = messagePrefix
        out.reserveCapacity(messagePrefix.count + 56)
        out += BigEndian.bytes(of: position)
        out += hash
        out += BigEndian.bytes(of: UInt64(bitPattern: headRecordedAtMicros))
        out += BigEndian.bytes(of: UInt64(bitPattern: signedAtMicros))
        return out
    }

    /// Whether ``signature`` is a valid signature of ``signedMessage`` by `key`.
    public func isSigned(by key: CheckpointPublicKey) -> Bool {
        publicKey == key.rawRepresentation && key.isValidSignature(signature, for: signedMessage)
    }

    /// The stored value: hash (32) ‖ head recorded-at (8) ‖ signed-at (8) ‖ public key (32) ‖ signature (64).
    var storedValue: [UInt8] {
        var out = hash.bytes
        out.reserveCapacity(144)
        out += BigEndian.bytes(of: UInt64(bitPattern: headRecordedAtMicros))
        out += BigEndian.bytes(of: UInt64(bitPattern: signedAtMicros))
        out += publicKey
        out += signature
        return out
    }

    static let storedCount = 144

    init(
        position: LogPosition, hash: EventHash, headRecordedAtMicros: Int64, signedAtMicros: Int64, publicKey: [UInt8],
        signature: [UInt8]
    ) {
        self.position = position
        self.hash = hash
        self.headRecordedAtMicros = headRecordedAtMicros
        self.signedAtMicros = signedAtMicros
        self.publicKey = publicKey
        self.signature = signature
    }

    /// Decodes a stored checkpoint; `nil` when the key or value has the wrong shape.
    init?(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        guard key.count == 8, value.count == Checkpoint.storedCount, let position = BigEndian.uint64(key),
            let recorded = BigEndian.uint64(value, at: 32), let signed = BigEndian.uint64(value, at: 40)
        else { return nil }
        self.init(
            position: LogPosition(position), hash: EventHash(bytes: value[0..<32])!,
            headRecordedAtMicros: Int64(bitPattern: recorded), signedAtMicros: Int64(bitPattern: signed),
            publicKey: Array(value[48..<80]), signature: Array(value[80..<144]))
    }
}

/// A head pinned outside the ledger: the event at ``position`` must have ``hash``.
public struct ExpectedHead: Sendable, Hashable {
    /// The position.
    public var position: LogPosition
    /// The hash the event there must have.
    public var hash: EventHash

    /// Makes an expectation.
    public init(position: LogPosition, hash: EventHash) {
        self.position = position
        self.hash = hash
    }

    /// Parses `POS:HASH` (a decimal position, a colon, 64 hex digits); `nil` for anything else.
    public init?(_ text: String) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let position = UInt64(parts[0]), let hash = EventHash(hex: String(parts[1])) else {
            return nil
        }
        self.init(position: LogPosition(position), hash: hash)
    }
}

/// What an audit checks beyond the ledger's own consistency: checkpoints against keys you trust and
/// heads you pinned elsewhere.
public struct AuditOptions: Sendable, Hashable {
    /// Keys whose checkpoints count. When not empty, every stored checkpoint must be signed by one of
    /// them, and at least one must exist; each must still match the log.
    public var trustedKeys: [CheckpointPublicKey]
    /// Heads recorded outside the ledger that the log must still contain.
    public var expectedHeads: [ExpectedHead]
    /// Require a checkpoint signed by a trusted key that still matches the log; needs ``trustedKeys``.
    /// The chain is recomputed from the first event all the same: a checkpoint vouches for the
    /// history before it only while that history still hashes to it.
    public var fromCheckpoint: Bool

    /// Makes options.
    public init(trustedKeys: [CheckpointPublicKey] = [], expectedHeads: [ExpectedHead] = [], fromCheckpoint: Bool = false) {
        self.trustedKeys = trustedKeys
        self.expectedHeads = expectedHeads
        self.fromCheckpoint = fromCheckpoint
    }
}

extension LedgerAudit {
    /// Signs the current head with `signingKey` and stores the checkpoint (in the writer's
    /// transaction, so the head cannot move in between). Appends no event.
    ///
    /// - Throws: `LedgerError.Code.invalidArguments` when the log is empty (there is no head to sign);
    ///   `LedgerError.Code.readOnly` for a read-only ledger; storage errors.
    @discardableResult
    public func checkpoint(signingKey: CheckpointSigningKey) async throws(LedgerError) -> Checkpoint {
        let store = log.store
        let clock = configuration.clock
        let position = try await maintain { txn in
            let head = try store.readHead(txn)
            guard head.position.rawValue > 0 else {
                throw LedgerError(.invalidArguments, "the log is empty: there is no head to checkpoint yet")
            }
            let signedAt = max(clock.nowMicros(), head.recordedAtMicros)
            let message = Checkpoint.message(
                position: head.position.rawValue, hash: head.hash.bytes, headRecordedAtMicros: head.recordedAtMicros,
                signedAtMicros: signedAt)
            let checkpoint = Checkpoint(
                position: head.position, hash: head.hash, headRecordedAtMicros: head.recordedAtMicros,
                signedAtMicros: signedAt, publicKey: signingKey.publicKey.rawRepresentation,
                signature: try signingKey.signature(for: message))
            try txn.put(store.checkpoints, key: BigEndian.bytes(of: head.position.rawValue), value: checkpoint.storedValue)
            return head.position.rawValue
        }
        let stored = try read("reading the checkpoint at \(position)") { txn in
            try BigEndian.withBytes(of: position) { key in
                try txn.withValue(store.checkpoints, key: key) { Checkpoint(key: key, value: $0) }
            } ?? nil
        }
        guard let stored else {
            throw LedgerError(.storageFailure, "the checkpoint at \(position) was not found after its commit; this is a bug")
        }
        return stored
    }

    /// Every stored checkpoint, by position, read in chunks of short read transactions.
    ///
    /// - Throws: `LedgerError.Code.corruptedData` when a stored checkpoint has the wrong shape.
    public func checkpoints() throws(LedgerError) -> [Checkpoint] {
        var out: [Checkpoint] = []
        var after: UInt64 = 0
        var more = true
        while more {
            more = false
            let chunk = try read("reading the checkpoints") { txn in
                try txn.withCursor(log.store.checkpoints) { cursor -> [Checkpoint] in
                    var chunk: [Checkpoint] = []
                    var entry = try BigEndian.withBytes(of: after + 1) { try cursor.seek(atLeast: $0) }
                    while let current = entry, chunk.count < 4096 {
                        guard let checkpoint = Checkpoint(key: current.key, value: current.value) else {
                            throw LedgerError(
                                .corruptedData, "a stored checkpoint has a \(current.key.count)-byte key and a "
                                    + "\(current.value.count)-byte value, expected 8 and \(Checkpoint.storedCount)")
                        }
                        chunk.append(checkpoint)
                        entry = try cursor.next()
                    }
                    return chunk
                }
            }
            out += chunk
            if chunk.count == 4096, let last = chunk.last {
                after = last.position.rawValue
                more = after < UInt64.max
            }
        }
        return out
    }

    /// The hash stored with the event at `position`, or nil when there is none.
    func storedHash(at position: UInt64) throws(LedgerError) -> EventHash? { try log.storedHash(at: position) }

    /// The audit's checks of checkpoints and pinned heads; reports problems through `bad`.
    func auditCheckpoints(
        _ options: AuditOptions, head: UInt64, bad: (UInt64?, String) -> Void
    ) throws(LedgerError) -> (stored: Int, verified: Int, headsVerified: Int, newestVerified: UInt64) {
        var verified = 0
        var newestVerified: UInt64 = 0
        let stored: [Checkpoint]
        do {
            stored = try checkpoints()
        } catch {
            bad(nil, "the checkpoints cannot be read: \(error.message)")
            stored = []
        }
        for checkpoint in stored {
            let position = checkpoint.position.rawValue
            let fingerprint = Hex.encode(checkpoint.publicKey.prefix(8))
            if !options.trustedKeys.isEmpty {
                guard let key = options.trustedKeys.first(where: { $0.rawRepresentation == checkpoint.publicKey }) else {
                    bad(position, "the checkpoint at \(position) is signed by key \(fingerprint)…, which is not trusted")
                    continue
                }
                guard checkpoint.isSigned(by: key) else {
                    bad(position, "the checkpoint at \(position) has an invalid signature: it was forged or altered")
                    continue
                }
            }
            guard position <= head else {
                // As for a cut tail: the first position missing is the one after the head.
                bad(
                    head + 1, "the checkpoint at \(position) is beyond the head (\(head)): the events after \(head) "
                        + "were removed (a cut tail); restore the ledger from a backup or an export")
                continue
            }
            guard let hash = try storedHash(at: position), hash == checkpoint.hash else {
                bad(
                    position, "the event at \(position) does not have the hash checkpointed there "
                        + "(\(checkpoint.hash.hex)): the history up to \(position) was rewritten")
                continue
            }
            if !options.trustedKeys.isEmpty {
                verified += 1
                newestVerified = max(newestVerified, position)
            }
        }
        if !options.trustedKeys.isEmpty && stored.isEmpty {
            bad(nil, "there is no checkpoint to verify with the trusted key; make one with `share-ledger checkpoint`")
        }
        var headsVerified = 0
        for expected in options.expectedHeads {
            let position = expected.position.rawValue
            guard let hash = try storedHash(at: position) else {
                bad(position > head ? head + 1 : position, "the expected head \(position) is not in the log (its head is \(head)): the log was truncated")
                continue
            }
            guard hash == expected.hash else {
                bad(
                    position, "the event at \(position) has hash \(hash.hex), not the expected \(expected.hash.hex): "
                        + "the history up to \(position) was rewritten")
                continue
            }
            headsVerified += 1
        }
        return (stored.count, verified, headsVerified, newestVerified)
    }
}
