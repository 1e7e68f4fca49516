import Foundation
import LMDB
import SharingDomain
import SwiftProtobuf
import Synchronization

extension Container {
    // MARK: - Verification

    /// Starts the proof that an invitation sent to an email or phone is the user's: returns a
    /// one-time code for the host application to deliver to that address. The ledger keeps only its
    /// SHA-256. The code expires after ``verificationLifetime``.
    ///
    /// - Throws: `LedgerError.Code.unknownItem` when no pending invitation with no account matches.
    public func requestParticipantVerification(for shareURL: URL, lookupInfo: LookupInfo) async throws(LedgerError)
        -> ParticipantVerification
    {
        let code = ledger.newVerificationCode()
        let expires = ledger.configuration.clock.nowMicros() + Int64(Container.verificationLifetime * 1_000_000)
        let output = try await runOne(
            .requestVerification(
                token: Container.token(of: shareURL), lookup: lookupInfo, codeSHA256: ShareLedger.sha256(code),
                expiresAtMicros: expires))
        guard case .participantID(let id) = output else { throw LedgerError.unexpectedOutput("requestParticipantVerification") }
        return ParticipantVerification(participantID: id, code: code, expiresAt: Presenter.date(expires))
    }

    /// Completes the proof with the code the user received: the invitation becomes the user's (they
    /// can then fetch the metadata and accept).
    ///
    /// - Throws: `LedgerError.Code.permissionFailure` for a wrong or expired code.
    public func verifyParticipant(for shareURL: URL, code: String) async throws(LedgerError) -> Share {
        try await runShare(
            .verify(token: Container.token(of: shareURL), codeSHA256: ShareLedger.sha256(code.uppercased())),
            "verifyParticipant")
    }

    /// How long a verification code stays valid: 24 hours.
    public static let verificationLifetime: TimeInterval = 24 * 3600
}
