import ByteKeys
import EventLog
import Foundation

/// Projecting the events about zones and records.
extension Projector {
    func zoneCreated(
        _ e: Shareledger_Events_V1_ZoneCreated, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        var state = ZoneState()
        state.zoneID = context.position
        state.capabilities = e.capabilities
        state.createdAtMicros = context.recordedAtMicros
        try m.put(txn, m.zones, ReadModels.zoneKey(context.container, owner: e.ownerName, zone: e.zoneName), state)
        try m.add(txn, .zones, 1)
        try m.noteZoneChange(
            txn, context.container, user: e.ownerName, .private,
            ZoneChangeEntry(ownerName: e.ownerName, zoneName: e.zoneName, position: context.position, deleted: false, zoneID: context.position))
    }

    func zoneDeleted(
        _ e: Shareledger_Events_V1_ZoneDeleted, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
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
    }

    func recordSaved(
        _ e: Shareledger_Events_V1_RecordSaved, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
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
    }

    func recordDeleted(
        _ e: Shareledger_Events_V1_RecordDeleted, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
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
    }
}
