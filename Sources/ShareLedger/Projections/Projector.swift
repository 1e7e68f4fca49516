import Foundation
import LMDB

/// Applies events to the read models, inside the write transaction that appends them (inline
/// projections) or that rebuilds the read models from the log.
///
/// `apply` depends only on the event, its envelope fields and the read models as they stand, so
/// replaying the log from the start reproduces every read model byte for byte. It never refuses an
/// event: the decider checked every rule before the event was appended.
struct Projector {
    let models: ReadModels

    /// The envelope fields a projection may use.
    struct Context {
        var position: UInt64
        var recordedAtMicros: Int64
        var container: String
        var actor: String
    }

    /// Outbox task ids: the position of the scheduling event, shifted, plus the task's index within
    /// that event (an event schedules at most 4,096 tasks).
    static func taskID(position: UInt64, index: Int) -> UInt64 { position << 12 | UInt64(index) }

    /// Lowers a count of a share's participants, never below zero: a log whose events contradict
    /// each other (an import forged with its chain recomputed) must not trap the projection, or
    /// every rebuild of that ledger would crash.
    @inline(__always)
    static func decrement(_ count: inout UInt32) {
        if count > 0 { count -= 1 }
    }

    /// Applies `event`; returns the shares (tokens) it is about: every share whose row it may have
    /// changed is among them (one at most).
    @discardableResult
    func apply(_ event: DomainEvent, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable) throws -> [String] {
        // Who and what the event is about, read before it changes the read models.
        let (tokens, users) = try subjects(of: event, context, txn)
        // A share record as sync sees it: the change index moves it on every event that changes it.
        let shareChange = Projector.changesShareRecord(event) ? tokens.first : nil
        let before = try shareChange.flatMap { try models.share(txn, $0) }
        try project(event, context, txn)
        if let shareChange { try models.noteShareChange(txn, token: shareChange, before: before, position: context.position) }
        try models.journalHistory(
            txn, position: context.position, HistoryJournalEntry(container: context.container, tokens: tokens, users: users))
        return tokens
    }

    /// The shares (tokens) and users an event is about, for the history indexes: at most one token,
    /// and the actor plus at most one other user, each list sorted and without repeats, with no empty
    /// name and neither `system` nor `(no account)` among the users. (Small arrays, not sets: this
    /// runs for every event the writer appends and every event a rebuild replays.)
    private func subjects(of event: DomainEvent, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable) throws
        -> (tokens: [String], users: [String])
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
        var users: [String] = []
        users.reserveCapacity(2)
        if indexed(context.actor) { users.append(context.actor) }
        if indexed(other) && other != context.actor {
            if let first = users.first, other < first { users.insert(other, at: 0) } else { users.append(other) }
        }
        return (token.map { [$0] } ?? [], users)
    }

    /// Whether `event` changes what a share's record shows (its fields, participants, requesters
    /// or blocked identities), or deletes it.
    static func changesShareRecord(_ event: DomainEvent) -> Bool {
        switch event {
        case .shareCreated, .shareDeleted, .shareTitleChanged, .publicPermissionChanged, .participantAdded, .participantUpdated,
            .participantRemoved, .participantVerified, .shareAccepted, .accessRequestsAllowedChanged, .accessRequested,
            .accessRequestDenied, .identityBlocked, .identityUnblocked:
            return true
        default:
            return false
        }
    }

    private func project(_ event: DomainEvent, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable) throws {
        let m = models
        switch event {
        case .userRegistered(let e) where e.hasSealed:
            // Since crypto-shredding: the row keeps the box, opened only for answers, and the event's
            // keyed hashes, which key the lookup entries. No key is needed: the read models follow
            // from the log alone, on replicas and in rebuilds too.
            var state = UserState()
            state.sealed = e.sealed
            state.sealed.emailHash = Data()
            state.sealed.phoneHash = Data()
            state.registeredAtMicros = context.recordedAtMicros
            if e.sealed.emailHash.count == ReadModels.lookupHashBytes {
                state.emailHash = e.sealed.emailHash
                try m.putRaw(
                    txn, m.userLookup, ReadModels.lookupKey(context.container, hash: Array(e.sealed.emailHash), kind: "E"),
                    Array(e.userRecordName.utf8))
            }
            if e.sealed.phoneHash.count == ReadModels.lookupHashBytes {
                state.phoneHash = e.sealed.phoneHash
                try m.putRaw(
                    txn, m.userLookup, ReadModels.lookupKey(context.container, hash: Array(e.sealed.phoneHash), kind: "P"),
                    Array(e.userRecordName.utf8))
            }
            try m.put(txn, m.users, ReadModels.userKey(context.container, e.userRecordName), state)
            try m.add(txn, .users, 1)

        case .personalDataForgotten(let e):
            // The addresses whose keys go with this erasure: their invitations answer as erased.
            for address in e.addresses { try forget(address, context, txn) }
            guard !e.userRecordName.isEmpty else { return }
            // So do those of the invitations bound to the user (verified ones: the user proved the address).
            for address in try m.boundAddresses(txn, context.container, user: e.userRecordName) { try forget(address, context, txn) }
            let key = ReadModels.userKey(context.container, e.userRecordName)
            guard let state = try m.user(txn, context.container, e.userRecordName) else { return }
            if !state.emailHash.isEmpty {
                _ = try m.deleteRow(txn, m.userLookup, ReadModels.lookupKey(context.container, hash: Array(state.emailHash), kind: "E"))
            }
            if !state.phoneHash.isEmpty {
                _ = try m.deleteRow(txn, m.userLookup, ReadModels.lookupKey(context.container, hash: Array(state.phoneHash), kind: "P"))
            }
            // A user registered before crypto-shredding: its row and lookup entries held plaintext (and
            // so does its UserRegistered event, which `audit` counts).
            let name = Array(e.userRecordName.utf8)
            for legacy in [
                state.emailAddress.isEmpty ? nil : ReadModels.lookupKey(context.container, email: state.emailAddress),
                state.phoneNumber.isEmpty ? nil : ReadModels.lookupKey(context.container, phone: state.phoneNumber),
            ] {
                if let legacy, try m.string(txn, m.userLookup, legacy).map({ Array($0.utf8) }) == name {
                    _ = try m.deleteRow(txn, m.userLookup, legacy)
                }
            }
            var erased = UserState()
            erased.registeredAtMicros = state.registeredAtMicros
            erased.forgottenAtMicros = context.recordedAtMicros
            try m.put(txn, m.users, key, erased)

        case .userRegistered(let e):
            var state = UserState()
            state.emailAddress = e.emailAddress
            state.phoneNumber = e.phoneNumber
            state.givenName = e.name.givenName
            state.familyName = e.name.familyName
            state.middleName = e.name.middleName
            state.nickname = e.name.nickname
            state.registeredAtMicros = context.recordedAtMicros
            try m.put(txn, m.users, ReadModels.userKey(context.container, e.userRecordName), state)
            if !e.emailAddress.isEmpty {
                try m.putRaw(
                    txn, m.userLookup, ReadModels.lookupKey(context.container, email: e.emailAddress),
                    Array(e.userRecordName.utf8))
            }
            if !e.phoneNumber.isEmpty {
                try m.putRaw(
                    txn, m.userLookup, ReadModels.lookupKey(context.container, phone: e.phoneNumber),
                    Array(e.userRecordName.utf8))
            }
            try m.add(txn, .users, 1)

        case .zoneCreated(let e):
            var state = ZoneState()
            state.zoneID = context.position
            state.capabilities = e.capabilities
            state.createdAtMicros = context.recordedAtMicros
            try m.put(txn, m.zones, ReadModels.zoneKey(context.container, owner: e.ownerName, zone: e.zoneName), state)
            try m.add(txn, .zones, 1)
            try m.noteZoneChange(
                txn, context.container, user: e.ownerName, .private,
                ZoneChangeEntry(ownerName: e.ownerName, zoneName: e.zoneName, position: context.position, deleted: false, zoneID: context.position))

        case .zoneDeleted(let e):
            let key = ReadModels.zoneKey(context.container, owner: e.ownerName, zone: e.zoneName)
            guard let zone = try m.message(ZoneState.self, txn, m.zones, key) else { return }
            let prefix = BigEndian.bytes(of: zone.zoneID)
            let records = try m.scan(txn, m.records, prefix: prefix)
            for entry in records { try txn.delete(m.records, key: prefix + entry.suffix) }
            for entry in try m.scan(txn, m.recordChildren, prefix: prefix) {
                try txn.delete(m.recordChildren, key: prefix + entry.suffix, value: entry.value)
            }
            try m.deleteRow(txn, m.zones, key)
            try m.add(txn, .zones, -1)
            try m.add(txn, .records, -Int64(records.count))
            try m.dropRecordChanges(txn, zoneID: zone.zoneID)
            try m.noteZoneChange(
                txn, context.container, user: e.ownerName, .private,
                ZoneChangeEntry(ownerName: e.ownerName, zoneName: e.zoneName, position: context.position, deleted: true, zoneID: zone.zoneID))

        case .recordSaved(let e):
            guard let zone = try m.zone(txn, context.container, owner: e.ownerName, zone: e.zoneName) else { return }
            let key = ReadModels.recordKey(zoneID: zone.zoneID, e.recordName)
            let existing = try m.message(RecordState.self, txn, m.records, key)
            var state = existing ?? RecordState()
            if existing == nil {
                state.createdAtMicros = context.recordedAtMicros
                state.createdBy = e.createdBy
            }
            if state.parentRecordName != e.parentRecordName {
                if !state.parentRecordName.isEmpty {
                    try txn.delete(
                        m.recordChildren, key: ReadModels.recordKey(zoneID: zone.zoneID, state.parentRecordName),
                        value: Array(e.recordName.utf8))
                }
                if !e.parentRecordName.isEmpty {
                    try txn.put(
                        m.recordChildren, key: ReadModels.recordKey(zoneID: zone.zoneID, e.parentRecordName),
                        value: Array(e.recordName.utf8))
                }
            }
            state.recordType = e.recordType
            state.fields = e.fields
            state.parentRecordName = e.parentRecordName
            state.changeTag = e.changeTag
            state.modifiedAtMicros = context.recordedAtMicros
            state.lastModifiedBy = context.actor
            try m.put(txn, m.records, key, state)
            if existing == nil { try m.add(txn, .records, 1) }
            try m.noteRecordChange(
                txn, zoneID: zone.zoneID, RecordChangeEntry(position: context.position, recordName: e.recordName, deleted: false, shareToken: ""))

        case .recordDeleted(let e):
            guard let zone = try m.zone(txn, context.container, owner: e.ownerName, zone: e.zoneName) else { return }
            let key = ReadModels.recordKey(zoneID: zone.zoneID, e.recordName)
            guard let state = try m.message(RecordState.self, txn, m.records, key) else { return }
            // The tombstone names the share that covered the record, so that its participants see the deletion.
            let covering = try m.coveringShare(txn, zone: zone, from: e.recordName) ?? ""
            try m.noteRecordChange(
                txn, zoneID: zone.zoneID, RecordChangeEntry(position: context.position, recordName: e.recordName, deleted: true, shareToken: covering))
            if !state.parentRecordName.isEmpty {
                try txn.delete(
                    m.recordChildren, key: ReadModels.recordKey(zoneID: zone.zoneID, state.parentRecordName),
                    value: Array(e.recordName.utf8))
            }
            try txn.delete(m.records, key: key)
            try m.add(txn, .records, -1)

        case .shareCreated(let e):
            let zoneKey = ReadModels.zoneKey(context.container, owner: e.ownerName, zone: e.zoneName)
            guard var zone = try m.message(ZoneState.self, txn, m.zones, zoneKey) else { return }
            var share = ShareState()
            share.container = context.container
            share.ownerName = e.ownerName
            share.zoneName = e.zoneName
            share.zoneID = zone.zoneID
            share.shareRecordName = e.shareRecordName
            share.rootRecordName = e.rootRecordName
            share.title = e.title
            if e.hasSealedTitle { share.sealedTitle = e.sealedTitle }
            share.publicPermission = e.publicPermission
            // The change tag starts at the position of the share's creation and counts up, so a tag
            // is never given twice for one URL, even across deleting and re-sharing the same root.
            share.changeTag = context.position
            share.createdAtMicros = context.recordedAtMicros
            share.ownerParticipantID = e.ownerParticipantID
            share.activeParticipantCount = 1
            try m.put(txn, m.shares, Array(e.token.utf8), share)

            var owner = ParticipantState()
            owner.userRecordName = e.ownerName
            owner.lookupInfo.userRecordName = e.ownerName
            owner.role = .owner
            owner.permission = .readWrite
            owner.status = .statusAccepted
            owner.addedAtMicros = context.recordedAtMicros
            try m.put(txn, m.participants, ReadModels.participantKey(e.token, e.ownerParticipantID), owner)
            try m.putRaw(txn, m.sharesByOwner, ReadModels.key(context.container, e.ownerName, e.token), [])
            try m.putRaw(
                txn, m.sharesByUser, ReadModels.key(context.container, e.ownerName, e.token),
                Array(e.ownerParticipantID.utf8))

            if e.rootRecordName.isEmpty {
                zone.zoneShareToken = e.token
                zone.lastZoneShareToken = e.token
            } else {
                zone.hierarchyShareCount += 1
                let recordKey = ReadModels.recordKey(zoneID: zone.zoneID, e.rootRecordName)
                if var root = try m.message(RecordState.self, txn, m.records, recordKey) {
                    root.shareToken = e.token
                    root.lastShareToken = e.token
                    try m.put(txn, m.records, recordKey, root)
                }
            }
            try m.put(txn, m.zones, zoneKey, zone)
            try m.add(txn, .shares, 1)

        case .shareDeleted(let e):
            guard let share = try m.share(txn, e.token) else { return }
            let participants = try m.participants(txn, e.token)
            var taskIndex = 0
            for (id, participant) in participants {
                if participant.role != .owner && participant.status != .statusRemoved {
                    try m.add(txn, .participants, -1)
                    if participant.status == .statusAccepted {
                        try m.add(txn, .acceptedParticipants, -1)
                        try scheduleZoneTask(
                            .removeZone, share: share, token: e.token, user: participant.userRecordName,
                            id: Projector.taskID(position: context.position, index: taskIndex), context, txn)
                        taskIndex += 1
                    }
                }
                if !participant.oneTimeToken.isEmpty { try txn.delete(m.oneTimeURLs, key: Array(participant.oneTimeToken.utf8)) }
                try indexInvitation(share.container, e.token, id, from: participant.address, to: nil, context, txn)
                try m.deleteRow(txn, m.participants, ReadModels.participantKey(e.token, id))
                if !participant.userRecordName.isEmpty {
                    try txn.delete(m.sharesByUser, key: ReadModels.key(share.container, participant.userRecordName, e.token))
                }
            }
            for entry in try m.scan(txn, m.verifications, prefix: Array(e.token.utf8)) {
                try txn.delete(m.verifications, key: Array(e.token.utf8) + entry.suffix)
            }
            // Requests and blocks belong to the share: a new share of the same root starts without them.
            for entry in try m.scan(txn, m.access, prefix: Array(e.token.utf8)) {
                try txn.delete(m.access, key: Array(e.token.utf8) + entry.suffix)
            }
            try txn.delete(m.sharesByOwner, key: ReadModels.key(share.container, share.ownerName, e.token))
            try m.deleteRow(txn, m.shares, Array(e.token.utf8))
            let zoneKey = ReadModels.zoneKey(share.container, owner: share.ownerName, zone: share.zoneName)
            if var zone = try m.message(ZoneState.self, txn, m.zones, zoneKey) {
                if share.rootRecordName.isEmpty {
                    zone.zoneShareToken = ""
                } else {
                    zone.hierarchyShareCount = zone.hierarchyShareCount > 0 ? zone.hierarchyShareCount - 1 : 0
                    let recordKey = ReadModels.recordKey(zoneID: zone.zoneID, share.rootRecordName)
                    if var root = try m.message(RecordState.self, txn, m.records, recordKey), root.shareToken == e.token {
                        root.shareToken = ""
                        try m.put(txn, m.records, recordKey, root)
                    }
                }
                try m.put(txn, m.zones, zoneKey, zone)
            }
            try m.add(txn, .shares, -1)

        case .shareTitleChanged(let e):
            try updateShare(e.token, txn) { share in
                share.title = e.title
                if e.hasSealedTitle { share.sealedTitle = e.sealedTitle } else { share.clearSealedTitle() }
            }

        case .publicPermissionChanged(let e):
            try updateShare(e.token, txn) { $0.publicPermission = e.newPermission }

        case .participantAdded(let e):
            guard var share = try m.share(txn, e.token) else { return }
            let key = ReadModels.participantKey(e.token, e.participantID)
            let previous = try m.message(ParticipantState.self, txn, m.participants, key)
            var state = previous ?? ParticipantState()
            state.userRecordName = e.userRecordName
            state.lookupInfo = e.lookupInfo
            // A sealed invitation keeps its box, and its keyed hash apart from it (as a user row does).
            if e.hasSealedLookup {
                var sealed = e.sealedLookup
                (state.emailHash, state.phoneHash) = (sealed.emailHash, sealed.phoneHash)
                (sealed.emailHash, sealed.phoneHash) = (Data(), Data())
                state.sealedLookup = sealed
            } else {
                state.clearSealedLookup()
                (state.emailHash, state.phoneHash) = (Data(), Data())
            }
            state.forgottenAtMicros = 0
            state.role = e.role
            state.permission = e.permission
            state.status = .statusPending
            state.addedAtMicros = context.recordedAtMicros
            state.approvedRequester = e.approvedRequester
            state.oneTimeToken = e.oneTimeToken
            try m.put(txn, m.participants, key, state)
            try indexInvitation(
                share.container, e.token, e.participantID, from: previous?.address, to: state.address, context, txn)
            if !e.oneTimeToken.isEmpty {
                try m.putRaw(txn, m.oneTimeURLs, Array(e.oneTimeToken.utf8), Array((e.token + e.participantID).utf8))
            }
            if !e.userRecordName.isEmpty {
                // An invitation (or a public join) answers the user's pending access request, if any.
                try m.deleteRow(txn, m.access, ReadModels.accessKey(e.token, .request, user: e.userRecordName))
            }
            if let previous, previous.status == .statusPending, previous.userRecordName.isEmpty {
                // An unmatched invitation invited again: it no longer counts as unmatched (it may again below).
                Projector.decrement(&share.unmatchedPendingCount)
            }
            if !e.userRecordName.isEmpty {
                try m.putRaw(
                    txn, m.sharesByUser, ReadModels.key(share.container, e.userRecordName, e.token),
                    Array(e.participantID.utf8))
            } else if e.oneTimeToken.isEmpty {
                // (A one-time URL participant is not claimed by verification: it does not count.)
                share.unmatchedPendingCount += 1
            }
            if previous == nil || previous?.status == .statusRemoved {
                share.activeParticipantCount += 1
                try m.add(txn, .participants, 1)
            }
            share.changeTag += 1
            try m.put(txn, m.shares, Array(e.token.utf8), share)

        case .participantUpdated(let e):
            let key = ReadModels.participantKey(e.token, e.participantID)
            guard var state = try m.message(ParticipantState.self, txn, m.participants, key) else { return }
            state.role = e.role
            state.permission = e.permission
            try m.put(txn, m.participants, key, state)
            try updateShare(e.token, txn) { _ in }

        case .participantRemoved(let e):
            guard var share = try m.share(txn, e.token) else { return }
            let key = ReadModels.participantKey(e.token, e.participantID)
            guard var state = try m.message(ParticipantState.self, txn, m.participants, key),
                state.status != .statusRemoved
            else { return }
            if state.status == .statusAccepted {
                try m.add(txn, .acceptedParticipants, -1)
                try scheduleZoneTask(
                    .removeZone, share: share, token: e.token, user: state.userRecordName,
                    id: Projector.taskID(position: context.position, index: 0), context, txn)
            }
            if state.status == .statusPending && state.userRecordName.isEmpty && state.oneTimeToken.isEmpty {
                Projector.decrement(&share.unmatchedPendingCount)
            }
            if !state.oneTimeToken.isEmpty {
                // Removing an unused one-time URL participant withdraws the URL.
                try txn.delete(m.oneTimeURLs, key: Array(state.oneTimeToken.utf8))
                state.oneTimeToken = ""
            }
            state.status = .statusRemoved
            try m.put(txn, m.participants, key, state)
            Projector.decrement(&share.activeParticipantCount)
            share.changeTag += 1
            try m.put(txn, m.shares, Array(e.token.utf8), share)
            try m.add(txn, .participants, -1)
            try deleteVerifications(token: e.token, participantID: e.participantID, txn)

        case .verificationRequested(let e):
            var state = VerificationState()
            state.codeSha256 = e.codeSha256
            state.expiresAtMicros = e.expiresAtMicros
            try m.put(
                txn, m.verifications,
                ReadModels.verificationKey(e.token, e.participantID, user: e.userRecordName), state)

        case .participantVerified(let e):
            guard var share = try m.share(txn, e.token) else { return }
            let key = ReadModels.participantKey(e.token, e.participantID)
            guard var state = try m.message(ParticipantState.self, txn, m.participants, key) else { return }
            if state.userRecordName.isEmpty && state.status == .statusPending {
                Projector.decrement(&share.unmatchedPendingCount)
            }
            state.userRecordName = e.userRecordName
            try m.put(txn, m.participants, key, state)
            try m.putRaw(
                txn, m.sharesByUser, ReadModels.key(share.container, e.userRecordName, e.token),
                Array(e.participantID.utf8))
            // The user is in the share now: their pending access request, if any, is answered.
            try m.deleteRow(txn, m.access, ReadModels.accessKey(e.token, .request, user: e.userRecordName))
            share.changeTag += 1
            try m.put(txn, m.shares, Array(e.token.utf8), share)
            try deleteVerifications(token: e.token, participantID: e.participantID, txn)

        case .shareAccepted(let e):
            guard let share = try m.share(txn, e.token) else { return }
            let key = ReadModels.participantKey(e.token, e.participantID)
            guard var state = try m.message(ParticipantState.self, txn, m.participants, key) else { return }
            if !state.oneTimeToken.isEmpty {
                // Accepted through its one-time URL: the participant is the accepting user's from now on.
                // The URL stays tied to it while it is in the share (CloudKit's one-time URLs are stable),
                // answering as the share's URL; removal, leaving or the share's deletion withdraws it.
                try m.putRaw(
                    txn, m.sharesByUser, ReadModels.key(share.container, e.userRecordName, e.token), Array(e.participantID.utf8))
            }
            state.status = .statusAccepted
            state.userRecordName = e.userRecordName
            try m.put(txn, m.participants, key, state)
            try m.add(txn, .acceptedParticipants, 1)
            try scheduleZoneTask(
                .createZone, share: share, token: e.token, user: e.userRecordName,
                id: Projector.taskID(position: context.position, index: 0), context, txn)
            try updateShare(e.token, txn) { _ in }

        case .shareMetadataFetched:
            // A fetch changes nothing but the log (it is there for the audit trail).
            break

        case .shareParticipantFetched(let e):
            // A lookup changes nothing but the log, except that a lookup sealed to a forgotten address
            // means the address holds personal data again: it is no longer a forgotten one.
            if let address = e.sealedLookup.address {
                try m.deleteRow(txn, m.addresses, ReadModels.addressKey(context.container, address))
            }

        case .accessRequestsAllowedChanged(let e):
            try updateShare(e.token, txn) { $0.allowsAccessRequests = e.allowed }

        // The requesters and blocked identities are part of the share (CloudKit's CKShare.requesters,
        // blockedIdentities): each change of them is a change of the share and moves its change tag.
        case .accessRequested(let e):
            try changeAccess(e.token, user: e.userRecordName, remove: nil, add: .request, context, txn)

        case .accessRequestDenied(let e):
            try changeAccess(e.token, user: e.userRecordName, remove: .request, add: nil, context, txn)

        case .identityBlocked(let e):
            try changeAccess(e.token, user: e.userRecordName, remove: .request, add: .blocked, context, txn)

        case .identityUnblocked(let e):
            try changeAccess(e.token, user: e.userRecordName, remove: .blocked, add: nil, context, txn)

        case .participantZoneCreated(let e):
            let taskKey = BigEndian.bytes(of: e.taskID)
            guard let task = try m.message(ResidualTaskState.self, txn, m.outbox, taskKey) else { return }
            try txn.delete(m.outbox, key: taskKey)
            try txn.delete(m.workerTasks, key: taskKey)
            let key = ReadModels.sharedZoneKey(task.container, user: task.userRecordName, zoneID: task.zoneID)
            if try m.message(SharedZoneState.self, txn, m.sharedZones, key) == nil {
                var state = SharedZoneState()
                state.ownerName = task.ownerName
                state.zoneName = task.zoneName
                state.createdAtMicros = context.recordedAtMicros
                try m.put(txn, m.sharedZones, key, state)
                try m.add(txn, .participantZones, 1)
            }
            try m.noteZoneChange(
                txn, task.container, user: task.userRecordName, .shared,
                ZoneChangeEntry(ownerName: task.ownerName, zoneName: task.zoneName, position: context.position, deleted: false, zoneID: task.zoneID))

        case .participantZoneRemoved(let e):
            let taskKey = BigEndian.bytes(of: e.taskID)
            guard let task = try m.message(ResidualTaskState.self, txn, m.outbox, taskKey) else { return }
            try txn.delete(m.outbox, key: taskKey)
            try txn.delete(m.workerTasks, key: taskKey)
            let key = ReadModels.sharedZoneKey(task.container, user: task.userRecordName, zoneID: task.zoneID)
            if !e.zoneKept, try txn.delete(m.sharedZones, key: key) {
                try m.add(txn, .participantZones, -1)
                try m.noteZoneChange(
                    txn, task.container, user: task.userRecordName, .shared,
                    ZoneChangeEntry(ownerName: task.ownerName, zoneName: task.zoneName, position: context.position, deleted: true, zoneID: task.zoneID))
            }
        }
    }

    private func updateShare(_ token: String, _ txn: borrowing some ReadModelStore & ~Copyable, _ change: (inout ShareState) -> Void) throws {
        guard var share = try models.share(txn, token) else { return }
        change(&share)
        share.changeTag += 1
        try models.put(txn, models.shares, Array(token.utf8), share)
    }

    /// Deletes `user`'s `rm_access` entry of kind `remove`, writes one of kind `add` (at the event's
    /// time), and moves the share's change tag.
    private func changeAccess(
        _ token: String, user: String, remove: ReadModels.AccessKind?, add: ReadModels.AccessKind?, _ context: Context,
        _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        if let remove { try models.deleteRow(txn, models.access, ReadModels.accessKey(token, remove, user: user)) }
        if let add {
            var state = AccessEntryState()
            state.atMicros = context.recordedAtMicros
            try models.put(txn, models.access, ReadModels.accessKey(token, add, user: user), state)
        }
        try updateShare(token, txn) { _ in }
    }

    /// Moves an invitation's `rm_addresses` entry from the address it went to before (if any) to the
    /// one it goes to now (if any; through the address journal, ``ReadModels/journalAddress(_:position:entry:)``,
    /// whose stale entries the fold and the reads leave out). An invitation sealed to a forgotten
    /// address means the address holds personal data again: it is no longer a forgotten one.
    private func indexInvitation(
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
    private func forget(_ address: AddressHash, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable) throws {
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

    private func deleteVerifications(token: String, participantID: String, _ txn: borrowing some ReadModelStore & ~Copyable) throws {
        let prefix = ReadModels.participantKey(token, participantID) + [0]
        for entry in try models.scan(txn, models.verifications, prefix: prefix) {
            try txn.delete(models.verifications, key: prefix + entry.suffix)
        }
    }

    private func scheduleZoneTask(
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
}

extension Projector.Context {
    /// The context of the event `envelope` holds.
    init(_ envelope: EventEnvelope) {
        self.init(
            position: envelope.position.rawValue, recordedAtMicros: envelope.recordedAtMicros, container: envelope.container,
            actor: envelope.actor)
    }
}
