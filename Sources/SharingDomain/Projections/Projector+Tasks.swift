import ByteKeys
import EventLog
import Foundation

/// Projecting the events about residual tasks: participants' zones.
extension Projector {
    func participantZoneCreated(
        _ e: Shareledger_Events_V1_ParticipantZoneCreated, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        guard let task = try takeTask(e.taskID, txn) else { return }
        let key = ReadModels.sharedZoneKey(task.container, user: task.userRecordName, zoneID: task.zoneID)
        if try m.message(SharedZoneState.self, txn, m.sharedZones, key) == nil {
            var state = SharedZoneState()
            state.ownerName = task.ownerName
            state.zoneName = task.zoneName
            state.createdAtMicros = context.recordedAtMicros
            try m.put(txn, m.sharedZones, key, state)
            try m.add(txn, .participantZones, 1)
        }
        try noteSharedZoneChange(task, context, deleted: false, txn)
    }

    func participantZoneRemoved(
        _ e: Shareledger_Events_V1_ParticipantZoneRemoved, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        guard let task = try takeTask(e.taskID, txn) else { return }
        let key = ReadModels.sharedZoneKey(task.container, user: task.userRecordName, zoneID: task.zoneID)
        if !e.zoneKept, try txn.delete(m.sharedZones, key: key) {
            try m.add(txn, .participantZones, -1)
            try noteSharedZoneChange(task, context, deleted: true, txn)
        }
    }

    /// Takes residual task `taskID` out of the outbox and the worker's queue: the task, or nil when
    /// it is in neither (an event replayed after the task was done).
    private func takeTask(_ taskID: UInt64, _ txn: borrowing some ReadModelStore & ~Copyable) throws -> ResidualTaskState? {
        let m = models
        let taskKey = BigEndian.bytes(of: taskID)
        guard let task = try m.message(ResidualTaskState.self, txn, m.outbox, taskKey) else { return nil }
        try txn.delete(m.outbox, key: taskKey)
        try txn.delete(m.workerTasks, key: taskKey)
        return task
    }

    /// Notes that the zone of `task` appeared in (or left) the participant's shared database.
    private func noteSharedZoneChange(
        _ task: ResidualTaskState, _ context: Context, deleted: Bool, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        try models.noteZoneChange(
            txn, task.container, user: task.userRecordName, .shared,
            ZoneChangeEntry(ownerName: task.ownerName, zoneName: task.zoneName, position: context.position, deleted: deleted, zoneID: task.zoneID))
    }
}
