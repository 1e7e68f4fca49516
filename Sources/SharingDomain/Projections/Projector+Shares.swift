import EventLog
import Foundation

/// Projecting the events about shares: creation, deletion and their settings.
extension Projector {
    func shareCreated(
        _ e: Shareledger_Events_V1_ShareCreated, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        let zoneKey = ReadModels.zoneKey(context.container, owner: e.ownerName, zone: e.zoneName)
        guard var zone = try m.message(ZoneState.self, txn, m.zones, zoneKey) else { return }
        var share = ShareState()
        share.container = context.container
        share.ownerName = e.ownerName
        share.zoneName = e.zoneName
        share.zoneID = zone.zoneID
        share.shareRecordName = e.shareRecordName
        share.rootRecordName = e.rootRecordName
        share.title = e.title
        if e.hasSealedTitle { share.sealedTitle = e.sealedTitle }
        share.publicPermission = e.publicPermission
        // The change tag starts at the position of the share's creation and counts up, so a tag
        // is never given twice for one URL, even across deleting and re-sharing the same root.
        share.changeTag = context.position
        share.createdAtMicros = context.recordedAtMicros
        share.ownerParticipantID = e.ownerParticipantID
        share.activeParticipantCount = 1
        try m.put(txn, m.shares, text: e.token, share)

        var owner = ParticipantState()
        owner.userRecordName = e.ownerName
        owner.lookupInfo.userRecordName = e.ownerName
        owner.role = .owner
        owner.permission = .readWrite
        owner.status = .statusAccepted
        owner.addedAtMicros = context.recordedAtMicros
        try m.put(txn, m.participants, ReadModels.participantKey(e.token, e.ownerParticipantID), owner)
        try m.putRaw(txn, m.sharesByOwner, ReadModels.key(context.container, e.ownerName, e.token), [])
        try m.putRaw(
            txn, m.sharesByUser, ReadModels.key(context.container, e.ownerName, e.token),
            Array(e.ownerParticipantID.utf8))

        if e.rootRecordName.isEmpty {
            zone.zoneShareToken = e.token
            zone.lastZoneShareToken = e.token
        } else {
            zone.hierarchyShareCount += 1
            let recordKey = ReadModels.recordKey(zoneID: zone.zoneID, e.rootRecordName)
            if var root = try m.message(RecordState.self, txn, m.records, recordKey) {
                root.shareToken = e.token
                root.lastShareToken = e.token
                try m.put(txn, m.records, recordKey, root)
            }
        }
        try m.put(txn, m.zones, zoneKey, zone)
        try m.add(txn, .shares, 1)
    }

    func shareDeleted(
        _ e: Shareledger_Events_V1_ShareDeleted, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable,
        share: ShareState?
    ) throws {
        let m = models
        guard let share else { return }
        let participants = try m.participants(txn, e.token)
        var taskIndex = 0
        for (id, participant) in participants {
            if participant.role != .owner && participant.status != .statusRemoved {
                try m.add(txn, .participants, -1)
                if participant.status == .statusAccepted {
                    try m.add(txn, .acceptedParticipants, -1)
                    try scheduleZoneTask(
                        .removeZone, share: share, token: e.token, user: participant.userRecordName,
                        id: Projector.taskID(position: context.position, index: taskIndex), context, txn)
                    taskIndex += 1
                }
            }
            if !participant.oneTimeToken.isEmpty { try txn.delete(m.oneTimeURLs, key: Array(participant.oneTimeToken.utf8)) }
            try indexInvitation(share.container, e.token, id, from: participant.address, to: nil, context, txn)
            try m.deleteRow(txn, m.participants, ReadModels.participantKey(e.token, id))
            if !participant.userRecordName.isEmpty {
                try txn.delete(m.sharesByUser, key: ReadModels.key(share.container, participant.userRecordName, e.token))
            }
        }
        for entry in try m.scan(txn, m.verifications, prefix: Array(e.token.utf8)) {
            try txn.delete(m.verifications, key: Array(e.token.utf8) + entry.suffix)
        }
        // Requests and blocks belong to the share: a new share of the same root starts without them.
        for entry in try m.scan(txn, m.access, prefix: Array(e.token.utf8)) {
            try txn.delete(m.access, key: Array(e.token.utf8) + entry.suffix)
        }
        try txn.delete(m.sharesByOwner, key: ReadModels.key(share.container, share.ownerName, e.token))
        try m.deleteRow(txn, m.shares, Array(e.token.utf8))
        let zoneKey = ReadModels.zoneKey(share.container, owner: share.ownerName, zone: share.zoneName)
        if var zone = try m.message(ZoneState.self, txn, m.zones, zoneKey) {
            if share.rootRecordName.isEmpty {
                zone.zoneShareToken = ""
            } else {
                zone.hierarchyShareCount = zone.hierarchyShareCount > 0 ? zone.hierarchyShareCount - 1 : 0
                let recordKey = ReadModels.recordKey(zoneID: zone.zoneID, share.rootRecordName)
                if var root = try m.message(RecordState.self, txn, m.records, recordKey), root.shareToken == e.token {
                    root.shareToken = ""
                    try m.put(txn, m.records, recordKey, root)
                }
            }
            try m.put(txn, m.zones, zoneKey, zone)
        }
        try m.add(txn, .shares, -1)
    }

    func shareTitleChanged(
        _ e: Shareledger_Events_V1_ShareTitleChanged, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable,
        share: ShareState?
    ) throws {
        try updateShare(share, token: e.token, txn) { share in
            share.title = e.title
            if e.hasSealedTitle { share.sealedTitle = e.sealedTitle } else { share.clearSealedTitle() }
        }
    }

    func accessRequestsAllowedChanged(
        _ e: Shareledger_Events_V1_AccessRequestsAllowedChanged, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable,
        share: ShareState?
    ) throws {
        try updateShare(share, token: e.token, txn) { $0.allowsAccessRequests = e.allowed }

    // The requesters and blocked identities are part of the share (CloudKit's CKShare.requesters,
    // blockedIdentities): each change of them is a change of the share and moves its change tag.
    }
}
