import Foundation
import SwiftProtobuf

/// Residual tasks: completing the work an accept or a removal left behind.
extension Decider {
    // MARK: - Residual tasks

    func completeTask(_ txn: borrowing some ReadModelStore & ~Copyable, id: UInt64) throws -> Decision {
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
