import EventLog
import Foundation
import SwiftProtobuf

/// Shares: creating, participants, public permission, title, deleting, leaving.
extension Decider {
    // MARK: - Shares

    package func createShare(_ txn: borrowing some ReadModelStore & ~Copyable, _ c: ShareCreation) throws -> Decision {
        try requireSignedIn(txn)
        let owner = owner(of: c.zoneID)
        guard owner == actor else {
            throw LedgerError(.badDatabase, "shares are created in the owner's private database; only \(owner) can share this zone")
        }
        let (_, reused) = try checkNewShare(
            txn, zoneName: c.zoneID.zoneName, root: c.rootRecordName, publicPermission: PBPermission(c.publicPermission),
            title: c.title)
        let token = reused ?? c.tokenCandidate
        let shareRecordName = c.rootRecordName == nil ? Share.zoneWideShareRecordName : c.shareRecordName
        guard try models.share(txn, token) == nil else {
            throw LedgerError(.serverRejectedRequest, "the share token is in use; try again")
        }
        var e = Shareledger_Events_V1_ShareCreated()
        e.token = token
        e.ownerName = owner
        e.zoneName = c.zoneID.zoneName
        e.shareRecordName = shareRecordName
        e.rootRecordName = c.rootRecordName ?? ""
        e.title = c.title
        e.publicPermission = PBPermission(c.publicPermission)
        e.ownerParticipantID = c.ownerParticipantID
        return .output([event(Streams.share(token), .shareCreated(e))], shareOutput(token))
    }

    /// The rules for a new share of the actor's zone `zoneName` (of its record `root`, or of the whole
    /// zone): returns the zone and the token an earlier share of the same root or zone used (a share
    /// URL is kept across deleting and sharing again). Shared by ``createShare`` and the
    /// ``EventValidator``.
    package func checkNewShare(
        _ txn: borrowing some ReadModelStore & ~Copyable, zoneName: String, root: String?, publicPermission: PBPermission,
        title: String
    ) throws -> (zone: ZoneState, reusedToken: String?) {
        guard publicPermission == .none || Decider.isPublic(publicPermission) else {
            throw LedgerError(.invalidArguments, "the public permission must be none, readOnly or readWrite")
        }
        try Decider.checkTitle(title)
        guard let zone = try models.zone(txn, container, owner: actor, zone: zoneName) else {
            throw LedgerError(.zoneNotFound, "zone \(zoneName) does not exist; save the zone first")
        }
        let capabilities = RecordZone.Capabilities(rawValue: zone.capabilities)
        if let root {
            guard capabilities.contains(.sharing) else {
                throw LedgerError(.invalidArguments, "zone \(zoneName) does not have the sharing capability")
            }
            guard zone.zoneShareToken.isEmpty else {
                throw LedgerError(
                    .serverRejectedRequest, "zone \(zoneName) is shared as a whole; a hierarchy in it cannot be shared too")
            }
            guard let record = try models.record(txn, zoneID: zone.zoneID, root) else {
                throw LedgerError(.unknownItem, "the root record \(root) does not exist; save it before sharing it")
            }
            guard record.shareToken.isEmpty else {
                throw LedgerError(.alreadyShared, "record \(root) is shared already; fetch its share instead of creating one")
            }
            if !record.parentRecordName.isEmpty, try ancestorHasShare(txn, zoneID: zone.zoneID, record.parentRecordName) {
                throw LedgerError(.alreadyShared, "a parent of record \(root) is shared already; \(root) is part of that share")
            }
            if try subtreeHasShare(txn, zoneID: zone.zoneID, root) {
                throw LedgerError(.alreadyShared, "a record below \(root) is shared already; a record belongs to at most one share")
            }
            return (zone, record.lastShareToken.isEmpty ? nil : record.lastShareToken)
        }
        guard capabilities.contains(.zoneWideSharing) else {
            throw LedgerError(.invalidArguments, "zone \(zoneName) does not have the zoneWideSharing capability")
        }
        guard zone.zoneShareToken.isEmpty else {
            throw LedgerError(.serverRecordChanged, "zone \(zoneName) is shared already (record to insert already exists)")
        }
        guard zone.hierarchyShareCount == 0 else {
            throw LedgerError(
                .invalidArguments, "zone \(zoneName) holds shared hierarchies; delete those shares before sharing the zone")
        }
        return (zone, zone.lastZoneShareToken.isEmpty ? nil : zone.lastZoneShareToken)
    }

    /// The live private share `token`, which the signed-in actor manages, with change tag `tag` if
    /// given: where an invitation can go.
    package func invitableShare(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String, tag: String?) throws -> ShareState {
        try requireSignedIn(txn)
        let share = try liveShare(txn, token)
        try requireManager(txn, share, token)
        try checkTag(share, tag)
        guard share.publicPermission == .none else {
            throw LedgerError(
                .invalidArguments, "participants can be invited only to a private share; set its public permission to none first")
        }
        return share
    }

    package func addParticipant(
        _ txn: borrowing some ReadModelStore & ~Copyable, token: String, lookup: LookupInfo, role: Share.Participant.Role,
        permission: Share.Participant.Permission, newID: String, tag: String?
    ) throws -> Decision {
        let share = try invitableShare(txn, token, tag: tag)
        try Decider.checkInvitedRole(PBRole(role))
        try Decider.checkInvitedPermission(PBPermission(permission))
        let user = try account(txn, for: lookup)
        guard user != share.ownerName else {
            throw LedgerError(.invalidArguments, "the owner is a participant already")
        }
        if !user.isEmpty, try models.hasAccessEntry(txn, token, .blocked, user: user) {
            throw LedgerError(
                .invalidArguments, "that user is blocked from this share; unblock the identity (unblockIdentities) before "
                    + "inviting it")
        }
        // Inviting a user who asked to join is approving their request (CloudKit's isApprovedRequester).
        let approved = user.isEmpty ? false : try models.hasAccessEntry(txn, token, .request, user: user)
        // The same identity again: by account, or by the email/phone an invitation went to.
        let existing = try invitation(txn, share, token, user: user, lookup: lookup)
        if let existing, existing.state.status != .statusRemoved {
            return try invitingAgain(existing, token, user: user, role: role, permission: permission, approved: approved)
        }
        guard share.activeParticipantCount < Limits.maxParticipants else {
            throw LedgerError(
                .tooManyParticipants, "the share has \(share.activeParticipantCount) participants; the limit is "
                    + "\(Limits.maxParticipants). Remove some first")
        }
        var e = Shareledger_Events_V1_ParticipantAdded()
        e.token = token
        e.participantID = existing?.id ?? newID
        e.userRecordName = existing.map { $0.state.userRecordName.isEmpty ? user : $0.state.userRecordName } ?? user
        e.lookupInfo = PBLookupInfo(lookup)
        e.role = PBRole(role)
        e.permission = PBPermission(permission)
        e.approvedRequester = approved
        return .output([event(Streams.share(token), .participantAdded(e))], shareOutput(token))
    }

    /// The share's entry for the identity an invitation names: by account (`user`), or by the email
    /// or phone an earlier invitation went to; nil when there is none.
    func invitation(
        _ txn: borrowing some ReadModelStore & ~Copyable, _ share: ShareState, _ token: String, user: String, lookup: LookupInfo
    ) throws -> (id: String, state: ParticipantState)? {
        var existing: (id: String, state: ParticipantState)?
        if !user.isEmpty { existing = try models.participant(txn, of: user, in: share, token: token) }
        if existing == nil {
            // Invited by account: an earlier invitation to the account's email or phone is the same person.
            // (Sealed since crypto-shredding: opened with the key store; nothing for a forgotten user.)
            // Otherwise the address invited. (The keyed hashes of one of them only: each is an HMAC.)
            // A sealed user row keeps the keyed hashes it was registered with: those are matched
            // without opening its box, which is opened only if a row with a plaintext address (written
            // before invitations were sealed) is met. (The hashes are keyed by the store's lookup key,
            // not the person's: they match whether or not the box still opens.)
            var registered: ReadModels.AddressMatch?
            var userRow: UserState?
            if !user.isEmpty, let state = try models.user(txn, container, user) {
                if state.forgottenAtMicros == 0, !state.emailHash.isEmpty || !state.phoneHash.isEmpty {
                    registered = ReadModels.AddressMatch(hashesOf: state)
                    userRow = state
                } else if let fields = models.personalFields(of: state, container: container).fields {
                    registered = models.addressMatch(container, email: fields.emailAddress, phone: fields.phoneNumber)
                }
            }
            var wanted = registered ?? models.addressMatch(container, email: lookup.emailAddress ?? "", phone: lookup.phoneNumber ?? "")
            // By keyed hash for sealed invitations, by plaintext for older ones.
            if !wanted.isEmpty {
                existing = try models.firstParticipant(txn, token, namingAnAddress: { row in
                    if let state = userRow, row.hasPlaintextAddress {
                        userRow = nil
                        if let fields = models.personalFields(of: state, container: container).fields {
                            (wanted.email, wanted.phone) = (fields.emailAddress, fields.phoneNumber)
                        }
                    }
                    return wanted.matches(row)
                })
            }
        }
        return existing
    }

    /// Inviting `existing`, an active participant, again: binds an invitation without an account to
    /// `user`'s, changes the role or permission, or changes nothing.
    func invitingAgain(
        _ existing: (id: String, state: ParticipantState), _ token: String, user: String, role: Share.Participant.Role,
        permission: Share.Participant.Permission, approved: Bool
    ) throws -> Decision {
        guard existing.state.role != .owner else {
            throw LedgerError(.invalidArguments, "the owner is a participant already")
        }
        if existing.state.userRecordName.isEmpty && !user.isEmpty && existing.state.status == .statusPending {
            // The invitee has an account now: inviting them again binds the invitation to it.
            var e = Shareledger_Events_V1_ParticipantAdded()
            e.token = token
            e.participantID = existing.id
            e.userRecordName = user
            e.lookupInfo = existing.state.lookupInfo
            if existing.state.hasSealedLookup {
                // The same sealed address, with its keyed hash, as the invitation being bound.
                e.sealedLookup = existing.state.sealedLookup
                (e.sealedLookup.emailHash, e.sealedLookup.phoneHash) = (existing.state.emailHash, existing.state.phoneHash)
            }
            e.role = PBRole(role)
            e.permission = PBPermission(permission)
            e.approvedRequester = approved
            return .output([event(Streams.share(token), .participantAdded(e))], shareOutput(token))
        }
        if existing.state.role == PBRole(role) && existing.state.permission == PBPermission(permission) {
            return .output(shareOutput(token))
        }
        var e = Shareledger_Events_V1_ParticipantUpdated()
        e.token = token
        e.participantID = existing.id
        e.role = PBRole(role)
        e.permission = PBPermission(permission)
        return .output([event(Streams.share(token), .participantUpdated(e))], shareOutput(token))
    }

    package func updateParticipant(
        _ txn: borrowing some ReadModelStore & ~Copyable, token: String, id: String, role: Share.Participant.Role?,
        permission: Share.Participant.Permission, tag: String?
    ) throws -> Decision {
        try requireSignedIn(txn)
        let share = try liveShare(txn, token)
        try requireManager(txn, share, token)
        try checkTag(share, tag)
        guard let target = try models.participant(txn, token, id), target.status != .statusRemoved else {
            throw LedgerError(.unknownItem, "participant \(id) is not in the share")
        }
        guard target.role != .owner else {
            throw LedgerError(.invalidArguments, "the owner's role and permission cannot change")
        }
        guard target.role != .publicUser else {
            throw LedgerError(.invalidArguments, "public users have the share's public permission; change that instead")
        }
        guard permission == .readOnly || permission == .readWrite else {
            throw LedgerError(.invalidArguments, "a participant's permission is readOnly or readWrite")
        }
        let newRole = role.map(PBRole.init) ?? target.role
        guard newRole == .privateUser || newRole == .administrator else {
            throw LedgerError(.invalidArguments, "an invited participant's role is privateUser or administrator")
        }
        if newRole == target.role && PBPermission(permission) == target.permission { return .output(shareOutput(token)) }
        var e = Shareledger_Events_V1_ParticipantUpdated()
        e.token = token
        e.participantID = id
        e.role = newRole
        e.permission = PBPermission(permission)
        return .output([event(Streams.share(token), .participantUpdated(e))], shareOutput(token))
    }

    package func removeParticipant(_ txn: borrowing some ReadModelStore & ~Copyable, token: String, id: String, tag: String?) throws -> Decision {
        try requireSignedIn(txn)
        let share = try liveShare(txn, token)
        try requireManager(txn, share, token)
        try checkTag(share, tag)
        guard let target = try models.participant(txn, token, id) else {
            throw LedgerError(.unknownItem, "participant \(id) is not in the share")
        }
        guard target.role != .owner else {
            throw LedgerError(.permissionFailure, "nobody can remove the owner; the owner deletes the share instead")
        }
        if target.status == .statusRemoved { return .output(shareOutput(token)) }
        var e = Shareledger_Events_V1_ParticipantRemoved()
        e.token = token
        e.participantID = id
        e.reason = .removed
        return .output([event(Streams.share(token), .participantRemoved(e))], shareOutput(token))
    }

    package func leaveShare(_ txn: borrowing some ReadModelStore & ~Copyable, token: String) throws -> Decision {
        try requireSignedIn(txn)
        let share = try liveShare(txn, token)
        guard let entry = try activeEntry(txn, share, token) else {
            throw LedgerError(.unknownItem, Decider.shareNotFound)
        }
        guard entry.state.role != .owner else {
            throw LedgerError(.invalidArguments, "the owner cannot leave a share; delete it instead")
        }
        var e = Shareledger_Events_V1_ParticipantRemoved()
        e.token = token
        e.participantID = entry.id
        e.reason = .left
        return .output([event(Streams.share(token), .participantRemoved(e))], .none)
    }

    package func setPublicPermission(
        _ txn: borrowing some ReadModelStore & ~Copyable, token: String, permission: Share.Participant.Permission, tag: String?
    ) throws -> Decision {
        try requireSignedIn(txn)
        let share = try liveShare(txn, token)
        try requireManager(txn, share, token, ownerOnly: true)
        try checkTag(share, tag)
        guard permission != .unknown else {
            throw LedgerError(.invalidArguments, "the public permission must be none, readOnly or readWrite")
        }
        let new = PBPermission(permission)
        guard new != share.publicPermission else { return .output(shareOutput(token)) }
        var e = Shareledger_Events_V1_PublicPermissionChanged()
        e.token = token
        e.oldPermission = share.publicPermission
        e.newPermission = new
        var events = [event(Streams.share(token), .publicPermissionChanged(e))]
        // CloudKit: a change of public permission drops pending participants; back to none drops public users.
        for (id, participant) in try models.participants(txn, token) where participant.role != .owner {
            let drop =
                participant.status == .statusPending
                || (new == .none && participant.role == .publicUser && participant.status != .statusRemoved)
            guard drop else {
                // Public users hold the share's public permission: they follow its change.
                if participant.role == .publicUser && participant.status == .statusAccepted {
                    var updated = Shareledger_Events_V1_ParticipantUpdated()
                    updated.token = token
                    updated.participantID = id
                    updated.role = .publicUser
                    updated.permission = new
                    events.append(event(Streams.share(token), .participantUpdated(updated)))
                }
                continue
            }
            var removed = Shareledger_Events_V1_ParticipantRemoved()
            removed.token = token
            removed.participantID = id
            removed.reason = .publicPermissionChanged
            events.append(event(Streams.share(token), .participantRemoved(removed)))
        }
        return .output(events, shareOutput(token))
    }

    package func setTitle(_ txn: borrowing some ReadModelStore & ~Copyable, token: String, title: String, tag: String?) throws -> Decision {
        try requireSignedIn(txn)
        let share = try liveShare(txn, token)
        try requireManager(txn, share, token)
        try checkTag(share, tag)
        try Decider.checkTitle(title)
        guard title != models.title(of: share).title else { return .output(shareOutput(token)) }
        var e = Shareledger_Events_V1_ShareTitleChanged()
        e.token = token
        e.title = title
        return .output([event(Streams.share(token), .shareTitleChanged(e))], shareOutput(token))
    }

    package func deleteShare(_ txn: borrowing some ReadModelStore & ~Copyable, token: String, tag: String?) throws -> Decision {
        try requireSignedIn(txn)
        let share = try liveShare(txn, token)
        guard let entry = try activeEntry(txn, share, token) else {
            throw LedgerError(.unknownItem, Decider.shareNotFound)
        }
        guard entry.state.role == .owner else {
            throw LedgerError(
                .permissionFailure, "only the owner deletes a share; a participant leaves it instead (leaveShare)")
        }
        try checkTag(share, tag)
        var e = Shareledger_Events_V1_ShareDeleted()
        e.token = token
        e.cause = .ownerDeletedShare
        return .output([event(Streams.share(token), .shareDeleted(e))], .none)
    }
}
