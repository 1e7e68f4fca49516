import EventLog
import Foundation
import SwiftProtobuf

/// Zones and records in an owner's private database, and writes by participants.
extension Decider {
    // MARK: - Zones and records

    package func saveZone(_ txn: borrowing some ReadModelStore & ~Copyable, _ id: RecordZoneID, capabilities: UInt32) throws -> Decision {
        try requireSignedIn(txn)
        let owner = owner(of: id)
        guard owner == actor else {
            throw LedgerError(.badDatabase, "zones can be created only in your own private database, not in \(owner)'s")
        }
        try Decider.checkName(id.zoneName, "zone name", max: Limits.maxZoneNameBytes)
        // CloudKit's default zone: saved like any zone (clients address records there without creating
        // it), but never with a capability: no atomic batches, no change feed, no sharing.
        let capabilities = id.zoneName == RecordZoneID.defaultZoneName ? 0 : capabilities
        let zoneID = RecordZoneID(zoneName: id.zoneName, ownerName: owner)
        if let existing = try models.zone(txn, container, owner: owner, zone: id.zoneName) {
            return .output(.zone(RecordZone(existing, id: zoneID)))
        }
        var e = Shareledger_Events_V1_ZoneCreated()
        e.ownerName = owner
        e.zoneName = id.zoneName
        e.capabilities = capabilities & 0xF
        return .output(
            [event(Streams.zone(owner: owner, zone: id.zoneName), .zoneCreated(e))], .zone(owner: owner, zoneName: id.zoneName))
    }

    package func deleteZone(_ txn: borrowing some ReadModelStore & ~Copyable, _ id: RecordZoneID) throws -> Decision {
        try requireSignedIn(txn)
        let owner = owner(of: id)
        guard owner == actor else {
            throw LedgerError(.badDatabase, "only the owner deletes a zone; to stop seeing a shared zone, leave its share")
        }
        guard id.zoneName != RecordZoneID.defaultZoneName else {
            throw LedgerError(.invalidArguments, "the default zone cannot be deleted; delete its records instead")
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
    package func subtreeHasShare(_ txn: borrowing some ReadModelStore & ~Copyable, zoneID: UInt64, _ name: String) throws -> Bool {
        var stack = [name]
        var seen = Set<String>()
        while let next = stack.popLast() {
            guard seen.insert(next).inserted else { continue }
            if let link = try models.recordLink(txn, zoneID: zoneID, next), !link.shareToken.isEmpty { return true }
            stack.append(contentsOf: try models.children(txn, zoneID: zoneID, of: next))
        }
        return false
    }

    /// Whether a record up the chain from `name` (itself included) is the root of a live share.
    package func ancestorHasShare(_ txn: borrowing some ReadModelStore & ~Copyable, zoneID: UInt64, _ name: String) throws -> Bool {
        var current: String? = name
        var seen = Set<String>()
        while let next = current, !next.isEmpty, seen.insert(next).inserted {
            guard let link = try models.recordLink(txn, zoneID: zoneID, next) else { return false }
            if !link.shareToken.isEmpty { return true }
            current = link.parent
        }
        return false
    }

    /// For a write by someone other than the zone's owner: the writer must be an accepted participant
    /// with read-write permission of the share that covers the record.
    package func requireWriteAccess(_ txn: borrowing some ReadModelStore & ~Copyable, zone: ZoneState, coveringFrom name: String?) throws {
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

    /// A write by someone other than the zone's owner of record `name` (`existing`, or a new one under
    /// `parent`): the writer must be an accepted readWrite participant of the covering share, and the
    /// record must stay in that share. Shared by ``saveRecord`` and the ``EventValidator``.
    package func checkParticipantWrite(
        _ txn: borrowing some ReadModelStore & ~Copyable, zone: ZoneState, _ name: String, existing: RecordState?, parent: String?
    ) throws {
        let current = existing != nil ? name : parent
        try requireWriteAccess(txn, zone: zone, coveringFrom: current)
        // The record must stay in the share the participant may write: no moving it out (or in).
        let before = try models.coveringShare(txn, zone: zone, from: current)
        let after: String?
        if let existing, !existing.shareToken.isEmpty {
            after = existing.shareToken
        } else {
            after = try models.coveringShare(txn, zone: zone, from: parent)
        }
        guard before == after else {
            throw LedgerError(.permissionFailure, "a participant cannot move a record out of the share it belongs to")
        }
    }

    /// `parent` as the parent of record `name` (`existing` when it exists): it exists, no cycle, and
    /// no record ends up in two shares. Shared by ``saveRecord`` and the ``EventValidator``.
    package func checkParent(
        _ txn: borrowing some ReadModelStore & ~Copyable, zone: ZoneState, _ name: String, parent: String, existing: RecordState?
    ) throws {
        guard parent != name else {
            throw LedgerError(.invalidArguments, "record \(name) cannot be its own parent")
        }
        guard try models.recordLink(txn, zoneID: zone.zoneID, parent) != nil else {
            throw LedgerError(.referenceViolation, "the parent record \(parent) does not exist; save it first")
        }
        // No cycles: the parent's chain must not lead back to this record.
        var current: String? = parent
        var seen = Set<String>()
        while let next = current, !next.isEmpty, seen.insert(next).inserted {
            guard next != name else {
                throw LedgerError(.invalidArguments, "making \(parent) the parent of \(name) would form a cycle")
            }
            current = try models.recordLink(txn, zoneID: zone.zoneID, next)?.parent
        }
        if parent != existing?.parentRecordName,
            try ancestorHasShare(txn, zoneID: zone.zoneID, parent),
            try subtreeHasShare(txn, zoneID: zone.zoneID, name)
        {
            throw LedgerError(
                .alreadyShared, "record \(name) (or a record below it) is shared already, and \(parent) is in "
                    + "another share; a record belongs to at most one share")
        }
    }

    package func saveRecord(
        _ txn: borrowing some ReadModelStore & ~Copyable, _ given: Record, policy: RecordSavePolicy = .ifServerRecordUnchanged
    ) throws -> Decision {
        try requireSignedIn(txn)
        var record = given
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
        // A partial save keeps the parent unless it names one.
        if case .changedKeys = policy, record.parent == nil, let existing, !existing.parentRecordName.isEmpty {
            record.parent = RecordID(recordName: existing.parentRecordName, zoneID: record.recordID.zoneID)
        }
        if owner != actor {
            try checkParticipantWrite(txn, zone: zone, name, existing: existing, parent: record.parent?.recordName)
        }
        try applyPolicy(policy, to: &record, existing: existing)
        try Decider.checkFields(of: record)
        var parentName = ""
        if let parent = record.parent {
            guard parent.zoneID.zoneName == zoneName, self.owner(of: parent.zoneID) == owner else {
                throw LedgerError(.invalidArguments, "the parent of \(name) must be in the same zone")
            }
            try checkParent(txn, zone: zone, name, parent: parent.recordName, existing: existing)
            parentName = parent.recordName
        }
        let e = recordSaved(record, owner: owner, parent: parentName, existing: existing)
        let id = RecordID(recordName: name, zoneID: RecordZoneID(zoneName: zoneName, ownerName: owner))
        return .output(
            [event(Streams.zone(owner: owner, zone: zoneName), .recordSaved(e))],
            .record(zoneKey: zone.zoneID, name: name, id: id))
    }

    /// Checks `record`'s change tag against `existing` as `policy` says, and merges or filters its
    /// fields for a partial save (``RecordSavePolicy/changedKeys(_:checkingChangeTag:)``).
    func applyPolicy(_ policy: RecordSavePolicy, to record: inout Record, existing: RecordState?) throws {
        let name = record.recordID.recordName
        let checksTag: Bool
        switch policy {
        case .ifServerRecordUnchanged: checksTag = true
        case .changedKeys(_, let checking): checksTag = checking
        case .allKeys: checksTag = false
        }
        if let existing {
            if checksTag {
                guard let tag = record.recordChangeTag, tag == String(existing.changeTag) else {
                    throw LedgerError(
                        .serverRecordChanged, "record \(name) changed on the server (change tag \(existing.changeTag), yours "
                            + "\(record.recordChangeTag ?? "none")); fetch it, apply your change, and save again")
                }
            }
            guard existing.recordType == record.recordType else {
                throw LedgerError(.invalidArguments, "record \(name) is a \(existing.recordType); its type cannot change")
            }
            if case .changedKeys(let keys, _) = policy {
                var merged: [String: FieldValue] = [:]
                for field in existing.fields where !keys.contains(field.key) {
                    merged[field.key] = FieldValue(field.value, zoneID: record.recordID.zoneID)
                }
                for key in keys { merged[key] = record.fields[key] }
                record.fields = merged
            }
        } else if checksTag, record.recordChangeTag != nil || policy != .ifServerRecordUnchanged {
            throw LedgerError(.unknownItem, "record \(name) does not exist (it may have been deleted); save it without a change tag")
        } else if case .changedKeys(let keys, _) = policy {
            record.fields = record.fields.filter { keys.contains($0.key) }
        }
    }

    /// The fields of `record` are storable, refer only to records of its zone, and fit the limit.
    static func checkFields(of record: Record) throws {
        let name = record.recordID.recordName
        let zoneName = record.recordID.zoneID.zoneName
        var bytes = 0
        for (key, value) in record.fields {
            try Decider.checkName(key, "field key", max: Limits.maxFieldKeyBytes)
            if let reason = value.unstorableReason {
                throw LedgerError(.invalidArguments, "field \(key) of record \(name): \(reason)")
            }
            bytes += key.utf8.count + value.approximateBytes
            if case .reference(let target) = value, target.zoneID.zoneName != zoneName {
                throw LedgerError(.invalidArguments, "field \(key) refers to a record in another zone")
            }
        }
        guard bytes <= Record.maxFieldBytes else {
            throw LedgerError(.limitExceeded, "record \(name) holds \(bytes) bytes of fields; the limit is \(Record.maxFieldBytes)")
        }
    }

    /// The `RecordSaved` event of saving `record` (its zone's `owner`, its `parent` name or empty)
    /// over `existing`.
    func recordSaved(_ record: Record, owner: String, parent parentName: String, existing: RecordState?)
        -> Shareledger_Events_V1_RecordSaved
    {
        let name = record.recordID.recordName
        let zoneName = record.recordID.zoneID.zoneName
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
        if existing == nil { e.createdBy = actor }
        return e
    }

    package func deleteRecord(_ txn: borrowing some ReadModelStore & ~Copyable, _ id: RecordID, ifChangeTag: String? = nil) throws -> Decision {
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
        if let ifChangeTag, ifChangeTag != String(state.changeTag) {
            throw LedgerError(
                .serverRecordChanged, "record \(id.recordName) changed on the server (change tag \(state.changeTag), yours "
                    + "\(ifChangeTag)); fetch it and delete it again")
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
}
