import Foundation
import LMDB
import SharingDomain
import SwiftProtobuf
import Synchronization

extension Container {
    // MARK: - Shares (owner and administrators)

    /// Shares a record and the records below it (their `parent` chains lead to it), like
    /// `CKShare(rootRecord:)` saved with its root. Sharing a root that was shared before gives the
    /// same URL again.
    ///
    /// - Throws: `LedgerError.Code.alreadyShared` when the record, a parent or a child is in a share;
    ///   `LedgerError.Code.serverRejectedRequest` when the zone is shared as a whole;
    ///   `LedgerError.Code.unknownItem` when the root does not exist (save it first);
    ///   `LedgerError.Code.badDatabase` for another user's record.
    public func share(
        rootRecord recordID: RecordID, title: String? = nil, publicPermission: Share.Participant.Permission = .none
    ) async throws(LedgerError) -> Share {
        try await runShare(
            .createShare(
                ShareCreation(
                    zoneID: recordID.zoneID, rootRecordName: recordID.recordName, title: title ?? "",
                    publicPermission: publicPermission, tokenCandidate: ledger.newToken().text,
                    shareRecordName: "Share-" + ledger.newParticipantID(), ownerParticipantID: ledger.newParticipantID())),
            "share(rootRecord:)")
    }

    /// Shares a whole zone, like `CKShare(recordZoneID:)` (record name `cloudkit.zoneshare`).
    ///
    /// - Throws: `LedgerError.Code.serverRecordChanged` when the zone is shared already;
    ///   `LedgerError.Code.invalidArguments` when it holds shared hierarchies.
    public func share(
        recordZoneID zoneID: RecordZoneID, title: String? = nil, publicPermission: Share.Participant.Permission = .none
    ) async throws(LedgerError) -> Share {
        try await runShare(
            .createShare(
                ShareCreation(
                    zoneID: zoneID, rootRecordName: nil, title: title ?? "", publicPermission: publicPermission,
                    tokenCandidate: ledger.newToken().text, shareRecordName: Share.zoneWideShareRecordName,
                    ownerParticipantID: ledger.newParticipantID())),
            "share(recordZoneID:)")
    }

    /// Invites a participant by email, phone or user record id (owner or administrator, private
    /// shares only). An email or phone no account has gives a participant with no account
    /// (`hasiCloudAccount == false`) until someone verifies it. Inviting the same identity again
    /// updates its role and permission (or invites a removed participant again).
    ///
    /// - Parameters:
    ///   - lookupInfo: Who to invite: an email address, a phone number or a user record id.
    ///   - permission: `readOnly` or `readWrite`.
    ///   - role: `privateUser` (the default) or `administrator`.
    ///   - shareURL: The share's URL.
    ///   - ifChangeTag: Make the change only if the share still has this change tag.
    /// - Throws: `LedgerError.Code.tooManyParticipants` past 100, `LedgerError.Code.invalidArguments`
    ///   for a public share, a public-user or owner role, or permission `none`;
    ///   `LedgerError.Code.permissionFailure` for a caller who is not the owner or an administrator.
    public func addParticipant(
        _ lookupInfo: LookupInfo, permission: Share.Participant.Permission, role: Share.Participant.Role = .privateUser,
        to shareURL: URL, ifChangeTag: String? = nil
    ) async throws(LedgerError) -> Share {
        try await runShare(
            .addParticipant(
                token: Container.token(of: shareURL), lookup: lookupInfo, role: role, permission: permission,
                newParticipantID: ledger.newParticipantID(), ifChangeTag: ifChangeTag),
            "addParticipant")
    }

    /// Changes a participant's permission (and role, between privateUser and administrator).
    public func setPermission(
        _ permission: Share.Participant.Permission, role: Share.Participant.Role? = nil, forParticipant participantID: String,
        in shareURL: URL, ifChangeTag: String? = nil
    ) async throws(LedgerError) -> Share {
        try await runShare(
            .updateParticipant(
                token: Container.token(of: shareURL), participantID: participantID, role: role, permission: permission,
                ifChangeTag: ifChangeTag),
            "setPermission")
    }

    /// Removes a participant (owner or administrator). The owner cannot be removed.
    public func removeParticipant(_ participantID: String, from shareURL: URL, ifChangeTag: String? = nil)
        async throws(LedgerError) -> Share
    {
        try await runShare(
            .removeParticipant(token: Container.token(of: shareURL), participantID: participantID, ifChangeTag: ifChangeTag),
            "removeParticipant")
    }

    /// Sets who may join through the URL (owner only). Any change drops pending participants; back
    /// to `none` drops the public users too (as CloudKit does).
    public func setPublicPermission(_ permission: Share.Participant.Permission, for shareURL: URL, ifChangeTag: String? = nil)
        async throws(LedgerError) -> Share
    {
        try await runShare(
            .setPublicPermission(token: Container.token(of: shareURL), permission: permission, ifChangeTag: ifChangeTag),
            "setPublicPermission")
    }

    /// Changes the share's title (owner or administrator).
    public func setTitle(_ title: String, for shareURL: URL, ifChangeTag: String? = nil) async throws(LedgerError) -> Share {
        try await runShare(
            .setTitle(token: Container.token(of: shareURL), title: title, ifChangeTag: ifChangeTag), "setTitle")
    }

    /// Deletes the share (owner only): every participant loses access; the root record stays.
    public func deleteShare(_ shareURL: URL, ifChangeTag: String? = nil) async throws(LedgerError) {
        _ = try await runOne(.deleteShare(token: Container.token(of: shareURL), ifChangeTag: ifChangeTag))
    }

    /// Leaves a share (a participant's "delete the share from my shared database").
    public func leaveShare(_ shareURL: URL) async throws(LedgerError) {
        _ = try await runOne(.leaveShare(token: Container.token(of: shareURL)))
    }
}
