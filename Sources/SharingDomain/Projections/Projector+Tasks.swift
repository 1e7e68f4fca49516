import ByteKeys
import EventLog
import Foundation

/// Projecting the events about residual tasks: participants' zones.
extension Projector {
    func participantZoneCreated(
        _ e: Shareledger_Events_V1_ParticipantZoneCreated, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
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
    }

    func participantZoneRemoved(
        _ e: Shareledger_Events_V1_ParticipantZoneRemoved, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
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
