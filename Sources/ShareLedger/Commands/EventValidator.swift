import Foundation
import SwiftProtobuf

/// Checks that an event in the log is one the rules could have produced: for each domain event type,
/// the precondition the ``Decider`` guarantees when it produces that event, checked against the read
/// models as they stood just before it (the store the ``Projector`` then applies it to). The envelope's
/// actor, container and time are the command's.
///
/// The checks are the decider's own (``Decider/liveShare(_:_:)``, ``Decider/requireManager(_:_:_:ownerOnly:)``,
/// ``Decider/checkNewShare(_:zoneName:root:publicPermission:title:)``, ``Decider/checkParticipantWrite(_:zone:_:existing:parent:)``,
/// ``Decider/checkParent(_:zone:_:parent:existing:)``, ``Decider/zoneKept(_:_:)``…), run by a decider
/// acting as the event's actor, so the rules live in one place. It does not re-derive what a
/// command's arguments were (a record's field values, a verification code, the lookup an invitation
/// matched): only what the state before the event must have been for the rules to allow it.
///
/// Used by the rebuild replay of `audit` and by `import`; a ledger the writer produced always passes
/// (`EventValidatorTests`, the property tests, the release fixture).
struct EventValidator {
    let models: ReadModels
    private let presenter: Presenter

    init(models: ReadModels) {
        self.models = models
        presenter = Presenter(models: models, urlHost: "validator.invalid")
    }

    /// Why `event` could not have been produced by the rules from the state in `txn`, or nil when it
    /// could. Throws only for storage errors.
    func problem(_ event: DomainEvent, _ context: Projector.Context, _ txn: borrowing some ReadModelStore & ~Copyable) throws
        -> String?
    {
        let decider = Decider(
            models: models, presenter: presenter, container: context.container, actor: context.actor, signedIn: true,
            now: context.recordedAtMicros)
        do {
            try check(event, decider, txn)
            return nil
        } catch let error as LedgerError {
            return error.message
        }
    }

    /// The report of an inadmissible event, for audit and import alike.
    static func describe(position: UInt64, _ event: DomainEvent, actor: String, _ problem: String) -> String {
        "event \(position) (\(event.typeName) by \(actor)) is not one the sharing rules could have produced from the state "
            + "before it: \(problem)"
    }

    private static func refuse(_ text: String) -> LedgerError { LedgerError(.invalidArguments, text) }

    /// A sealed invitation or lookup address is sealed under the key of the address its one keyed
    /// hash names (so that forgetting the address reaches it), and leaves no plaintext beside it.
    private func checkSealedLookup(_ sealedLookup: Shareledger_Events_V1_SealedPersonalData, sealed: Bool, _ lookup: PBLookupInfo)
        throws
    {
        guard sealed else { return }
        guard sealedLookup.address != nil, lookup.emailAddress.isEmpty, lookup.phoneNumber.isEmpty else {
            throw Self.refuse(
                "its sealed address is not sealed under the key of the one keyed hash it carries, or has plaintext beside it")
        }
    }

    private func check(_ event: DomainEvent, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable) throws {
        let m = models
        let actor = d.actor
        switch event {
        case .userRegistered(let e):
            try Decider.checkUserName(e.userRecordName)
            try Decider.checkContainer(d.container)
            guard try m.user(txn, d.container, e.userRecordName) == nil else {
                throw Self.refuse("user \(e.userRecordName) is registered already")
            }
            // Sealed: checked by the keyed hashes it carries (no key needed).
            if !e.sealed.emailHash.isEmpty,
                try m.string(txn, m.userLookup, ReadModels.lookupKey(d.container, hash: Array(e.sealed.emailHash), kind: "E")) != nil
            {
                throw Self.refuse("its email address belongs to another user already")
            }
            if !e.sealed.phoneHash.isEmpty,
                try m.string(txn, m.userLookup, ReadModels.lookupKey(d.container, hash: Array(e.sealed.phoneHash), kind: "P")) != nil
            {
                throw Self.refuse("its phone number belongs to another user already")
            }
            if !e.emailAddress.isEmpty, try m.userName(txn, d.container, email: e.emailAddress) != nil {
                throw Self.refuse("its email address belongs to another user already")
            }
            if !e.phoneNumber.isEmpty, try m.userName(txn, d.container, phone: e.phoneNumber) != nil {
                throw Self.refuse("its phone number belongs to another user already")
            }

        case .personalDataForgotten(let e):
            guard [e.emailHash, e.phoneHash].allSatisfy({ $0.isEmpty || $0.count == AddressHash.byteCount }) else {
                throw Self.refuse("its keyed hashes are not \(AddressHash.byteCount) bytes")
            }
            if e.userRecordName.isEmpty {
                // An address nobody registered with, by its keyed hash.
                guard e.addresses.count == 1, let address = e.addresses.first else {
                    throw Self.refuse("it names neither a user nor exactly one address")
                }
                guard try m.string(txn, m.userLookup, ReadModels.addressKey(d.container, address)) == nil else {
                    throw Self.refuse("its address belongs to a registered user (who is forgotten with the address)")
                }
                guard try m.forgottenAddress(txn, d.container, address) == nil else {
                    throw Self.refuse("its address was forgotten already, and nothing was sealed to it since")
                }
                break
            }
            try Decider.checkUserName(e.userRecordName)
            guard let state = try m.user(txn, d.container, e.userRecordName) else {
                throw Self.refuse("user \(e.userRecordName) is not registered in the container")
            }
            guard state.forgottenAtMicros == 0 else { throw Self.refuse("user \(e.userRecordName) was forgotten already") }

        case .zoneCreated(let e):
            try d.requireSignedIn(txn)
            try requireOwner(e.ownerName, actor)
            try Decider.checkName(e.zoneName, "zone name", max: Decider.Limits.maxZoneNameBytes)
            guard e.capabilities & ~0xF == 0, e.zoneName != RecordZoneID.defaultZoneName || e.capabilities == 0 else {
                throw Self.refuse("capabilities have 4 bits, and the default zone has none")
            }
            guard try m.zone(txn, d.container, owner: actor, zone: e.zoneName) == nil else {
                throw Self.refuse("zone \(e.zoneName) exists already")
            }

        case .zoneDeleted(let e):
            try d.requireSignedIn(txn)
            try requireOwner(e.ownerName, actor)
            guard let zone = try m.zone(txn, d.container, owner: actor, zone: e.zoneName) else {
                throw Self.refuse("zone \(e.zoneName) does not exist")
            }
            for token in try m.shareTokens(txn, d.container, owner: actor) {
                guard try m.share(txn, token)?.zoneID != zone.zoneID else {
                    throw Self.refuse("share \(token) of the zone is still live (its ShareDeleted comes first)")
                }
            }

        case .recordSaved(let e):
            try d.requireSignedIn(txn)
            try Decider.checkName(e.recordName, "record name", max: Decider.Limits.maxRecordNameBytes)
            try Decider.checkName(e.recordType, "record type", max: Decider.Limits.maxRecordTypeBytes)
            guard e.recordType != Share.recordType else { throw Self.refuse("shares are not saved as records") }
            guard let zone = try m.zone(txn, d.container, owner: e.ownerName, zone: e.zoneName) else {
                throw Self.refuse("zone \(e.zoneName) of \(e.ownerName) does not exist")
            }
            let existing = try m.record(txn, zoneID: zone.zoneID, e.recordName)
            let parent = e.parentRecordName.isEmpty ? nil : e.parentRecordName
            if e.ownerName != actor {
                try d.checkParticipantWrite(txn, zone: zone, e.recordName, existing: existing, parent: parent)
            }
            guard e.created == (existing == nil), e.changeTag == (existing?.changeTag ?? 0) + 1 else {
                throw Self.refuse(
                    "its change tag \(e.changeTag) (created: \(e.created)) does not follow the record's "
                        + (existing.map { "change tag \($0.changeTag)" } ?? "absence"))
            }
            guard e.createdBy.isEmpty || (e.created && e.createdBy == actor) else {
                throw Self.refuse("created_by \(e.createdBy) is not the creating actor")
            }
            if let existing, existing.recordType != e.recordType {
                throw Self.refuse("record \(e.recordName) is a \(existing.recordType); its type cannot change")
            }
            if let parent { try d.checkParent(txn, zone: zone, e.recordName, parent: parent, existing: existing) }

        case .recordDeleted(let e):
            try d.requireSignedIn(txn)
            guard let zone = try m.zone(txn, d.container, owner: e.ownerName, zone: e.zoneName),
                let record = try m.record(txn, zoneID: zone.zoneID, e.recordName)
            else { throw Self.refuse("record \(e.recordName) does not exist") }
            if e.ownerName != actor { try d.requireWriteAccess(txn, zone: zone, coveringFrom: e.recordName) }
            guard record.shareToken.isEmpty else {
                throw Self.refuse("record \(e.recordName) is the root of a live share (its ShareDeleted comes first)")
            }

        case .shareCreated(let e):
            try d.requireSignedIn(txn)
            try requireOwner(e.ownerName, actor)
            guard ShareToken(e.token) != nil, try m.share(txn, e.token) == nil else {
                throw Self.refuse("the share token is not valid or in use")
            }
            let root = e.rootRecordName.isEmpty ? nil : e.rootRecordName
            let (_, reused) = try d.checkNewShare(
                txn, zoneName: e.zoneName, root: root, publicPermission: e.publicPermission, title: e.title)
            if let reused, reused != e.token {
                throw Self.refuse("an earlier share of the same \(root == nil ? "zone" : "root") had token \(reused), which is kept")
            }
            if root == nil, e.shareRecordName != Share.zoneWideShareRecordName {
                throw Self.refuse("a zone-wide share's record is named \(Share.zoneWideShareRecordName)")
            }

        case .shareDeleted(let e):
            try d.requireSignedIn(txn)
            let share = try d.liveShare(txn, e.token)
            guard share.ownerName == actor else { throw Self.refuse("only the share's owner deletes it") }

        case .shareTitleChanged(let e):
            try d.requireSignedIn(txn)
            let share = try d.liveShare(txn, e.token)
            try d.requireManager(txn, share, e.token)
            guard e.title.utf8.count <= Decider.Limits.maxTitleBytes else { throw Self.refuse("the title is too long") }

        case .publicPermissionChanged(let e):
            try d.requireSignedIn(txn)
            let share = try d.liveShare(txn, e.token)
            try d.requireManager(txn, share, e.token, ownerOnly: true)
            guard e.oldPermission == share.publicPermission, e.newPermission != e.oldPermission,
                e.newPermission == .none || Decider.isPublic(e.newPermission)
            else { throw Self.refuse("the permissions do not follow the share's public permission \(share.publicPermission)") }

        case .participantAdded(let e):
            try d.requireSignedIn(txn)
            let share = try d.liveShare(txn, e.token)
            let previous = try m.participant(txn, e.token, e.participantID)
            let active = previous.map { $0.status != .statusRemoved } ?? false
            if e.role == .publicUser {
                // Joining a public share by its URL (accept).
                guard e.userRecordName == actor, Decider.isPublic(share.publicPermission), e.permission == share.publicPermission
                else { throw Self.refuse("a public user joins a public share as themselves, with its public permission") }
                if let own = try d.activeEntry(txn, share, e.token) {
                    throw Self.refuse("the actor is participant \(own.id) of the share already")
                }
                if let entry = try m.participant(txn, of: actor, in: share, token: e.token), entry.id != e.participantID {
                    throw Self.refuse("the actor rejoins with participant id \(entry.id)")
                }
            } else {
                try d.requireManager(txn, share, e.token)
                guard share.publicPermission == .none else {
                    throw Self.refuse("participants are invited only to a private share")
                }
                guard e.role == .privateUser || e.role == .administrator, e.permission == .readOnly || e.permission == .readWrite
                else { throw Self.refuse("an invited participant is a privateUser or administrator, readOnly or readWrite") }
                guard e.userRecordName != share.ownerName, previous?.role != .owner else {
                    throw Self.refuse("the owner is a participant already")
                }
                if !e.userRecordName.isEmpty, try m.user(txn, d.container, e.userRecordName) == nil {
                    throw Self.refuse("there is no user \(e.userRecordName) in the container")
                }
                if let previous, active {
                    // Only an invitation not tied to an account is invited again, to bind it to one.
                    guard previous.status == .statusPending, previous.userRecordName.isEmpty, !e.userRecordName.isEmpty else {
                        throw Self.refuse("participant \(e.participantID) is in the share already")
                    }
                }
            }
            if !e.userRecordName.isEmpty, try m.accessEntry(txn, e.token, .blocked, user: e.userRecordName) != nil {
                throw Self.refuse("user \(e.userRecordName) is blocked from the share")
            }
            try checkSealedLookup(e.sealedLookup, sealed: e.hasSealedLookup, e.lookupInfo)
            if !e.oneTimeToken.isEmpty {
                // A one-time URL participant: a new entry, addressed to nobody, with an unused token.
                guard previous == nil, e.userRecordName.isEmpty, e.lookupInfo.lookupInfo == nil, !e.hasSealedLookup,
                    !e.approvedRequester,
                    e.role != .publicUser
                else { throw Self.refuse("a one-time URL participant is a new invitation to nobody in particular") }
                try d.checkNewOneTimeToken(txn, e.oneTimeToken)
            }
            if e.approvedRequester {
                guard e.role != .publicUser, !e.userRecordName.isEmpty,
                    try m.accessEntry(txn, e.token, .request, user: e.userRecordName) != nil
                else { throw Self.refuse("it approves an access request that user \(e.userRecordName) has not made") }
            }
            if !active, share.activeParticipantCount >= Decider.Limits.maxParticipants {
                throw LedgerError(.tooManyParticipants, "the share has \(share.activeParticipantCount) participants already")
            }

        case .participantUpdated(let e):
            try d.requireSignedIn(txn)
            let share = try d.liveShare(txn, e.token)
            let target = try activeTarget(txn, e.token, e.participantID)
            if target.role == .publicUser {
                // Public users follow the share's public permission when the owner changes it.
                try d.requireManager(txn, share, e.token, ownerOnly: true)
                guard e.role == .publicUser, e.permission == share.publicPermission else {
                    throw Self.refuse("a public user's permission is the share's public permission")
                }
            } else {
                try d.requireManager(txn, share, e.token)
                guard e.role == .privateUser || e.role == .administrator, e.permission == .readOnly || e.permission == .readWrite
                else { throw Self.refuse("a participant is a privateUser or administrator, readOnly or readWrite") }
            }

        case .participantRemoved(let e):
            try d.requireSignedIn(txn)
            let share = try d.liveShare(txn, e.token)
            let target = try activeTarget(txn, e.token, e.participantID)
            switch e.reason {
            case .removed:
                try d.requireManager(txn, share, e.token)
            case .left:
                guard try d.activeEntry(txn, share, e.token)?.id == e.participantID else {
                    throw Self.refuse("only the participant themselves leaves")
                }
            case .blocked:
                // Blocking removes the participant; the IdentityBlocked follows in the same command.
                try d.requireManager(txn, share, e.token)
                try d.checkBlockable(txn, share, user: target.userRecordName)
            case .publicPermissionChanged:
                try d.requireManager(txn, share, e.token, ownerOnly: true)
                guard target.status == .statusPending || (target.role == .publicUser && share.publicPermission == .none) else {
                    throw Self.refuse("a change of public permission drops only pending participants and, back to none, public users")
                }
            case .UNRECOGNIZED(let value):
                throw Self.refuse("its reason \(value) is unknown")
            }

        case .verificationRequested(let e):
            _ = try claimable(txn, d, token: e.token, user: e.userRecordName)
            try requireUnmatchedPending(txn, e.token, e.participantID)

        case .participantVerified(let e):
            _ = try claimable(txn, d, token: e.token, user: e.userRecordName)
            try requireUnmatchedPending(txn, e.token, e.participantID)
            let key = ReadModels.verificationKey(e.token, e.participantID, user: actor)
            guard let request = try m.message(VerificationState.self, txn, m.verifications, key),
                request.expiresAtMicros > d.now
            else { throw Self.refuse("the user has no unexpired verification request for participant \(e.participantID)") }

        case .shareAccepted(let e):
            try d.requireSignedIn(txn)
            guard e.userRecordName == actor else { throw Self.refuse("a user accepts a share only as themselves") }
            let share = try d.liveShare(txn, e.token)
            try d.refuseBlocked(txn, e.token)
            // The actor's own pending entry: invited (by account, or an invitation they verified), or
            // just joined a public share.
            // Or an unused one-time URL participant, taken by a user who is not in the share yet.
            if try d.activeEntry(txn, share, e.token) == nil, let oneTime = try m.participant(txn, e.token, e.participantID),
                !oneTime.oneTimeToken.isEmpty, try d.oneTimeParticipant(txn, oneTime.oneTimeToken)?.id == e.participantID
            {
                break
            }
            guard let entry = try m.participant(txn, of: actor, in: share, token: e.token), entry.id == e.participantID,
                entry.state.status == .statusPending, entry.state.role != .owner
            else {
                throw LedgerError(
                    .permissionFailure, "user \(actor) is not a pending participant (\(e.participantID)) of share \(e.token)")
            }

        case .shareMetadataFetched:
            // A fetch changes no read model; it is in the log for the audit trail, refused fetches too.
            break

        case .shareParticipantFetched(let e):
            // A lookup changes no read model either; one that succeeded was made by a signed-in user and
            // found an account of the container, or none.
            try checkSealedLookup(e.sealedLookup, sealed: e.hasSealedLookup, e.lookupInfo)
            guard e.errorCode == 0 else { break }
            try d.requireSignedIn(txn)
            if !e.userRecordName.isEmpty, try m.user(txn, d.container, e.userRecordName) == nil {
                throw Self.refuse("the lookup names user \(e.userRecordName), who is not registered in the container")
            }

        case .accessRequestsAllowedChanged(let e):
            try d.requireSignedIn(txn)
            let share = try d.liveShare(txn, e.token)
            try d.requireManager(txn, share, e.token)
            guard share.allowsAccessRequests != e.allowed else {
                throw Self.refuse("access requests are \(e.allowed ? "allowed" : "not allowed") already")
            }

        case .accessRequested(let e):
            try d.requireSignedIn(txn)
            guard e.userRecordName == actor else { throw Self.refuse("a user requests access only for themselves") }
            let share = try d.liveShare(txn, e.token)
            guard share.allowsAccessRequests else { throw Self.refuse("the share does not allow access requests") }
            try d.refuseBlocked(txn, e.token)
            guard try d.activeEntry(txn, share, e.token) == nil,
                try m.accessEntry(txn, e.token, .request, user: actor) == nil
            else { throw Self.refuse("the user is a participant, or has a pending request, already") }

        case .accessRequestDenied(let e):
            try requireManagerOf(e.token, d, txn)
            try d.requirePendingRequest(txn, e.token, user: e.userRecordName)

        case .identityBlocked(let e):
            let share = try requireManagerOf(e.token, d, txn)
            try d.checkBlockable(txn, share, user: e.userRecordName)
            guard try m.accessEntry(txn, e.token, .blocked, user: e.userRecordName) == nil else {
                throw Self.refuse("user \(e.userRecordName) is blocked already")
            }
            if try d.activeEntryOf(txn, share, e.token, user: e.userRecordName) != nil {
                throw Self.refuse("user \(e.userRecordName) is still a participant (its ParticipantRemoved comes first)")
            }

        case .identityUnblocked(let e):
            try requireManagerOf(e.token, d, txn)
            guard try m.accessEntry(txn, e.token, .blocked, user: e.userRecordName) != nil else {
                throw Self.refuse("user \(e.userRecordName) is not blocked")
            }

        case .participantZoneCreated(let e):
            let task = try task(txn, e.taskID, user: e.userRecordName, owner: e.ownerName, zone: e.zoneName)
            guard task.kind == .createZone else { throw Self.refuse("task \(e.taskID) removes a zone") }

        case .participantZoneRemoved(let e):
            let task = try task(txn, e.taskID, user: e.userRecordName, owner: e.ownerName, zone: e.zoneName)
            guard task.kind != .createZone else { throw Self.refuse("task \(e.taskID) creates a zone") }
            guard try d.zoneKept(txn, task) == e.zoneKept else {
                throw Self.refuse("it says the zone is \(e.zoneKept ? "" : "not ")kept by another accepted share; it is the opposite")
            }
        }
    }

    /// The event's actor, signed in, manages the live share `token`; returns the share.
    @discardableResult
    private func requireManagerOf(_ token: String, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable) throws
        -> ShareState
    {
        try d.requireSignedIn(txn)
        let share = try d.liveShare(txn, token)
        try d.requireManager(txn, share, token)
        return share
    }

    private func requireOwner(_ owner: String, _ actor: String) throws {
        guard owner == actor else { throw Self.refuse("only the owner \(owner) acts on their own zones and shares") }
    }

    private func activeTarget(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String, _ id: String) throws
        -> ParticipantState
    {
        guard let target = try models.participant(txn, token, id), target.status != .statusRemoved, target.role != .owner else {
            throw Self.refuse("participant \(id) is not an active participant other than the owner")
        }
        return target
    }

    /// A verification step: by the user themselves, signed in, not a participant, on a share with
    /// invitations not tied to an account.
    private func claimable(_ txn: borrowing some ReadModelStore & ~Copyable, _ d: Decider, token: String, user: String) throws
        -> ShareState
    {
        try d.requireSignedIn(txn)
        guard user == d.actor else { throw Self.refuse("a user verifies only for themselves") }
        let share = try d.liveShare(txn, token)
        if try d.activeEntry(txn, share, token) != nil { throw Self.refuse("the user is a participant of the share already") }
        try d.requireVerificationCase(share)
        return share
    }

    private func requireUnmatchedPending(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String, _ id: String) throws {
        guard let participant = try models.participant(txn, token, id), participant.status == .statusPending,
            participant.userRecordName.isEmpty
        else { throw Self.refuse("participant \(id) is not a pending invitation without an account") }
    }

    private func task(
        _ txn: borrowing some ReadModelStore & ~Copyable, _ id: UInt64, user: String, owner: String, zone: String
    ) throws -> ResidualTaskState {
        guard let task = try models.residualTask(txn, id: id) else {
            throw Self.refuse("there is no residual task \(id) in the outbox")
        }
        guard task.userRecordName == user, task.ownerName == owner, task.zoneName == zone else {
            throw Self.refuse("residual task \(id) is for another user or zone")
        }
        return task
    }
}
