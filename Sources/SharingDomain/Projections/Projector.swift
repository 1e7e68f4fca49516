import ByteKeys
import EventLog
import Foundation

/// Applies events to the read models, inside the write transaction that appends them (inline
/// projections) or that rebuilds the read models from the log.
///
/// `apply` depends only on the event, its envelope fields and the read models as they stand, so
/// replaying the log from the start reproduces every read model byte for byte. It never refuses an
/// event: the decider checked every rule before the event was appended.
package struct Projector {
    package let models: ReadModels

    /// The envelope fields a projection may use.
    package struct Context {
        package var position: UInt64
        package var recordedAtMicros: Int64
        package var container: String
        package var actor: String

        /// Makes the value from its fields.
        package init(position: UInt64, recordedAtMicros: Int64, container: String, actor: String) {
            self.position = position
            self.recordedAtMicros = recordedAtMicros
            self.container = container
            self.actor = actor
        }
    }

    /// Outbox task ids: the position of the scheduling event, shifted, plus the task's index within
    /// that event (an event schedules at most 4,096 tasks).
    package static func taskID(position: UInt64, index: Int) -> UInt64 { position << 12 | UInt64(index) }

    /// Lowers a count of a share's participants, never below zero: a log whose events contradict
    /// each other (an import forged with its chain recomputed) must not trap the projection, or
    /// every rebuild of that ledger would crash.
    @inline(__always)
    package static func decrement(_ count: inout UInt32) {
        if count > 0 { count -= 1 }
    }

    /// Applies `event`; returns the share (token) it is about, if any: every share whose row it may
    /// have changed is that one (an event is about one share at most).
    @discardableResult
    package func apply(_ event: DomainEvent, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable) throws -> String? {
        // Who and what the event is about, read before it changes the read models.
        let (token, users) = try subjects(of: event, context, txn)
        // A share record as sync sees it: the change index moves it on every event that changes it.
        let shareChange = Projector.changesShareRecord(event) ? token : nil
        // The share's row before the event, read once: the projection of the event starts from it
        // (no second read), and its zone and record name, which never change, name the change.
        let before = try shareChange.flatMap { try models.share(txn, $0) }
        try project(event, context, txn, share: before)
        if let shareChange {
            // Only a creation makes a share row and only a deletion removes one; no event changes a
            // share's zone or record name, so every other event's change is named by the row before.
            let change: (share: ShareState, deleted: Bool)?
            switch event {
            case .shareCreated: change = try models.share(txn, shareChange).map { ($0, false) } ?? before.map { ($0, true) }
            case .shareDeleted: change = before.map { ($0, true) }
            default: change = before.map { ($0, false) }
            }
            if let change {
                try models.noteShareChange(
                    txn, token: shareChange, zoneID: change.share.zoneID, recordName: change.share.shareRecordName,
                    deleted: change.deleted, position: context.position)
            }
        }
        try models.journalHistory(
            txn, position: context.position, container: context.container, token: token, users: users)
        return token
    }

    /// The share (token) and users an event is about, for the history indexes: at most one token,
    /// and the actor plus at most one other user, sorted and without repeats, with no empty name and
    /// neither `system` nor `(no account)` among the users. (Held inline, not in arrays: this runs
    /// for every event the writer appends and every event a rebuild replays.)
    private func subjects(of event: DomainEvent, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable) throws
        -> (token: String?, users: TwoNames)
    {
        var other = ""
        var token: String?
        func participantUser(_ token: String, _ id: String) throws -> String {
            try models.participant(txn, token, id)?.userRecordName ?? ""
        }
        func task(_ id: UInt64) throws -> ResidualTaskState? {
            try models.message(ResidualTaskState.self, txn, models.outbox, BigEndian.bytes(of: id))
        }
        switch event {
        case .userRegistered(let e): other = e.userRecordName
        case .zoneCreated(let e): other = e.ownerName
        case .zoneDeleted(let e): other = e.ownerName
        case .recordSaved(let e): other = e.ownerName
        case .recordDeleted(let e): other = e.ownerName
        case .shareCreated(let e): (token, other) = (e.token, e.ownerName)
        case .shareDeleted(let e): token = e.token
        case .shareTitleChanged(let e): token = e.token
        case .publicPermissionChanged(let e): token = e.token
        case .participantAdded(let e): (token, other) = (e.token, e.userRecordName)
        case .participantUpdated(let e): (token, other) = (e.token, try participantUser(e.token, e.participantID))
        case .participantRemoved(let e): (token, other) = (e.token, try participantUser(e.token, e.participantID))
        case .verificationRequested(let e): (token, other) = (e.token, e.userRecordName)
        case .participantVerified(let e): (token, other) = (e.token, e.userRecordName)
        case .shareAccepted(let e): (token, other) = (e.token, e.userRecordName)
        case .shareMetadataFetched(let e):
            // A fetch through a one-time URL is about the share that URL belongs to.
            if !e.shareContainer.isEmpty { token = try models.oneTimeURL(txn, e.token)?.token ?? e.token }
        case .shareParticipantFetched(let e): other = e.userRecordName  // whom the lookup found, if anyone
        case .accessRequestsAllowedChanged(let e): token = e.token
        case .accessRequested(let e): (token, other) = (e.token, e.userRecordName)
        case .accessRequestDenied(let e): (token, other) = (e.token, e.userRecordName)
        case .identityBlocked(let e): (token, other) = (e.token, e.userRecordName)
        case .identityUnblocked(let e): (token, other) = (e.token, e.userRecordName)
        case .personalDataForgotten(let e): other = e.userRecordName
        case .participantZoneCreated(let e):
            other = e.userRecordName
            if let task = try task(e.taskID) { token = task.token }
        case .participantZoneRemoved(let e):
            other = e.userRecordName
            if let task = try task(e.taskID) { token = task.token }
        }
        func indexed(_ user: String) -> Bool { !user.isEmpty && user != "system" && user != "(no account)" }
        let actor = indexed(context.actor) ? context.actor : nil
        let about = indexed(other) && other != context.actor ? other : nil
        if let actor, let about, about < actor { return (token, TwoNames(about, actor)) }
        return (token, TwoNames(actor, about))
    }

    /// Whether `event` changes what a share's record shows (its fields, participants, requesters
    /// or blocked identities), or deletes it.
    package static func changesShareRecord(_ event: DomainEvent) -> Bool {
        switch event {
        case .shareCreated, .shareDeleted, .shareTitleChanged, .publicPermissionChanged, .participantAdded, .participantUpdated,
            .participantRemoved, .participantVerified, .shareAccepted, .accessRequestsAllowedChanged, .accessRequested,
            .accessRequestDenied, .identityBlocked, .identityUnblocked:
            return true
        default:
            return false
        }
    }

    /// Applies `event` to the read models: one function per event, by aggregate (`Projector+Users`,
    /// `+Records`, `+Shares`, `+Participants`, `+AccessRequests`, `+Tasks`). `share` is the row of the
    /// share the event changes (``changesShareRecord(_:)``) as it stood before the event, read by
    /// ``apply(_:_:_:)``; nil for other events, or when there is no such share.
    private func project(
        _ event: DomainEvent, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable, share: ShareState?
    ) throws {
        switch event {
        case .userRegistered(let e) where e.hasSealed:
            try userRegisteredSealed(e, context, txn)
        case .personalDataForgotten(let e):
            try personalDataForgotten(e, context, txn)
        case .userRegistered(let e):
            try userRegistered(e, context, txn)
        case .zoneCreated(let e):
            try zoneCreated(e, context, txn)
        case .zoneDeleted(let e):
            try zoneDeleted(e, context, txn)
        case .recordSaved(let e):
            try recordSaved(e, context, txn)
        case .recordDeleted(let e):
            try recordDeleted(e, context, txn)
        case .shareCreated(let e):
            try shareCreated(e, context, txn)
        case .shareDeleted(let e):
            try shareDeleted(e, context, txn, share: share)
        case .shareTitleChanged(let e):
            try shareTitleChanged(e, context, txn, share: share)
        case .publicPermissionChanged(let e):
            try updateShare(share, token: e.token, txn) { $0.publicPermission = e.newPermission }

        case .participantAdded(let e):
            try participantAdded(e, context, txn, share: share)
        case .participantUpdated(let e):
            try participantUpdated(e, context, txn, share: share)
        case .participantRemoved(let e):
            try participantRemoved(e, context, txn, share: share)
        case .verificationRequested(let e):
            try verificationRequested(e, context, txn)
        case .participantVerified(let e):
            try participantVerified(e, context, txn, share: share)
        case .shareAccepted(let e):
            try shareAccepted(e, context, txn, share: share)
        case .shareMetadataFetched:
            // A fetch changes nothing but the log (it is there for the audit trail).
            break

        case .shareParticipantFetched(let e):
            try shareParticipantFetched(e, context, txn)
        case .accessRequestsAllowedChanged(let e):
            try accessRequestsAllowedChanged(e, context, txn, share: share)
        case .accessRequested(let e):
            try changeAccess(e.token, user: e.userRecordName, remove: nil, add: .request, context, txn, share: share)

        case .accessRequestDenied(let e):
            try changeAccess(e.token, user: e.userRecordName, remove: .request, add: nil, context, txn, share: share)

        case .identityBlocked(let e):
            try changeAccess(e.token, user: e.userRecordName, remove: .request, add: .blocked, context, txn, share: share)

        case .identityUnblocked(let e):
            try changeAccess(e.token, user: e.userRecordName, remove: .blocked, add: nil, context, txn, share: share)

        case .participantZoneCreated(let e):
            try participantZoneCreated(e, context, txn)
        case .participantZoneRemoved(let e):
            try participantZoneRemoved(e, context, txn)
        }
    }

    /// Changes share `token` whose row is `share` (nil: there is no such share, nothing changes)
    /// with `change`, moves its change tag and writes it.
    func updateShare(
        _ share: ShareState?, token: String, _ txn: borrowing some ReadModelStore & ~Copyable, _ change: (inout ShareState) -> Void
    ) throws {
        guard var share else { return }
        change(&share)
        share.changeTag += 1
        try models.put(txn, models.shares, text: token, share)
    }

    /// Deletes `user`'s `rm_access` entry of kind `remove`, writes one of kind `add` (at the event's
    /// time), and moves the share's change tag.
    func changeAccess(
        _ token: String, user: String, remove: ReadModels.AccessKind?, add: ReadModels.AccessKind?, _ context: Context,
        _ txn: borrowing some ReadModelStore & ~Copyable, share: ShareState?
    ) throws {
        if let remove { try models.deleteRow(txn, models.access, ReadModels.accessKey(token, remove, user: user)) }
        if let add {
            var state = AccessEntryState()
            state.atMicros = context.recordedAtMicros
            try models.put(txn, models.access, ReadModels.accessKey(token, add, user: user), state)
        }
        try updateShare(share, token: token, txn) { _ in }
    }

    /// Moves an invitation's `rm_addresses` entry from the address it went to before (if any) to the
    /// one it goes to now (if any; through the address journal, ``ReadModels/journalAddress(_:position:entry:)``,
    /// whose stale entries the fold and the reads leave out). An invitation sealed to a forgotten
    /// address means the address holds personal data again: it is no longer a forgotten one.
    func indexInvitation(
        _ container: String, _ token: String, _ participantID: String, from old: AddressHash?, to new: AddressHash?,
        _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let suffix = ReadModels.participantKey(token, participantID)
        if let old, old != new { try txn.delete(models.addresses, key: ReadModels.addressKey(container, old) + suffix) }
        guard let new, new != old else { return }
        let key = ReadModels.addressKey(container, new)
        try models.journalAddress(txn, position: context.position, entry: key + suffix)
        try models.deleteRow(txn, models.addresses, key)
    }

    /// Erases every invitation sealed to `address` (their rows keep no box and no hash, and answer
    /// as erased; their `rm_addresses` entries go) and marks the address forgotten.
    func forget(_ address: AddressHash, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable) throws {
        let key = ReadModels.addressKey(context.container, address)
        for invitation in try models.invitations(txn, context.container, to: address) {
            let rowKey = ReadModels.participantKey(invitation.token, invitation.participantID)
            if var state = try models.message(ParticipantState.self, txn, models.participants, rowKey) {
                state.clearSealedLookup()
                (state.emailHash, state.phoneHash) = (Data(), Data())
                state.lookupInfo.emailAddress = ""
                state.lookupInfo.phoneNumber = ""
                if state.lookupInfo == PBLookupInfo() { state.clearLookupInfo() }
                state.forgottenAtMicros = context.recordedAtMicros
                try models.put(txn, models.participants, rowKey, state)
            }
            try txn.delete(models.addresses, key: key + rowKey)
        }
        var state = AddressState()
        state.forgottenAtMicros = context.recordedAtMicros
        try models.put(txn, models.addresses, key, state)
    }

    func deleteVerifications(token: String, participantID: String, _ txn: borrowing some ReadModelStore & ~Copyable) throws {
        let prefix = ReadModels.participantKey(token, participantID) + [0]
        for entry in try models.scan(txn, models.verifications, prefix: prefix) {
            try txn.delete(models.verifications, key: prefix + entry.suffix)
        }
    }

    func scheduleZoneTask(
        _ kind: ResidualTaskState.Kind, share: ShareState, token: String, user: String, id: UInt64, _ context: Context,
        _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        guard !user.isEmpty else { return }
        var task = ResidualTaskState()
        task.kind = kind
        task.container = share.container
        task.userRecordName = user
        task.ownerName = share.ownerName
        task.zoneName = share.zoneName
        task.zoneID = share.zoneID
        task.token = token
        task.dueAtMicros = context.recordedAtMicros
        task.scheduledAtMicros = context.recordedAtMicros
        try models.put(txn, models.outbox, BigEndian.bytes(of: id), task)
    }

    /// Makes the value from its fields.
    package init(models: ReadModels) {
        self.models = models
    }
}

extension Projector.Context {
    /// The context of the event `envelope` holds.
    package init(_ envelope: EventEnvelope) {
        self.init(
            position: envelope.position.rawValue, recordedAtMicros: envelope.recordedAtMicros, container: envelope.container,
            actor: envelope.actor)
    }
}
