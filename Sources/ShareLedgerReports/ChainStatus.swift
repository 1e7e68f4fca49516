import Foundation
import ShareLedger
import ShareLedgerAudit

/// What a report's header says about the log it was drawn from: whether the hash chain held, up to
/// which position, and the newest signed checkpoint that vouches for it.
public struct ChainStatus: Sendable, Hashable {
    /// The log's head when the report was made.
    public var headPosition: UInt64
    /// The last position whose hash was recomputed and found good.
    public var verifiedThrough: UInt64
    /// That event's hash, hexadecimal.
    public var verifiedHash: String
    /// The first position where the chain does not hold, if any.
    public var firstBadPosition: UInt64?
    /// What is wrong there.
    public var problem: String?
    /// The newest checkpoint at or below ``verifiedThrough`` that matches the log and whose signature
    /// is valid (by a trusted key when keys were given).
    public var checkpoint: CheckpointInfo?
    /// Whether trusted keys were given (so ``checkpoint`` is by one of them).
    public var checkedAgainstTrustedKeys: Bool

    /// A checkpoint as the header shows it.
    public struct CheckpointInfo: Sendable, Hashable {
        /// The position it signs.
        public var position: UInt64
        /// The first 8 bytes of the signer's public key, hexadecimal.
        public var keyFingerprint: String
        /// When it was signed.
        public var signedAt: Date
    }

    /// Whether the whole chain held.
    public var holds: Bool { firstBadPosition == nil }

    /// Recomputes `ledger`'s hash chain and finds the checkpoint that vouches for it; with
    /// `trustedKeys`, only a checkpoint signed by one of them counts.
    public static func check(_ ledger: ShareLedger, trustedKeys: [CheckpointPublicKey] = []) throws(LedgerError) -> ChainStatus {
        let head = try ledger.log.head().position.rawValue
        let chain = try ledger.log.verifyChain()
        var status = ChainStatus(
            headPosition: head, verifiedThrough: chain.headPosition, verifiedHash: chain.headHash,
            firstBadPosition: chain.firstBadPosition, problem: chain.problem, checkpoint: nil,
            checkedAgainstTrustedKeys: !trustedKeys.isEmpty)
        for checkpoint in try LedgerAudit(ledger).checkpoints().reversed() where checkpoint.position.rawValue <= chain.headPosition {
            guard let signer = try? CheckpointPublicKey(rawRepresentation: checkpoint.publicKey),
                trustedKeys.isEmpty || trustedKeys.contains(signer), checkpoint.isSigned(by: signer),
                let event = try ledger.log.event(at: checkpoint.position), event.hash == checkpoint.hash
            else { continue }
            status.checkpoint = CheckpointInfo(
                position: checkpoint.position.rawValue, keyFingerprint: Hex.encode(checkpoint.publicKey.prefix(8)),
                signedAt: Date(timeIntervalSince1970: Double(checkpoint.signedAtMicros) / 1_000_000))
            break
        }
        return status
    }

    /// The header's sentence.
    public var summary: String {
        var text: String
        if holds {
            text = "Hash chain verified from position 1 to \(verifiedThrough) (the head), hash \(verifiedHash.prefix(16))…"
        } else {
            text =
                "Hash chain BROKEN at position \(firstBadPosition ?? 0): \(problem ?? "")"
                + " — verified only up to \(verifiedThrough)"
        }
        if let checkpoint {
            text +=
                ". Signed checkpoint at position \(checkpoint.position) by key \(checkpoint.keyFingerprint)…, signed "
                + ReportFormat.time(checkpoint.signedAt)
                + (checkedAgainstTrustedKeys ? " (a trusted key)" : " (signature valid; key not checked against a trusted key)")
        } else {
            text +=
                checkedAgainstTrustedKeys
                ? ". No checkpoint signed by a trusted key vouches for it" : ". No signed checkpoint vouches for it"
        }
        return text + "."
    }
}

/// How reports write times and numbers.
public enum ReportFormat {
    /// ISO 8601 with milliseconds, UTC: `2026-11-26T13:44:56.123Z`.
    public static func time(_ date: Date) -> String {
        let (parts, millis) = utc(date)
        return "\(pad(Int(parts.tm_year) + 1900, 4))-\(pad(Int(parts.tm_mon) + 1, 2))-\(pad(Int(parts.tm_mday), 2))T"
            + "\(pad(Int(parts.tm_hour), 2)):\(pad(Int(parts.tm_min), 2)):\(pad(Int(parts.tm_sec), 2)).\(pad(Int(millis), 3))Z"
    }

    /// A compact time for axis labels: `2026-11-26 13:44:56`, UTC.
    public static func shortTime(_ date: Date) -> String {
        let (parts, _) = utc(date)
        return "\(pad(Int(parts.tm_year) + 1900, 4))-\(pad(Int(parts.tm_mon) + 1, 2))-\(pad(Int(parts.tm_mday), 2)) "
            + "\(pad(Int(parts.tm_hour), 2)):\(pad(Int(parts.tm_min), 2)):\(pad(Int(parts.tm_sec), 2))"
    }

    private static func pad(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
    }

    private static func utc(_ date: Date) -> (tm, Int32) {
        let micros = Int64((date.timeIntervalSince1970 * 1_000_000).rounded())
        var seconds = time_t(micros >= 0 ? micros / 1_000_000 : (micros - 999_999) / 1_000_000)
        let millis = Int32((micros - Int64(seconds) * 1_000_000) / 1_000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return (parts, millis)
    }
}
