import EventLog
import Foundation

/// Checking the events about zones and records.
extension EventValidator {
    func checkZoneCreated(
        _ e: Shareledger_Events_V1_ZoneCreated, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        let actor = d.actor
        try d.requireSignedIn(txn)
        try requireOwner(e.ownerName, actor)
        try Decider.checkName(e.zoneName, "zone name", max: Decider.Limits.maxZoneNameBytes)
        guard e.capabilities & ~0xF == 0, e.zoneName != RecordZoneID.defaultZoneName || e.capabilities == 0 else {
            throw Self.refuse("capabilities have 4 bits, and the default zone has none")
        }
        guard try m.zone(txn, d.container, owner: actor, zone: e.zoneName) == nil else {
            throw Self.refuse("zone \(e.zoneName) exists already")
        }
    }

    func checkZoneDeleted(
        _ e: Shareledger_Events_V1_ZoneDeleted, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        let actor = d.actor
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
    }

    func checkRecordSaved(
        _ e: Shareledger_Events_V1_RecordSaved, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        let actor = d.actor
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
    }

    func checkRecordDeleted(
        _ e: Shareledger_Events_V1_RecordDeleted, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        let actor = d.actor
        try d.requireSignedIn(txn)
        guard let zone = try m.zone(txn, d.container, owner: e.ownerName, zone: e.zoneName),
            let record = try m.record(txn, zoneID: zone.zoneID, e.recordName)
        else { throw Self.refuse("record \(e.recordName) does not exist") }
        if e.ownerName != actor { try d.requireWriteAccess(txn, zone: zone, coveringFrom: e.recordName) }
        guard record.shareToken.isEmpty else {
            throw Self.refuse("record \(e.recordName) is the root of a live share (its ShareDeleted comes first)")
        }
    }
}
