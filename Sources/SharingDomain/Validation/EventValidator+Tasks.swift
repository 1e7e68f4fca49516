import EventLog
import Foundation

/// Checking the events about residual tasks.
extension EventValidator {
    func checkParticipantZoneCreated(
        _ e: Shareledger_Events_V1_ParticipantZoneCreated, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let task = try task(txn, e.taskID, user: e.userRecordName, owner: e.ownerName, zone: e.zoneName)
        guard task.kind == .createZone else { throw Self.refuse("task \(e.taskID) removes a zone") }
    }

    func checkParticipantZoneRemoved(
        _ e: Shareledger_Events_V1_ParticipantZoneRemoved, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let task = try task(txn, e.taskID, user: e.userRecordName, owner: e.ownerName, zone: e.zoneName)
        guard task.kind != .createZone else { throw Self.refuse("task \(e.taskID) creates a zone") }
        guard try d.zoneKept(txn, task) == e.zoneKept else {
            throw Self.refuse("it says the zone is \(e.zoneKept ? "" : "not ")kept by another accepted share; it is the opposite")
        }
    }
}
