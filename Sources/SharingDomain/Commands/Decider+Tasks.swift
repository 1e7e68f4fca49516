import EventLog
import Foundation
import SwiftProtobuf

/// Residual tasks: completing the work an accept or a removal left behind.
extension Decider {
    // MARK: - Residual tasks

    /// Whether another accepted share in the task's zone keeps the zone in the user's shared database
    /// when a removal task completes. Shared by ``completeTask`` and the ``EventValidator``.
    package func zoneKept(_ txn: borrowing some ReadModelStore & ~Copyable, _ task: ResidualTaskState) throws -> Bool {
        for (token, participantID) in try models.participations(txn, task.container, user: task.userRecordName) {
            // The zone first, from the stored row (most of a user's shares are in other zones).
            guard try models.shareZoneID(txn, token) == task.zoneID,
                let participant = try models.participant(txn, token, participantID),
                participant.status == .statusAccepted
            else { continue }
            return true
        }
        return false
    }

    package func completeTask(_ txn: borrowing some ReadModelStore & ~Copyable, id: UInt64) throws -> Decision {
        guard let task = try models.residualTask(txn, id: id) else {
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
            e.zoneKept = try zoneKept(txn, task)
            return .output([event(stream, .participantZoneRemoved(e))], .none)
        }
    }
}
