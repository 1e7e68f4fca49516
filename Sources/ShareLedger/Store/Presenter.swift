import ByteKeys
import EventLog
import Foundation
import LMDB
import SharingDomain

/// Builds the public values (`Share`, `Share.Metadata`, `Record`, `UserIdentity`) from the
/// read models, as one viewer may see them.
struct Presenter: Sendable {
    let models: ReadModels
    /// The host of share URLs.
    let urlHost: String
    /// Identities presented before, reused while their rows are unchanged (nil: none kept).
    var identities: IdentityCache? = nil
    /// Participant rows presented before, reused while unchanged, and share URLs made before,
    /// reused while the title is the same (nil: none kept).
    var participantRows: ParticipantRowCache? = nil
    /// The key store's generation when this presenter was made (before it read anything): what
    /// ``identities`` keeps is built at it.
    var keyGeneration: UInt64 = 0
    /// The generation of kept answers (``ShareTagTracker/generation``), read before the transaction
    /// this presenter reads in began; nil when it was not, and then no participant kept beside its
    /// row (``PresentedParticipantRow/participant``) is used or kept: one built from rows a later
    /// swap replaced must never be given again.
    var answersGeneration: UInt64? = nil

    static func date(_ micros: Int64) -> Date { Date(micros: micros) }

    /// Builds a step's answer (``StepAnswer``) from the read models as `txn` sees them, for the
    /// caller `viewer` in `container`. A row the step wrote but a later command of the same commit
    /// deleted answers with the error of a missing item.
    func present(
        _ answer: StepAnswer, container: String, viewer: String, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws -> StepOutput {
        switch answer {
        case .output(let output):
            return output
        case .user(let name):
            return .user(try identity(txn, container, user: name))
        case .zone(let owner, let zoneName):
            guard let state = try models.zone(txn, container, owner: owner, zone: zoneName) else {
                throw LedgerError(.zoneNotFound, "the zone was saved, but deleted right after")
            }
            return .zone(zone(state, id: RecordZoneID(zoneName: zoneName, ownerName: owner)))
        case .record(let zoneKey, let name, let id):
            guard let state = try models.record(txn, zoneID: zoneKey, name) else {
                throw LedgerError(.unknownItem, "record \(name) was saved, but deleted right after")
            }
            return .record(try record(txn, state, id: id))
        case .share(let token):
            guard let share = try share(txn, token: token, viewer: viewer) else {
                throw LedgerError(.unknownItem, "your change was committed, but the share was deleted right after it")
            }
            return .share(share)
        case .metadata(let token, let fetchRoot, let keys, _):
            return .metadata(try metadata(txn, tokenText: token, container: container, viewer: viewer, fetchRoot: fetchRoot, keys: keys))
        case .lookedUpParticipant(let user, let lookup):
            var identity = try identity(txn, container, user: user)
            identity.lookupInfo = lookup
            return .participant(Share.Participant(lookedUp: identity))
        }
    }

    /// The metadata of the share at `tokenText` as `viewer`, a signed-in user of `container`, sees
    /// it in `txn` (the same rules and errors as a fetch, nothing logged: ``Decider/metadataStanding(_:tokenText:)``):
    /// the answer of a logged fetch, built after its commit, and of ``Container/shareMetadataWithoutLogging(for:)``.
    /// `known`: that standing, when the caller knows it holds in `txn` (the fetch's decision, the
    /// share unchanged since).
    func metadata(
        _ txn: borrowing some ReadModelStore & ~Copyable, tokenText: String, container: String, viewer: String, fetchRoot: Bool,
        keys: [String]?, known: MetadataStanding? = nil
    ) throws -> Share.Metadata {
        let standing: MetadataStanding
        if let known {
            standing = known
        } else {
            let decider = Decider(models: models, container: container, actor: viewer, signedIn: true, now: 0)
            standing = try decider.metadataStanding(txn, tokenText: tokenText)
        }
        let share = standing.share
        let shareValue = try self.share(txn, token: standing.token, state: share, viewer: standing.viewer)
        let zoneID = RecordZoneID(zoneName: share.zoneName, ownerName: share.ownerName)
        var rootRecord: Record?
        let rootID = share.rootRecordName.isEmpty ? nil : RecordID(recordName: share.rootRecordName, zoneID: zoneID)
        if fetchRoot, let rootID, let state = try models.record(txn, zoneID: share.zoneID, share.rootRecordName) {
            rootRecord = try record(txn, state, id: rootID, desiredKeys: keys)
        }
        return Share.Metadata(
            share: shareValue, containerIdentifier: share.container,
            ownerIdentity: try identity(txn, share.container, user: share.ownerName),
            hierarchicalRootRecordID: rootID, rootRecord: rootRecord, participantRole: standing.role,
            participantStatus: standing.status, participantPermission: standing.permission, oneTimeToken: standing.oneTimeToken)
    }

    /// The identity of account `user`: its name components, when it gave any; with `withAddress`,
    /// the email address it registered (else its phone number) as the lookup info, otherwise its
    /// user record id. A forgotten user shows erased, with neither. Reused from ``identities``
    /// while the account's row has the bytes it was built from.
    func identity(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, user: String, withAddress: Bool = false)
        throws -> UserIdentity
    {
        try registeredIdentity(txn, container, user: user, withAddress: withAddress).identity
    }

    /// ``identity(_:_:user:withAddress:)``, and whether the account's row was found.
    private func registeredIdentity(
        _ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, user: String, withAddress: Bool = false
    ) throws -> (identity: UserIdentity, found: Bool) {
        var key = ReadModels.userKey(container, user)
        guard let identities, ReadModels.isStorable(key) else {
            let state = try models.user(txn, container, user)
            return (identity(of: state, container, user: user, withAddress: withAddress), state != nil)
        }
        // The cache's key: the row's key and the address flag (the row is read by all but the flag).
        key.append(withAddress ? 1 : 0)
        let cacheKey = IdentityCache.Key(bytes: key)
        let found = try key.withUnsafeBytes { keyBytes in
            try txn.withValue(models.users, key: UnsafeRawBufferPointer(rebasing: keyBytes.dropLast())) { row -> UserIdentity in
                if let kept = identities.value(cacheKey, row: row, generation: keyGeneration) { return kept }
                let state = try UserState.decodeStored(row, database: models.users.name)
                let built = identity(of: state, container, user: user, withAddress: withAddress)
                identities.keep(cacheKey, row: row, generation: keyGeneration, built)
                return built
            }
        }
        return found.map { ($0, true) } ?? (identity(of: nil, container, user: user, withAddress: withAddress), false)
    }

    /// The identity of account `user` whose row is `state` (nil: no row).
    private func identity(of state: UserState?, _ container: String, user: String, withAddress: Bool) -> UserIdentity {
        var names: PersonNameComponents?
        var erased = false
        var lookup = LookupInfo(userRecordID: RecordID(userRecordName: user))
        if let state {
            // Sealed rows are opened here, at answer time: the row itself holds only ciphertext.
            let personal = models.personalFields(of: state, container: container)
            erased = personal.erased
            if withAddress, let fields = personal.fields {
                if !fields.emailAddress.isEmpty {
                    lookup = LookupInfo(emailAddress: fields.emailAddress)
                } else if !fields.phoneNumber.isEmpty {
                    lookup = LookupInfo(phoneNumber: fields.phoneNumber)
                }
            }
            if let name = personal.fields?.name,
                !(name.givenName.isEmpty && name.familyName.isEmpty && name.middleName.isEmpty && name.nickname.isEmpty)
            {
                var components = PersonNameComponents()
                if !name.givenName.isEmpty { components.givenName = name.givenName }
                if !name.familyName.isEmpty { components.familyName = name.familyName }
                if !name.middleName.isEmpty { components.middleName = name.middleName }
                if !name.nickname.isEmpty { components.nickname = name.nickname }
                names = components
            }
        }
        var identity = UserIdentity(
            userRecordID: RecordID(userRecordName: user), lookupInfo: lookup, nameComponents: names, hasiCloudAccount: true)
        identity.personalDataErased = erased ? true : nil
        return identity
    }

    /// A participant as answers show it, from its row (decoded, its address opened).
    func participant(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, id: String, _ row: PresentedParticipantRow)
        throws -> Share.Participant
    {
        if let kept = row.participant(answersGeneration: answersGeneration) { return kept }
        return try builtParticipant(txn, container, id: id, row).value
    }

    /// The participant of `row` built from the read models, and whether it may be kept beside the
    /// row: not when the row names a user whose account was not found.
    private func builtParticipant(
        _ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, id: String, _ row: PresentedParticipantRow
    ) throws -> (value: Share.Participant, keepable: Bool) {
        let state = row.state
        var identity: UserIdentity
        var keepable = true
        if state.userRecordName.isEmpty {
            identity = UserIdentity(userRecordID: nil, lookupInfo: row.lookupInfo, nameComponents: nil, hasiCloudAccount: false)
        } else {
            (identity, keepable) = try registeredIdentity(txn, container, user: state.userRecordName)
            if let lookup = row.lookupInfo { identity.lookupInfo = lookup }
        }
        if row.erased { identity.personalDataErased = true }
        let participant = Share.Participant(
            participantID: id, userIdentity: identity, role: state.role.role, permission: state.permission.permission,
            acceptanceStatus: state.status.status, dateAddedToShare: Presenter.date(state.addedAtMicros),
            isApprovedRequester: state.approvedRequester)
        return (participant, keepable)
    }

    /// `state` as answers show it: a sealed invitation's address is opened here, at answer time;
    /// erased once it was forgotten.
    private func presentedRow(_ state: ParticipantState, container: String) -> PresentedParticipantRow {
        let (lookup, erased) = models.lookup(of: state, container: container)
        return PresentedParticipantRow(container: container, state: state, lookupInfo: lookup.lookupInfo, erased: erased)
    }

    /// Every participant row of share `token` (removed ones included), by participant id, in key
    /// order; reused from ``participantRows`` while a row has the bytes it was presented from, and
    /// kept there (with the share's URL kept before, if any).
    private func participants(_ txn: borrowing some ReadModelStore & ~Copyable, token: String, container: String) throws
        -> (rows: [ParticipantRowCache.Row], url: ParticipantRowCache.KeptURL?)
    {
        guard let participantRows else {
            let rows = try models.participants(txn, token).map { entry in
                ParticipantRowCache.Row(
                    id: entry.id, idBytes: [], bytes: [], presented: presentedRow(entry.state, container: container))
            }
            return (rows, nil)
        }
        let prefixCount = token.utf8.count
        let kept = participantRows.entry(of: token, generation: keyGeneration)
        let previous = kept?.rows ?? []
        var next = previous.startIndex
        var changed = previous.isEmpty
        var out: [ParticipantRowCache.Row] = []
        out.reserveCapacity(previous.count + 1)
        // A row read from `value` (its bytes kept with it), with its id given or read from `idBytes`.
        func presented(_ value: UnsafeRawBufferPointer, id: String?, idBytes: UnsafeRawBufferPointer) throws -> ParticipantRowCache.Row {
            ParticipantRowCache.Row(
                id: id ?? String(decoding: idBytes, as: UTF8.self), idBytes: Array(idBytes.bindMemory(to: UInt8.self)),
                bytes: Array(value.bindMemory(to: UInt8.self)),
                presented: presentedRow(try ParticipantState.decodeStored(value, database: models.participants.name), container: container))
        }
        try models.visit(txn, models.participants, prefix: Array(token.utf8)) { key, value in
            let idBytes = UnsafeRawBufferPointer(rebasing: key[prefixCount...])
            // In step with the rows kept: those whose id sorts before this row's are gone.
            while next < previous.endIndex, KeyOrder.compare(previous[next].idBytes, idBytes) < 0 {
                next += 1
                changed = true
            }
            var row: ParticipantRowCache.Row
            if next < previous.endIndex, KeyOrder.compare(previous[next].idBytes, idBytes) == 0 {
                row = previous[next]
                next += 1
                if KeyOrder.compare(row.bytes, value) != 0 || row.presented.container != container {
                    row = try presented(value, id: row.id, idBytes: idBytes)
                    changed = true
                }
            } else {
                row = try presented(value, id: nil, idBytes: idBytes)
                changed = true
            }
            // The participant as answers show it, kept beside the row (see `answersGeneration`).
            if let answersGeneration, !row.presented.keepsParticipant(answersGeneration: answersGeneration) {
                let built = try builtParticipant(txn, container, id: row.id, row.presented)
                if built.keepable {
                    row = ParticipantRowCache.Row(
                        id: row.id, idBytes: row.idBytes, bytes: row.bytes,
                        presented: row.presented.keeping(built.value, answersGeneration: answersGeneration))
                    changed = true
                }
            }
            out.append(row)
            return true
        }
        if changed || next != previous.endIndex { participantRows.keep(token, generation: keyGeneration, out, url: kept?.url) }
        return (out, kept?.url)
    }

    /// The share as `viewer` may see it: the owner and accepted administrators see every participant;
    /// everyone else sees the owner, the accepted participants and themselves.
    func share(_ txn: borrowing some ReadModelStore & ~Copyable, token: String, viewer: String?) throws -> Share? {
        guard let state = try models.share(txn, token) else { return nil }
        return try share(txn, token: token, state: state, viewer: viewer)
    }

    func share(_ txn: borrowing some ReadModelStore & ~Copyable, token: String, state: ShareState, viewer: String?) throws -> Share {
        let (all, keptURL) = try participants(txn, token: token, container: state.container)
        // The viewer's row is one of `all`: only its id is looked up. The owner's is the share's owner
        // participant (no event gives the owner another), found without the lookup when its row says so.
        // Rows are told apart by their place in `all` (ids are unique in a share): one comparison of
        // ids per row to find the owner's, none in the loop below.
        let ownerIndex = all.firstIndex(where: { $0.id == state.ownerParticipantID })
        var viewerIndex: Int?
        if let viewer, viewer == state.ownerName, let ownerIndex,
            all[ownerIndex].presented.state.role == .owner, all[ownerIndex].presented.state.userRecordName == viewer
        {
            viewerIndex = ownerIndex
        } else if let viewer, let id = try models.participantID(txn, state.container, user: viewer, token: token) {
            viewerIndex = all.firstIndex(where: { $0.id == id })
        }
        let seesAll =
            viewerIndex.map {
                all[$0].presented.state.role == .owner
                    || (all[$0].presented.state.role == .administrator && all[$0].presented.state.status == .statusAccepted)
            } ?? false
        var visible: [Share.Participant] = []
        visible.reserveCapacity(all.count)
        var owner: Share.Participant?
        var current: Share.Participant?
        for (index, entry) in all.enumerated() {
            let (id, row) = (entry.id, entry.presented)
            let status = row.state.status
            let isViewer = index == viewerIndex
            let isOwner = index == ownerIndex
            let shown = seesAll || isOwner || (isViewer && status != .statusRemoved) || status == .statusAccepted
            guard shown || isViewer else { continue }
            let value = try participant(txn, state.container, id: id, row)
            if isOwner { owner = value }
            if isViewer { current = value }
            if shown { visible.append(value) }
        }
        guard let owner, let parsed = ShareToken(token) else {
            throw LedgerError(.corruptedData, "share \(token) has no owner participant; run `share-ledger audit`")
        }
        let zoneID = RecordZoneID(zoneName: state.zoneName, ownerName: state.ownerName)
        let root = state.rootRecordName.isEmpty ? nil : RecordID(recordName: state.rootRecordName, zoneID: zoneID)
        // Sealed since crypto-shredding: opened here; empty once the owner was forgotten.
        let title = models.title(of: state).title
        var share = Share(
            recordID: RecordID(recordName: state.shareRecordName, zoneID: zoneID),
            containerIdentifier: state.container,
            url: shareURL(parsed, title: title, kept: keptURL, rows: all),
            token: parsed, title: title.isEmpty ? nil : title,
            publicPermission: state.publicPermission.permission,
            participants: visible, owner: owner, currentUserParticipant: current,
            hierarchicalRootRecordID: root, recordChangeTag: String(state.changeTag),
            creationDate: Presenter.date(state.createdAtMicros))
        share.allowsAccessRequests = state.allowsAccessRequests
        if seesAll {
            // Requests and blocks are the managers' business: nobody else sees who asked or who is blocked.
            // A requester comes with a way to reach them (CloudKit returns each "with name components and
            // either an email or phone number"), opened from the sealed row for this answer only.
            let entries = try models.accessEntries(txn, token)
            share.requesters = try entries.requests.map { entry in
                Share.AccessRequester(
                    userIdentity: try identity(txn, state.container, user: entry.user, withAddress: true),
                    participantLookupInfo: LookupInfo(userRecordID: RecordID(userRecordName: entry.user)))
            }
            share.blockedIdentities = try entries.blocked.map { entry in
                Share.BlockedIdentity(userIdentity: try identity(txn, state.container, user: entry.user))
            }
            for entry in all where !entry.presented.state.oneTimeToken.isEmpty {
                if let oneTime = ShareToken(entry.presented.state.oneTimeToken),
                    let url = ShareURL.make(host: urlHost, token: oneTime, title: title)
                {
                    share.oneTimeURLs.append(Share.OneTimeURL(participantID: entry.id, url: url))
                }
            }
        }
        return share
    }

    /// The URL of share `token` with `title`: `kept` (kept with the share's rows, ``participants``)
    /// while the title is the one it was made with, else made and kept with `rows`, the share's rows
    /// as this answer presented them.
    private func shareURL(_ token: ShareToken, title: String, kept: ParticipantRowCache.KeptURL?, rows: [ParticipantRowCache.Row])
        -> URL
    {
        if let kept, kept.title == title { return kept.url }
        // `make` gives nil only for a host no URL can hold, which the configuration refuses.
        let made = ShareURL.make(host: urlHost, token: token, title: title)!
        participantRows?.keep(token.text, generation: keyGeneration, rows, url: (title, made))
        return made
    }

    func record(
        _ txn: borrowing some ReadModelStore & ~Copyable, _ state: RecordState, id: RecordID, desiredKeys: [String]? = nil
    ) throws -> Record {
        var record = Record(recordType: state.recordType, recordID: id)
        let wanted = desiredKeys.map(Set.init)
        for field in state.fields where wanted?.contains(field.key) ?? true {
            record.fields[field.key] = FieldValue(field.value, zoneID: id.zoneID)
        }
        if !state.parentRecordName.isEmpty {
            record.parent = RecordID(recordName: state.parentRecordName, zoneID: id.zoneID)
        }
        if !state.shareToken.isEmpty, let share = try models.share(txn, state.shareToken) {
            record.share = RecordID(recordName: share.shareRecordName, zoneID: id.zoneID)
        }
        record.recordChangeTag = String(state.changeTag)
        record.creationDate = Presenter.date(state.createdAtMicros)
        record.modificationDate = Presenter.date(state.modifiedAtMicros)
        record.lastModifiedUserRecordID = state.lastModifiedBy.isEmpty ? nil : RecordID(userRecordName: state.lastModifiedBy)
        record.creatorUserRecordID = state.createdBy.isEmpty ? nil : RecordID(userRecordName: state.createdBy)
        return record
    }

    func zone(_ state: ZoneState, id: RecordZoneID) -> RecordZone { RecordZone(state, id: id) }
}

