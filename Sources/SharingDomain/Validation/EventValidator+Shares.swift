import EventLog
import Foundation

/// Checking the events about shares and their settings.
extension EventValidator {
    func checkShareCreated(
        _ e: Shareledger_Events_V1_ShareCreated, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        let actor = d.actor
        try d.requireSignedIn(txn)
        try requireOwner(e.ownerName, actor)
        guard ShareToken(e.token) != nil, try m.share(txn, e.token) == nil else {
            throw Self.refuse("the share token is not valid or in use")
        }
        let root = e.rootRecordName.isEmpty ? nil : e.rootRecordName
        let (_, reused) = try d.checkNewShare(
            txn, zoneName: e.zoneName, root: root, publicPermission: e.publicPermission, title: e.title)
        if let reused, reused != e.token {
            throw Self.refuse("an earlier share of the same \(root == nil ? "zone" : "root") had token \(reused), which is kept")
        }
        if root == nil, e.shareRecordName != Share.zoneWideShareRecordName {
            throw Self.refuse("a zone-wide share's record is named \(Share.zoneWideShareRecordName)")
        }
    }

    func checkShareDeleted(
        _ e: Shareledger_Events_V1_ShareDeleted, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let actor = d.actor
        try d.requireSignedIn(txn)
        let share = try d.liveShare(txn, e.token)
        guard share.ownerName == actor else { throw Self.refuse("only the share's owner deletes it") }
    }

    func checkShareTitleChanged(
        _ e: Shareledger_Events_V1_ShareTitleChanged, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        try requireManagerOf(e.token, d, txn)
        try Decider.checkTitle(e.title)
    }

    func checkPublicPermissionChanged(
        _ e: Shareledger_Events_V1_PublicPermissionChanged, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let share = try requireManagerOf(e.token, d, txn, ownerOnly: true)
        guard e.oldPermission == share.publicPermission, e.newPermission != e.oldPermission,
            e.newPermission == .none || Decider.isPublic(e.newPermission)
        else { throw Self.refuse("the permissions do not follow the share's public permission \(share.publicPermission)") }
    }

    func checkAccessRequestsAllowedChanged(
        _ e: Shareledger_Events_V1_AccessRequestsAllowedChanged, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let share = try requireManagerOf(e.token, d, txn)
        guard share.allowsAccessRequests != e.allowed else {
            throw Self.refuse("access requests are \(e.allowed ? "allowed" : "not allowed") already")
        }
    }
}
