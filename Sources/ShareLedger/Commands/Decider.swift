import Foundation
import LMDB
import SwiftProtobuf

/// Decides domain steps: checks every rule of CloudKit's sharing model against the read models and
/// returns the events to append, or the error of a refused step. It writes nothing: the writer
/// appends the events and the ``Projector`` applies them.
///
/// Errors it returns are ``LedgerError`` values (the step is refused, nothing is written for it);
/// anything else it throws is a storage failure that aborts the whole transaction.
struct Decider {
    let models: ReadModels
    let presenter: Presenter
    /// The container the command runs in.
    let container: String
    /// The acting user's record name.
    let actor: String
    /// Whether the actor is signed in (has an account in the container).
    let signedIn: Bool
    /// The time of the commit, in microseconds.
    let now: Int64

    static let shareNotFound = "Share not found: the URL is unknown, or its share was deleted, or it is not shared with you"
    /// The answer about a record in another user's zone that the caller may not see, whether it
    /// exists or not: the same text either way, so that it tells nothing.
    static let recordNotShared = "the record does not exist, or is not shared with you"

    // MARK: - Limits

    enum Limits {
        static let maxContainerBytes = 128
        static let maxUserNameBytes = 64
        static let maxZoneNameBytes = 120
        static let maxRecordNameBytes = 255
        static let maxRecordTypeBytes = 255
        static let maxFieldKeyBytes = 255
        static let maxTitleBytes = 512
        static let maxParticipants = 100
        static let maxLookupBytes = 254
    }

    static func checkUserName(_ name: String) throws(LedgerError) {
        let bytes = name.utf8
        guard !bytes.isEmpty, bytes.count <= Limits.maxUserNameBytes,
            bytes.allSatisfy({ b in
                (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F || b == 0x2E
                    || b == 0x2D || b == 0x40 || b == 0x2B
            })
        else {
            throw LedgerError(
                .invalidArguments, "\"\(name.prefix(80))\" is not a valid user record name: use 1 to "
                    + "\(Limits.maxUserNameBytes) characters of A-Z a-z 0-9 _ . - @ +")
        }
    }

    static func checkName(_ name: String, _ what: String, max: Int) throws(LedgerError) {
        let count = name.utf8.count
        guard count > 0, count <= max, !name.utf8.contains(0) else {
            throw LedgerError(
                .invalidArguments, "the \(what) \"\(name.prefix(80))\" is not valid: it must have 1 to \(max) bytes and no NUL")
        }
    }

    static func checkContainer(_ container: String) throws(LedgerError) {
        try checkName(container, "container identifier", max: Limits.maxContainerBytes)
    }

    // MARK: - Entry point

    func decide(_ action: DomainAction, _ txn: borrowing Transaction) throws -> Decision {
        do {
            switch action {
            case .registerUser(let name, let email, let phone, let names):
                return try registerUser(txn, name: name, email: email, phone: phone, names: names)
            case .saveZone(let id, let capabilities):
                return try saveZone(txn, id, capabilities: capabilities)
            case .deleteZone(let id):
                return try deleteZone(txn, id)
            case .saveRecord(let record):
                return try saveRecord(txn, record)
            case .deleteRecord(let id):
                return try deleteRecord(txn, id)
            case .createShare(let creation):
                return try createShare(txn, creation)
            case .addParticipant(let token, let lookup, let role, let permission, let newID, let tag):
                return try addParticipant(
                    txn, token: token, lookup: lookup, role: role, permission: permission, newID: newID, tag: tag)
            case .updateParticipant(let token, let id, let role, let permission, let tag):
                return try updateParticipant(txn, token: token, id: id, role: role, permission: permission, tag: tag)
            case .removeParticipant(let token, let id, let tag):
                return try removeParticipant(txn, token: token, id: id, tag: tag)
            case .leaveShare(let token):
                return try leaveShare(txn, token: token)
            case .setPublicPermission(let token, let permission, let tag):
                return try setPublicPermission(txn, token: token, permission: permission, tag: tag)
            case .setTitle(let token, let title, let tag):
                return try setTitle(txn, token: token, title: title, tag: tag)
            case .deleteShare(let token, let tag):
                return try deleteShare(txn, token: token, tag: tag)
            case .fetchMetadata(let text, let fetchRoot, let keys):
                return try fetchMetadata(txn, tokenText: text, fetchRoot: fetchRoot, keys: keys)
            case .accept(let token, let metadataContainer, let newID):
                return try accept(txn, token: token, metadataContainer: metadataContainer, newID: newID)
            case .requestVerification(let token, let lookup, let hash, let expires):
                return try requestVerification(txn, token: token, lookup: lookup, hash: hash, expires: expires)
            case .verify(let token, let hash):
                return try verify(txn, token: token, hash: hash)
            case .completeTask(let id):
                return try completeTask(txn, id: id)
            }
        } catch let error as LedgerError {
            return Decision(events: [], outcome: .failed(error))
        }
    }

    // MARK: - Helpers

    private func requireSignedIn(_ txn: borrowing Transaction) throws {
        guard signedIn, try models.user(txn, container, actor) != nil else {
            throw LedgerError(
                .notAuthenticated, "no signed-in user: register the user in container \(container) and act as that user")
        }
    }

    /// The zone owner a caller means: `__defaultOwner__` is the caller.
    private func owner(of zoneID: RecordZoneID) -> String {
        zoneID.ownerName == RecordZoneID.defaultOwnerName ? actor : zoneID.ownerName
    }

    private func liveShare(_ txn: borrowing Transaction, _ token: String) throws -> ShareState {
        guard ShareToken(token) != nil, let share = try models.share(txn, token), share.container == container else {
            throw LedgerError(.unknownItem, Decider.shareNotFound)
        }
        return share
    }

    private func checkTag(_ share: ShareState, _ tag: String?) throws {
        if let tag, tag != String(share.changeTag) {
            throw LedgerError(
                .serverRecordChanged, "the share changed since you read it (change tag \(tag), now \(share.changeTag)); "
                    + "fetch it again and redo your change")
        }
    }

    /// The actor's entry in the share, if not removed.
    private func activeEntry(_ txn: borrowing Transaction, _ share: ShareState, _ token: String) throws
        -> (id: String, state: ParticipantState)?
    {
        guard let entry = try models.participant(txn, of: actor, in: share, token: token),
            entry.state.status != .statusRemoved
        else { return nil }
        return entry
    }

    /// The actor must be the owner or an accepted administrator. Non-participants learn nothing.
    private func requireManager(_ txn: borrowing Transaction, _ share: ShareState, _ token: String, ownerOnly: Bool = false)
        throws
    {
        guard let entry = try activeEntry(txn, share, token) else {
            throw LedgerError(.unknownItem, Decider.shareNotFound)
        }
        let isOwner = entry.state.role == .owner
        let isAdmin = entry.state.role == .administrator && entry.state.status == .statusAccepted
        guard isOwner || (!ownerOnly && isAdmin) else {
            throw LedgerError(
                .permissionFailure, ownerOnly
                    ? "only the share's owner may do this"
                    : "only the share's owner or an administrator may change its participants")
        }
    }

    /// Whether anyone with the URL may join: only for the two permissions that grant something. An
    /// unknown value in a stored share (a damaged row, a forged import) keeps the share private.
    static func isPublic(_ permission: PBPermission) -> Bool {
        permission == .readOnly || permission == .readWrite
    }

    private func shareOutput(_ token: String) -> Presentation {
        let presenter = self.presenter
        let actor = self.actor
        return { txn in
            guard let share = try presenter.share(txn, token: token, viewer: actor) else {
                throw LedgerError(.unknownItem, "your change was committed, but the share was deleted right after it")
            }
            return .share(share)
        }
    }

    private func event(_ stream: String, _ event: DomainEvent) -> PendingEvent { PendingEvent(stream: stream, event: event) }

    // MARK: - Users

    private func registerUser(
        _ txn: borrowing Transaction, name: String, email: String?, phone: String?, names: PersonNameComponents?
    ) throws -> Decision {
        try Decider.checkUserName(name)
        try Decider.checkContainer(container)
        guard try models.user(txn, container, name) == nil else {
            throw LedgerError(.invalidArguments, "user \(name) is already registered in \(container)")
        }
        var e = Shareledger_Events_V1_UserRegistered()
        e.userRecordName = name
        if let email, !email.isEmpty {
            try Decider.checkName(email, "email address", max: Limits.maxLookupBytes)
            guard email.contains("@") else { throw LedgerError(.invalidArguments, "\"\(email)\" is not an email address") }
            if let other = try models.userName(txn, container, email: email) {
                throw LedgerError(.invalidArguments, "the email \(email) belongs to user \(other) already")
            }
            e.emailAddress = email
        }
        if let phone, !phone.isEmpty {
            try Decider.checkName(phone, "phone number", max: 32)
            guard ReadModels.normalizePhone(phone).count >= 3 else {
                throw LedgerError(.invalidArguments, "\"\(phone)\" is not a phone number")
            }
            if let other = try models.userName(txn, container, phone: phone) {
                throw LedgerError(.invalidArguments, "the phone number \(phone) belongs to user \(other) already")
            }
            e.phoneNumber = phone
        }
        if let names {
            e.name.givenName = String((names.givenName ?? "").prefix(100))
            e.name.familyName = String((names.familyName ?? "").prefix(100))
            e.name.middleName = String((names.middleName ?? "").prefix(100))
            e.name.nickname = String((names.nickname ?? "").prefix(100))
            if e.name == Shareledger_Events_V1_PersonName() { e.clearName() }
        }
        let presenter = self.presenter
        let container = self.container
        return .output([event(Streams.user(name), .userRegistered(e))]) { txn in
            .user(try presenter.identity(txn, container, user: name))
        }
    }

    // MARK: - Zones and records

    private func saveZone(_ txn: borrowing Transaction, _ id: RecordZoneID, capabilities: UInt32) throws -> Decision {
        try requireSignedIn(txn)
        let owner = owner(of: id)
        guard owner == actor else {
            throw LedgerError(.badDatabase, "zones can be created only in your own private database, not in \(owner)'s")
        }
        try Decider.checkName(id.zoneName, "zone name", max: Limits.maxZoneNameBytes)
        guard id.zoneName != RecordZoneID.defaultZoneName else {
            throw LedgerError(.invalidArguments, "the default zone cannot be saved; create a custom zone for shared records")
        }
        let zoneID = RecordZoneID(zoneName: id.zoneName, ownerName: owner)
        if let existing = try models.zone(txn, container, owner: owner, zone: id.zoneName) {
            return .output(.zone(presenter.zone(existing, id: zoneID)))
        }
        var e = Shareledger_Events_V1_ZoneCreated()
        e.ownerName = owner
        e.zoneName = id.zoneName
        e.capabilities = capabilities & 0xF
        let presenter = self.presenter
        let container = self.container
        return .output([event(Streams.zone(owner: owner, zone: id.zoneName), .zoneCreated(e))]) { txn in
            guard let state = try presenter.models.zone(txn, container, owner: owner, zone: id.zoneName) else {
                throw LedgerError(.zoneNotFound, "the zone was saved, but deleted right after")
            }
            return .zone(presenter.zone(state, id: zoneID))
        }
    }

    private func deleteZone(_ txn: borrowing Transaction, _ id: RecordZoneID) throws -> Decision {
        try requireSignedIn(txn)
        let owner = owner(of: id)
        guard owner == actor else {
            throw LedgerError(.badDatabase, "only the owner deletes a zone; to stop seeing a shared zone, leave its share")
        }
        guard let zone = try models.zone(txn, container, owner: owner, zone: id.zoneName) else {
            throw LedgerError(.zoneNotFound, "zone \(id.zoneName) does not exist")
        }
        var events: [PendingEvent] = []
        for token in try models.shareTokens(txn, container, owner: owner) {
            guard let share = try models.share(txn, token), share.zoneID == zone.zoneID else { continue }
            var deleted = Shareledger_Events_V1_ShareDeleted()
            deleted.token = token
            deleted.cause = .zoneDeleted
            events.append(event(Streams.share(token), .shareDeleted(deleted)))
        }
        var e = Shareledger_Events_V1_ZoneDeleted()
        e.ownerName = owner
        e.zoneName = id.zoneName
        events.append(event(Streams.zone(owner: owner, zone: id.zoneName), .zoneDeleted(e)))
        return .output(events, .none)
    }

    /// Whether `name` or any record below it is the root of a live share.
    private func subtreeHasShare(_ txn: borrowing Transaction, zoneID: UInt64, _ name: String) throws -> Bool {
        var stack = [name]
        var seen = Set<String>()
        while let next = stack.popLast() {
            guard seen.insert(next).inserted else { continue }
            if let state = try models.record(txn, zoneID: zoneID, next), !state.shareToken.isEmpty { return true }
            stack.append(contentsOf: try models.children(txn, zoneID: zoneID, of: next))
        }
        return false
    }

    /// Whether a record up the chain from `name` (itself included) is the root of a live share.
    private func ancestorHasShare(_ txn: borrowing Transaction, zoneID: UInt64, _ name: String) throws -> Bool {
        var current: String? = name
        var seen = Set<String>()
        while let next = current, !next.isEmpty, seen.insert(next).inserted {
            guard let state = try models.record(txn, zoneID: zoneID, next) else { return false }
            if !state.shareToken.isEmpty { return true }
            current = state.parentRecordName
        }
        return false
    }

    /// For a write by someone other than the zone's owner: the writer must be an accepted participant
    /// with read-write permission of the share that covers the record.
    private func requireWriteAccess(_ txn: borrowing Transaction, zone: ZoneState, coveringFrom name: String?) throws {
        guard let token = try models.coveringShare(txn, zone: zone, from: name), let share = try models.share(txn, token),
            let entry = try models.participant(txn, of: actor, in: share, token: token),
            entry.state.status == .statusAccepted
        else {
            throw LedgerError(.unknownItem, Decider.recordNotShared)
        }
        guard entry.state.permission == .readWrite else {
            throw LedgerError(.permissionFailure, "your permission on this share is \(entry.state.permission.permission); "
                + "changing shared records needs readWrite")
        }
    }

    private func saveRecord(_ txn: borrowing Transaction, _ record: Record) throws -> Decision {
        try requireSignedIn(txn)
        let owner = owner(of: record.recordID.zoneID)
        let zoneName = record.recordID.zoneID.zoneName
        let name = record.recordID.recordName
        try Decider.checkName(name, "record name", max: Limits.maxRecordNameBytes)
        try Decider.checkName(record.recordType, "record type", max: Limits.maxRecordTypeBytes)
        guard record.recordType != Share.recordType else {
            throw LedgerError(.invalidArguments, "shares are created with the share calls, not saved as records")
        }
        guard let zone = try models.zone(txn, container, owner: owner, zone: zoneName) else {
            throw LedgerError(.zoneNotFound, "zone \(zoneName) of \(owner) does not exist; save the zone first")
        }
        let existing = try models.record(txn, zoneID: zone.zoneID, name)
        if owner != actor {
            let current = existing != nil ? name : record.parent?.recordName
            try requireWriteAccess(txn, zone: zone, coveringFrom: current)
            // The record must stay in the share the participant may write: no moving it out (or in).
            let before = try models.coveringShare(txn, zone: zone, from: current)
            let after: String?
            if let existing, !existing.shareToken.isEmpty {
                after = existing.shareToken
            } else {
                after = try models.coveringShare(txn, zone: zone, from: record.parent?.recordName)
            }
            guard before == after else {
                throw LedgerError(.permissionFailure, "a participant cannot move a record out of the share it belongs to")
            }
        }
        if let existing {
            guard let tag = record.recordChangeTag, tag == String(existing.changeTag) else {
                throw LedgerError(
                    .serverRecordChanged, "record \(name) changed on the server (change tag \(existing.changeTag), yours "
                        + "\(record.recordChangeTag ?? "none")); fetch it, apply your change, and save again")
            }
            guard existing.recordType == record.recordType else {
                throw LedgerError(.invalidArguments, "record \(name) is a \(existing.recordType); its type cannot change")
            }
        } else if record.recordChangeTag != nil {
            throw LedgerError(.unknownItem, "record \(name) does not exist (it may have been deleted); save it without a change tag")
        }
        var bytes = 0
        for (key, value) in record.fields {
            try Decider.checkName(key, "field key", max: Limits.maxFieldKeyBytes)
            bytes += key.utf8.count + value.approximateBytes
            if case .reference(let target) = value, target.zoneID.zoneName != zoneName {
                throw LedgerError(.invalidArguments, "field \(key) refers to a record in another zone")
            }
        }
        guard bytes <= Record.maxFieldBytes else {
            throw LedgerError(.limitExceeded, "record \(name) holds \(bytes) bytes of fields; the limit is \(Record.maxFieldBytes)")
        }
        var parentName = ""
        if let parent = record.parent {
            guard parent.zoneID.zoneName == zoneName, self.owner(of: parent.zoneID) == owner else {
                throw LedgerError(.invalidArguments, "the parent of \(name) must be in the same zone")
            }
            guard parent.recordName != name else {
                throw LedgerError(.invalidArguments, "record \(name) cannot be its own parent")
            }
            guard try models.record(txn, zoneID: zone.zoneID, parent.recordName) != nil else {
                throw LedgerError(.referenceViolation, "the parent record \(parent.recordName) does not exist; save it first")
            }
            // No cycles: the parent's chain must not lead back to this record.
            var current: String? = parent.recordName
            var seen = Set<String>()
            while let next = current, !next.isEmpty, seen.insert(next).inserted {
                guard next != name else {
                    throw LedgerError(.invalidArguments, "making \(parent.recordName) the parent of \(name) would form a cycle")
                }
                current = try models.record(txn, zoneID: zone.zoneID, next)?.parentRecordName
            }
            parentName = parent.recordName
            if parentName != existing?.parentRecordName,
                try ancestorHasShare(txn, zoneID: zone.zoneID, parentName),
                try subtreeHasShare(txn, zoneID: zone.zoneID, name)
            {
                throw LedgerError(
                    .alreadyShared, "record \(name) (or a record below it) is shared already, and \(parentName) is in "
                        + "another share; a record belongs to at most one share")
            }
        }
        var e = Shareledger_Events_V1_RecordSaved()
        e.ownerName = owner
        e.zoneName = zoneName
        e.recordName = name
        e.recordType = record.recordType
        e.fields = record.fields.sorted { $0.key < $1.key }.map { key, value in
            var field = PBField()
            field.key = key
            field.value = value.message
            return field
        }
        e.parentRecordName = parentName
        e.changeTag = (existing?.changeTag ?? 0) + 1
        e.created = existing == nil
        let presenter = self.presenter
        let id = RecordID(recordName: name, zoneID: RecordZoneID(zoneName: zoneName, ownerName: owner))
        let zoneKey = zone.zoneID
        return .output([event(Streams.zone(owner: owner, zone: zoneName), .recordSaved(e))]) { txn in
            guard let state = try presenter.models.record(txn, zoneID: zoneKey, name) else {
                throw LedgerError(.unknownItem, "record \(name) was saved, but deleted right after")
            }
            return .record(try presenter.record(txn, state, id: id))
        }
    }

    private func deleteRecord(_ txn: borrowing Transaction, _ id: RecordID) throws -> Decision {
        try requireSignedIn(txn)
        let owner = owner(of: id.zoneID)
        guard let zone = try models.zone(txn, container, owner: owner, zone: id.zoneID.zoneName) else {
            throw LedgerError(.zoneNotFound, "zone \(id.zoneID.zoneName) of \(owner) does not exist")
        }
        guard let state = try models.record(txn, zoneID: zone.zoneID, id.recordName) else {
            // In another user's zone, a missing record answers as one not shared with the caller.
            throw LedgerError(.unknownItem, owner == actor ? "record \(id.recordName) does not exist" : Decider.recordNotShared)
        }
        if owner != actor {
            try requireWriteAccess(txn, zone: zone, coveringFrom: id.recordName)
            guard state.shareToken.isEmpty else {
                throw LedgerError(.permissionFailure, "only the owner may delete the root record of a share")
            }
        }
        var events: [PendingEvent] = []
        if !state.shareToken.isEmpty {
            var deleted = Shareledger_Events_V1_ShareDeleted()
            deleted.token = state.shareToken
            deleted.cause = .rootDeleted
            events.append(event(Streams.share(state.shareToken), .shareDeleted(deleted)))
        }
        var e = Shareledger_Events_V1_RecordDeleted()
        e.ownerName = owner
        e.zoneName = id.zoneID.zoneName
        e.recordName = id.recordName
        events.append(event(Streams.zone(owner: owner, zone: id.zoneID.zoneName), .recordDeleted(e)))
        return .output(events, .none)
    }

    // MARK: - Shares

    private func createShare(_ txn: borrowing Transaction, _ c: ShareCreation) throws -> Decision {
        try requireSignedIn(txn)
        let owner = owner(of: c.zoneID)
        guard owner == actor else {
            throw LedgerError(.badDatabase, "shares are created in the owner's private database; only \(owner) can share this zone")
        }
        guard c.publicPermission != .unknown else {
            throw LedgerError(.invalidArguments, "the public permission must be none, readOnly or readWrite")
        }
        guard c.title.utf8.count <= Limits.maxTitleBytes else {
            throw LedgerError(.invalidArguments, "the title is longer than \(Limits.maxTitleBytes) bytes")
        }
        guard let zone = try models.zone(txn, container, owner: owner, zone: c.zoneID.zoneName) else {
            throw LedgerError(.zoneNotFound, "zone \(c.zoneID.zoneName) does not exist; save the zone first")
        }
        let capabilities = RecordZone.Capabilities(rawValue: zone.capabilities)
        var token = c.tokenCandidate
        var shareRecordName = c.shareRecordName
        if let root = c.rootRecordName {
            guard capabilities.contains(.sharing) else {
                throw LedgerError(.invalidArguments, "zone \(c.zoneID.zoneName) does not have the sharing capability")
            }
            guard zone.zoneShareToken.isEmpty else {
                throw LedgerError(
                    .serverRejectedRequest, "zone \(c.zoneID.zoneName) is shared as a whole; a hierarchy in it cannot be shared too")
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
            if !record.lastShareToken.isEmpty { token = record.lastShareToken }
        } else {
            guard capabilities.contains(.zoneWideSharing) else {
                throw LedgerError(.invalidArguments, "zone \(c.zoneID.zoneName) does not have the zoneWideSharing capability")
            }
            guard zone.zoneShareToken.isEmpty else {
                throw LedgerError(.serverRecordChanged, "zone \(c.zoneID.zoneName) is shared already (record to insert already exists)")
            }
            guard zone.hierarchyShareCount == 0 else {
                throw LedgerError(
                    .invalidArguments, "zone \(c.zoneID.zoneName) holds shared hierarchies; delete those shares before sharing the zone")
            }
            if !zone.lastZoneShareToken.isEmpty { token = zone.lastZoneShareToken }
            shareRecordName = Share.zoneWideShareRecordName
        }
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

    private func addParticipant(
        _ txn: borrowing Transaction, token: String, lookup: LookupInfo, role: Share.Participant.Role,
        permission: Share.Participant.Permission, newID: String, tag: String?
    ) throws -> Decision {
        try requireSignedIn(txn)
        let share = try liveShare(txn, token)
        try requireManager(txn, share, token)
        try checkTag(share, tag)
        guard share.publicPermission == .none else {
            throw LedgerError(
                .invalidArguments, "participants can be invited only to a private share; set its public permission to none first")
        }
        guard role == .privateUser || role == .administrator else {
            throw LedgerError(
                .invalidArguments, "an invited participant's role is privateUser or administrator (public users join by URL)")
        }
        guard permission == .readOnly || permission == .readWrite else {
            throw LedgerError(.invalidArguments, "an invited participant's permission is readOnly or readWrite")
        }
        var user = ""
        if let id = lookup.userRecordID {
            guard try models.user(txn, container, id.recordName) != nil else {
                throw LedgerError(.unknownItem, "there is no user \(id.recordName) in \(container)")
            }
            user = id.recordName
        } else if let email = lookup.emailAddress {
            try Decider.checkName(email, "email address", max: Limits.maxLookupBytes)
            guard email.contains("@") else { throw LedgerError(.invalidArguments, "\"\(email)\" is not an email address") }
            user = try models.userName(txn, container, email: email) ?? ""
        } else if let phone = lookup.phoneNumber {
            try Decider.checkName(phone, "phone number", max: 32)
            guard ReadModels.normalizePhone(phone).count >= 3 else {
                throw LedgerError(.invalidArguments, "\"\(phone)\" is not a phone number")
            }
            user = try models.userName(txn, container, phone: phone) ?? ""
        }
        guard user != share.ownerName else {
            throw LedgerError(.invalidArguments, "the owner is a participant already")
        }
        // The same identity again: by account, or by the email/phone an invitation went to.
        var existing: (id: String, state: ParticipantState)?
        if !user.isEmpty { existing = try models.participant(txn, of: user, in: share, token: token) }
        if existing == nil {
            var wanted = PBLookupInfo(lookup)
            // Invited by account: an earlier invitation to the account's email or phone is the same person.
            if !user.isEmpty, let state = try models.user(txn, container, user) {
                wanted.emailAddress = state.emailAddress
                wanted.phoneNumber = state.phoneNumber
            }
            existing = try models.participants(txn, token).first { entry in
                (!wanted.emailAddress.isEmpty
                    && ReadModels.normalizeEmail(entry.state.lookupInfo.emailAddress) == ReadModels.normalizeEmail(wanted.emailAddress))
                    || (!wanted.phoneNumber.isEmpty
                        && ReadModels.normalizePhone(entry.state.lookupInfo.phoneNumber) == ReadModels.normalizePhone(wanted.phoneNumber))
            }
        }
        if let existing, existing.state.status != .statusRemoved {
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
                e.role = PBRole(role)
                e.permission = PBPermission(permission)
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
        return .output([event(Streams.share(token), .participantAdded(e))], shareOutput(token))
    }

    private func updateParticipant(
        _ txn: borrowing Transaction, token: String, id: String, role: Share.Participant.Role?,
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

    private func removeParticipant(_ txn: borrowing Transaction, token: String, id: String, tag: String?) throws -> Decision {
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

    private func leaveShare(_ txn: borrowing Transaction, token: String) throws -> Decision {
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

    private func setPublicPermission(
        _ txn: borrowing Transaction, token: String, permission: Share.Participant.Permission, tag: String?
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

    private func setTitle(_ txn: borrowing Transaction, token: String, title: String, tag: String?) throws -> Decision {
        try requireSignedIn(txn)
        let share = try liveShare(txn, token)
        try requireManager(txn, share, token)
        try checkTag(share, tag)
        guard title.utf8.count <= Limits.maxTitleBytes else {
            throw LedgerError(.invalidArguments, "the title is longer than \(Limits.maxTitleBytes) bytes")
        }
        guard title != share.title else { return .output(shareOutput(token)) }
        var e = Shareledger_Events_V1_ShareTitleChanged()
        e.token = token
        e.title = title
        return .output([event(Streams.share(token), .shareTitleChanged(e))], shareOutput(token))
    }

    private func deleteShare(_ txn: borrowing Transaction, token: String, tag: String?) throws -> Decision {
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

    // MARK: - Metadata

    /// What the caller is to the share: the role, status and permission the metadata reports.
    private enum Standing {
        case participant(role: PBRole, status: PBStatus, permission: PBPermission)
        case prospectivePublicUser(PBPermission)
    }

    /// How the share looks to the caller, or the error CloudKit gives.
    private func standing(_ txn: borrowing Transaction, _ share: ShareState, token: String) throws -> Standing {
        // User record names are per container (as in CloudKit): the caller is a participant only when
        // fetching in the share's own container. From another container, the same name is nobody
        // the share knows.
        let sameContainer = share.container == container
        if sameContainer, let entry = try models.participant(txn, of: actor, in: share, token: token),
            entry.state.status != .statusRemoved
        {
            return .participant(role: entry.state.role, status: entry.state.status, permission: entry.state.permission)
        }
        if Decider.isPublic(share.publicPermission) {
            return .prospectivePublicUser(share.publicPermission)
        }
        // Verification is offered only in the share's own container, where an invitation can be claimed.
        if sameContainer, share.unmatchedPendingCount > 0 {
            throw LedgerError(
                .participantMayNeedVerification, "you are not a participant of this share yet, but it has invitations "
                    + "to email addresses or phone numbers not tied to an account: if one was sent to you, verify it "
                    + "(requestParticipantVerification) and fetch again")
        }
        throw LedgerError(.unknownItem, Decider.shareNotFound)
    }

    private func fetchMetadata(_ txn: borrowing Transaction, tokenText: String, fetchRoot: Bool, keys: [String]?) throws
        -> Decision
    {
        var e = Shareledger_Events_V1_ShareMetadataFetched()
        e.token = String(tokenText.prefix(64))
        let stream = signedIn ? Streams.user(actor) : Streams.anonymous
        func failed(_ error: LedgerError) -> Decision {
            e.errorCode = Int32(error.code.rawValue)
            return Decision(events: [event(stream, .shareMetadataFetched(e))], outcome: .failed(error))
        }
        guard signedIn, try models.user(txn, container, actor) != nil else {
            return failed(
                LedgerError(.notAuthenticated, "fetching share metadata needs a signed-in user; register the user and act as them"))
        }
        guard ShareToken(tokenText) != nil, let share = try models.share(txn, tokenText) else {
            return failed(LedgerError(.unknownItem, Decider.shareNotFound))
        }
        e.shareContainer = share.container
        let standing: Standing
        do {
            standing = try self.standing(txn, share, token: tokenText)
        } catch let error as LedgerError {
            return failed(error)
        }
        let (role, status, permission): (PBRole, PBStatus, PBPermission)
        switch standing {
        case .participant(let r, let s, let p): (role, status, permission) = (r, s, p)
        case .prospectivePublicUser(let p): (role, status, permission) = (.publicUser, .statusPending, p)
        }
        let viewer = share.container == container ? actor : nil
        let shareValue = try presenter.share(txn, token: tokenText, state: share, viewer: viewer)
        let zoneID = RecordZoneID(zoneName: share.zoneName, ownerName: share.ownerName)
        var rootRecord: Record?
        let rootID = share.rootRecordName.isEmpty ? nil : RecordID(recordName: share.rootRecordName, zoneID: zoneID)
        if fetchRoot, let rootID, let state = try models.record(txn, zoneID: share.zoneID, share.rootRecordName) {
            rootRecord = try presenter.record(txn, state, id: rootID, desiredKeys: keys)
            e.rootRecordFetched = true
        }
        let metadata = Share.Metadata(
            share: shareValue, containerIdentifier: share.container,
            ownerIdentity: try presenter.identity(txn, share.container, user: share.ownerName),
            hierarchicalRootRecordID: rootID, rootRecord: rootRecord, participantRole: role.role,
            participantStatus: status.status, participantPermission: permission.permission)
        e.participantRole = role
        e.participantStatus = status
        e.participantPermission = permission
        return .output([event(stream, .shareMetadataFetched(e))], .metadata(metadata))
    }

    // MARK: - Accepting

    private func accept(_ txn: borrowing Transaction, token: String, metadataContainer: String, newID: String) throws
        -> Decision
    {
        try requireSignedIn(txn)
        guard metadataContainer == container else {
            throw LedgerError(
                .badContainer, "this share belongs to container \(metadataContainer); accept it in that container, "
                    + "not in \(container)")
        }
        let share = try liveShare(txn, token)
        let entry = try models.participant(txn, of: actor, in: share, token: token)
        if let entry, entry.state.role == .owner || entry.state.status == .statusAccepted {
            // The owner, or accepted already: success, nothing new.
            return .output(shareOutput(token))
        }
        let isPublic = Decider.isPublic(share.publicPermission)
        if let entry, entry.state.status == .statusPending {
            var e = Shareledger_Events_V1_ShareAccepted()
            e.token = token
            e.participantID = entry.id
            e.userRecordName = actor
            return .output([event(Streams.share(token), .shareAccepted(e))], shareOutput(token))
        }
        guard isPublic else {
            if entry?.state.status == .statusRemoved {
                throw LedgerError(.permissionFailure, "you were removed from this share; the owner must invite you again")
            }
            throw LedgerError(
                .permissionFailure, "you have no invitation to this share (if one went to your email or phone, "
                    + "verify it first)")
        }
        guard share.activeParticipantCount < Limits.maxParticipants else {
            throw LedgerError(.tooManyParticipants, "the share has reached \(Limits.maxParticipants) participants")
        }
        // A public share: join as a public user (again, with the same participant id, after a removal).
        var added = Shareledger_Events_V1_ParticipantAdded()
        added.token = token
        added.participantID = entry?.id ?? newID
        added.userRecordName = actor
        added.lookupInfo.userRecordName = actor
        added.role = .publicUser
        added.permission = share.publicPermission
        var accepted = Shareledger_Events_V1_ShareAccepted()
        accepted.token = token
        accepted.participantID = added.participantID
        accepted.userRecordName = actor
        return .output(
            [event(Streams.share(token), .participantAdded(added)), event(Streams.share(token), .shareAccepted(accepted))],
            shareOutput(token))
    }

    // MARK: - Verification

    private func requestVerification(
        _ txn: borrowing Transaction, token: String, lookup: LookupInfo, hash: [UInt8], expires: Int64
    ) throws -> Decision {
        try requireSignedIn(txn)
        let wanted = PBLookupInfo(lookup)
        guard !wanted.emailAddress.isEmpty || !wanted.phoneNumber.isEmpty else {
            throw LedgerError(.invalidArguments, "verification proves an email address or a phone number")
        }
        let share = try liveShare(txn, token)
        if try activeEntry(txn, share, token) != nil {
            throw LedgerError(.invalidArguments, "you are a participant of this share already")
        }
        try requireVerificationCase(share)
        let match = try models.participants(txn, token).first { entry in
            entry.state.status == .statusPending && entry.state.userRecordName.isEmpty
                && ((!wanted.emailAddress.isEmpty
                    && ReadModels.normalizeEmail(entry.state.lookupInfo.emailAddress) == ReadModels.normalizeEmail(wanted.emailAddress))
                    || (!wanted.phoneNumber.isEmpty
                        && ReadModels.normalizePhone(entry.state.lookupInfo.phoneNumber) == ReadModels.normalizePhone(wanted.phoneNumber)))
        }
        guard let match else {
            throw LedgerError(.unknownItem, "no pending invitation of this share matches \(lookup)")
        }
        var e = Shareledger_Events_V1_VerificationRequested()
        e.token = token
        e.participantID = match.id
        e.userRecordName = actor
        e.codeSha256 = Data(hash)
        e.expiresAtMicros = expires
        return .output([event(Streams.share(token), .verificationRequested(e))], .participantID(match.id))
    }

    /// Verification concerns only a share with invitations not tied to an account (the case in which
    /// fetching its metadata answers `participantMayNeedVerification`). For any other share, a caller
    /// who is not a participant gets the answer of an unknown URL, so that verifying tells a stranger
    /// nothing that fetching would not.
    private func requireVerificationCase(_ share: ShareState) throws {
        guard share.container == container, share.unmatchedPendingCount > 0 else {
            throw LedgerError(.unknownItem, Decider.shareNotFound)
        }
    }

    private func verify(_ txn: borrowing Transaction, token: String, hash: [UInt8]) throws -> Decision {
        try requireSignedIn(txn)
        let share = try liveShare(txn, token)
        if try activeEntry(txn, share, token) != nil {
            throw LedgerError(.invalidArguments, "you are a participant of this share already")
        }
        try requireVerificationCase(share)
        let suffix = [UInt8(0)] + Array(actor.utf8)
        var found: (participantID: String, state: VerificationState)?
        var expired = false
        for entry in try models.scan(txn, models.verifications, prefix: Array(token.utf8)) {
            guard entry.suffix.count > suffix.count, Array(entry.suffix.suffix(suffix.count)) == suffix else { continue }
            let state = try VerificationState(serializedBytes: entry.value)
            guard Array(state.codeSha256) == hash else { continue }
            guard state.expiresAtMicros > now else {
                expired = true
                continue
            }
            found = (String(decoding: entry.suffix.dropLast(suffix.count), as: UTF8.self), state)
        }
        guard let found else {
            throw LedgerError(
                .permissionFailure, expired
                    ? "the verification code has expired; request a new one"
                    : "the verification code is not valid for you and this share; check it or request a new one")
        }
        guard let participant = try models.participant(txn, token, found.participantID),
            participant.status == .statusPending, participant.userRecordName.isEmpty
        else {
            throw LedgerError(.unknownItem, "the invitation was withdrawn or claimed already")
        }
        var e = Shareledger_Events_V1_ParticipantVerified()
        e.token = token
        e.participantID = found.participantID
        e.userRecordName = actor
        return .output([event(Streams.share(token), .participantVerified(e))], shareOutput(token))
    }

    // MARK: - Residual tasks

    private func completeTask(_ txn: borrowing Transaction, id: UInt64) throws -> Decision {
        guard let task = try models.message(ResidualTaskState.self, txn, models.outbox, BigEndian.bytes(of: id)) else {
            // Completed already: applying a completion twice has no further effect.
            return .output(.none)
        }
        let stream = Streams.user(task.userRecordName)
        switch task.kind {
        case .createZone:
            var e = Shareledger_Events_V1_ParticipantZoneCreated()
            e.userRecordName = task.userRecordName
            e.ownerName = task.ownerName
            e.zoneName = task.zoneName
            e.taskID = id
            return .output([event(stream, .participantZoneCreated(e))], .none)
        case .removeZone, .UNRECOGNIZED:
            var e = Shareledger_Events_V1_ParticipantZoneRemoved()
            e.userRecordName = task.userRecordName
            e.ownerName = task.ownerName
            e.zoneName = task.zoneName
            e.taskID = id
            // Another accepted share in the same zone keeps the zone in the user's shared database.
            for (token, participantID) in try models.participations(txn, task.container, user: task.userRecordName) {
                guard let share = try models.share(txn, token), share.zoneID == task.zoneID,
                    let participant = try models.participant(txn, token, participantID),
                    participant.status == .statusAccepted
                else { continue }
                e.zoneKept = true
                break
            }
            return .output([event(stream, .participantZoneRemoved(e))], .none)
        }
    }
}
