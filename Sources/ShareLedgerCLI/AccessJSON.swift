import Foundation
import ShareLedger
import ShareLedgerAudit

/// `access --json`: enums by name and times in ISO 8601, like every other command's JSON.
struct AccessJSON: Encodable {
    struct Entry: Encodable {
        var participantID: String
        var userRecordName: String?
        var role: String
        var permission: String
        var acceptanceStatus: String
        var hadAccess: Bool
        var isApprovedRequester: Bool?
    }

    var position: UInt64
    var recordedAt: String
    var existed: Bool
    var publicPermission: String
    var participants: [Entry]
    var allowsAccessRequests: Bool?
    var requesters: [String]?
    var blockedIdentities: [String]?

    init(_ access: ShareAccess) {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        position = access.position
        recordedAt = formatter.string(from: access.recordedAt)
        existed = access.existed
        publicPermission = access.publicPermission.description
        participants = access.participants.map {
            Entry(
                participantID: $0.participantID, userRecordName: $0.userRecordName, role: $0.role.description,
                permission: $0.permission.description, acceptanceStatus: $0.acceptanceStatus.description,
                hadAccess: $0.hadAccess, isApprovedRequester: $0.isApprovedRequester ? true : nil)
        }
        // Absent unless used, so the JSON of shares without access requests is as before.
        allowsAccessRequests = access.allowsAccessRequests ? true : nil
        requesters = access.requesters.isEmpty ? nil : access.requesters
        blockedIdentities = access.blockedIdentities.isEmpty ? nil : access.blockedIdentities
    }
}
