import EventLog
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
/// One check per event type, by aggregate like the decider (`EventValidator+Users`, `+Records`,
/// `+Shares`, `+Participants`, `+AccessRequests`, `+Tasks`). What is the validator's own, and why:
/// - the fields a decider computes instead of checking, which only an event carries: a change tag
///   that follows the row's, `created` and `created_by`, the token an earlier share of the same root
///   kept, the old and new public permission, a removal's reason, a residual task's user and zone,
///   whether a participant's zone is kept;
/// - the shape of sealed data (one keyed hash, no plaintext beside it), which a command never has:
///   the writer seals after deciding;
/// - the duplicate checks of a registration by keyed hash, where a command carries plaintext;
/// - the refusals a decider turns into an answer without an event (a zone or a participant that is
///   there already, a user who is registered): for an event they are the state it could not follow.
///
/// Used by the rebuild replay of `audit` and by `import`; a ledger the writer produced always passes
/// (`EventValidatorTests`, the property tests, the release fixture).
package struct EventValidator {
    package let models: ReadModels

    package init(models: ReadModels) {
        self.models = models
    }

    /// Why `event` could not have been produced by the rules from the state in `txn`, or nil when it
    /// could. Throws only for storage errors.
    package func problem(_ event: DomainEvent, _ context: Projector.Context, _ txn: borrowing some ReadModelStore & ~Copyable) throws
        -> String?
    {
        let decider = Decider(
            models: models, container: context.container, actor: context.actor, signedIn: true, now: context.recordedAtMicros)
        do {
            try check(event, decider, txn)
            return nil
        } catch let error as LedgerError {
            return error.message
        }
    }

    /// The report of an inadmissible event, for audit and import alike.
    package static func describe(position: UInt64, _ event: DomainEvent, actor: String, _ problem: String) -> String {
        "event \(position) (\(event.typeName) by \(actor)) is not one the sharing rules could have produced from the state "
            + "before it: \(problem)"
    }

    static func refuse(_ text: String) -> LedgerError { LedgerError(.invalidArguments, text) }

    /// A sealed invitation or lookup address is sealed under the key of the address its one keyed
    /// hash names (so that forgetting the address reaches it), and leaves no plaintext beside it.
    func checkSealedLookup(_ sealedLookup: Shareledger_Events_V1_SealedPersonalData, sealed: Bool, _ lookup: PBLookupInfo)
        throws
    {
        guard sealed else { return }
        guard sealedLookup.address != nil, lookup.emailAddress.isEmpty, lookup.phoneNumber.isEmpty else {
            throw Self.refuse(
                "its sealed address is not sealed under the key of the one keyed hash it carries, or has plaintext beside it")
        }
    }

    private func check(_ event: DomainEvent, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable) throws {
        switch event {
        case .userRegistered(let e):
            try checkUserRegistered(e, d, txn)
        case .personalDataForgotten(let e):
            try checkPersonalDataForgotten(e, d, txn)
        case .zoneCreated(let e):
            try checkZoneCreated(e, d, txn)
        case .zoneDeleted(let e):
            try checkZoneDeleted(e, d, txn)
        case .recordSaved(let e):
            try checkRecordSaved(e, d, txn)
        case .recordDeleted(let e):
            try checkRecordDeleted(e, d, txn)
        case .shareCreated(let e):
            try checkShareCreated(e, d, txn)
        case .shareDeleted(let e):
            try checkShareDeleted(e, d, txn)
        case .shareTitleChanged(let e):
            try checkShareTitleChanged(e, d, txn)
        case .publicPermissionChanged(let e):
            try checkPublicPermissionChanged(e, d, txn)
        case .participantAdded(let e):
            try checkParticipantAdded(e, d, txn)
        case .participantUpdated(let e):
            try checkParticipantUpdated(e, d, txn)
        case .participantRemoved(let e):
            try checkParticipantRemoved(e, d, txn)
        case .verificationRequested(let e):
            try checkVerificationRequested(e, d, txn)
        case .participantVerified(let e):
            try checkParticipantVerified(e, d, txn)
        case .shareAccepted(let e):
            try checkShareAccepted(e, d, txn)
        case .shareMetadataFetched:
            // A fetch changes no read model; it is in the log for the audit trail, refused fetches too.
            break

        case .shareParticipantFetched(let e):
            try checkShareParticipantFetched(e, d, txn)
        case .accessRequestsAllowedChanged(let e):
            try checkAccessRequestsAllowedChanged(e, d, txn)
        case .accessRequested(let e):
            try checkAccessRequested(e, d, txn)
        case .accessRequestDenied(let e):
            try checkAccessRequestDenied(e, d, txn)
        case .identityBlocked(let e):
            try checkIdentityBlocked(e, d, txn)
        case .identityUnblocked(let e):
            try checkIdentityUnblocked(e, d, txn)
        case .participantZoneCreated(let e):
            try checkParticipantZoneCreated(e, d, txn)
        case .participantZoneRemoved(let e):
            try checkParticipantZoneRemoved(e, d, txn)
        }
    }

    /// The event's actor, signed in, manages (with `ownerOnly`, owns) the live share `token`;
    /// returns the share.
    @discardableResult
    func requireManagerOf(
        _ token: String, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable, ownerOnly: Bool = false
    ) throws -> ShareState {
        try d.requireSignedIn(txn)
        let share = try d.liveShare(txn, token)
        try d.requireManager(txn, share, token, ownerOnly: ownerOnly)
        return share
    }

    func requireOwner(_ owner: String, _ actor: String) throws {
        guard owner == actor else { throw Self.refuse("only the owner \(owner) acts on their own zones and shares") }
    }

    func activeTarget(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String, _ id: String) throws
        -> ParticipantState
    {
        guard let target = try models.participant(txn, token, id), target.status != .statusRemoved, target.role != .owner else {
            throw Self.refuse("participant \(id) is not an active participant other than the owner")
        }
        return target
    }

    /// A verification step: by the user themselves, signed in, not a participant, on a share with
    /// invitations not tied to an account.
    func claimable(_ txn: borrowing some ReadModelStore & ~Copyable, _ d: Decider, token: String, user: String) throws
        -> ShareState
    {
        try d.requireSignedIn(txn)
        guard user == d.actor else { throw Self.refuse("a user verifies only for themselves") }
        let share = try d.liveShare(txn, token)
        if try d.activeEntry(txn, share, token) != nil { throw Self.refuse("the user is a participant of the share already") }
        try d.requireVerificationCase(share)
        return share
    }

    func requireUnmatchedPending(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String, _ id: String) throws {
        guard let participant = try models.participant(txn, token, id), participant.status == .statusPending,
            participant.userRecordName.isEmpty
        else { throw Self.refuse("participant \(id) is not a pending invitation without an account") }
    }

    func task(
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
