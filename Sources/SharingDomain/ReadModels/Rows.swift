import EventLog
import Foundation

// The rows every share action reads or writes, as plain structs.
//
// They used to be the messages generated from `Protos/shareledger/readmodels/v1`: a share or a
// participant kept its fields in a heap-allocated storage class (copied whole on the first change
// of a shared copy), every read went through `SwiftProtobuf.Message` existentials and dynamic
// casts, and the writer's row cache boxed each row. These structs have the same fields, names and
// defaults, so the domain code reads the same; they are stored only in the compact layout
// (``CompactRow``, byte layouts in docs/log-format.md), and rows an earlier release wrote as
// protobuf are read through the generated messages (``init(legacy:)``), which stay for that and
// for the layout's documentation.

/// A registered user (`rm_users`).
package struct UserState: Equatable, Sendable {
    package var emailAddress = ""
    package var phoneNumber = ""
    package var givenName = ""
    package var familyName = ""
    package var registeredAtMicros: Int64 = 0
    package var middleName = ""
    package var nickname = ""
    /// The sealed personal data (unset: the user's data is in plaintext or was never given).
    package var sealed: Shareledger_Events_V1_SealedPersonalData {
        get { _sealed ?? Shareledger_Events_V1_SealedPersonalData() }
        set { _sealed = newValue }
    }
    package var hasSealed: Bool { _sealed != nil }
    package mutating func clearSealed() { _sealed = nil }
    package var emailHash = Data()
    package var phoneHash = Data()
    package var forgottenAtMicros: Int64 = 0

    private var _sealed: Shareledger_Events_V1_SealedPersonalData?

    package init() {}

    /// The row an earlier release stored as protobuf.
    package init(legacy m: Shareledger_Readmodels_V1_UserState) {
        (emailAddress, phoneNumber, givenName, familyName) = (m.emailAddress, m.phoneNumber, m.givenName, m.familyName)
        (registeredAtMicros, middleName, nickname) = (m.registeredAtMicros, m.middleName, m.nickname)
        if m.hasSealed { _sealed = m.sealed }
        (emailHash, phoneHash, forgottenAtMicros) = (m.emailHash, m.phoneHash, m.forgottenAtMicros)
    }
}

/// A record zone of an owner (`rm_zones`).
package struct ZoneState: Equatable, Sendable {
    package var zoneID: UInt64 = 0
    package var capabilities: UInt32 = 0
    package var zoneShareToken = ""
    package var lastZoneShareToken = ""
    package var hierarchyShareCount: UInt32 = 0
    package var createdAtMicros: Int64 = 0

    package init() {}

    /// The row an earlier release stored as protobuf.
    package init(legacy m: Shareledger_Readmodels_V1_ZoneState) {
        (zoneID, capabilities, zoneShareToken) = (m.zoneID, m.capabilities, m.zoneShareToken)
        (lastZoneShareToken, hierarchyShareCount, createdAtMicros) = (m.lastZoneShareToken, m.hierarchyShareCount, m.createdAtMicros)
    }
}

/// A share (`rm_shares`).
package struct ShareState: Equatable, Sendable {
    package var container = ""
    package var ownerName = ""
    package var zoneName = ""
    package var zoneID: UInt64 = 0
    package var shareRecordName = ""
    package var rootRecordName = ""
    package var title = ""
    package var publicPermission: Shareledger_Events_V1_Permission = .unknown
    package var changeTag: UInt64 = 0
    package var createdAtMicros: Int64 = 0
    package var ownerParticipantID = ""
    package var activeParticipantCount: UInt32 = 0
    package var unmatchedPendingCount: UInt32 = 0
    package var allowsAccessRequests = false
    /// The sealed title (unset: the title is in plaintext).
    package var sealedTitle: Shareledger_Events_V1_SealedPersonalData {
        get { _sealedTitle ?? Shareledger_Events_V1_SealedPersonalData() }
        set { _sealedTitle = newValue }
    }
    package var hasSealedTitle: Bool { _sealedTitle != nil }
    package mutating func clearSealedTitle() { _sealedTitle = nil }

    private var _sealedTitle: Shareledger_Events_V1_SealedPersonalData?

    package init() {}

    /// The row an earlier release stored as protobuf.
    package init(legacy m: Shareledger_Readmodels_V1_ShareState) {
        (container, ownerName, zoneName, zoneID) = (m.container, m.ownerName, m.zoneName, m.zoneID)
        (shareRecordName, rootRecordName, title) = (m.shareRecordName, m.rootRecordName, m.title)
        (publicPermission, changeTag, createdAtMicros) = (m.publicPermission, m.changeTag, m.createdAtMicros)
        (ownerParticipantID, activeParticipantCount) = (m.ownerParticipantID, m.activeParticipantCount)
        (unmatchedPendingCount, allowsAccessRequests) = (m.unmatchedPendingCount, m.allowsAccessRequests)
        if m.hasSealedTitle { _sealedTitle = m.sealedTitle }
    }
}

/// A participant of a share (`rm_participants`).
package struct ParticipantState: Equatable, Sendable {
    package var userRecordName = ""
    /// How the participant was invited (unset: the owner's own entry, or a public participant).
    package var lookupInfo: Shareledger_Events_V1_LookupInfo {
        get { _lookupInfo ?? Shareledger_Events_V1_LookupInfo() }
        set { _lookupInfo = newValue }
    }
    package var hasLookupInfo: Bool { _lookupInfo != nil }
    package mutating func clearLookupInfo() { _lookupInfo = nil }
    package var role: Shareledger_Events_V1_Role = .unknown
    package var permission: Shareledger_Events_V1_Permission = .unknown
    package var status: Shareledger_Events_V1_AcceptanceStatus = .statusUnknown
    package var addedAtMicros: Int64 = 0
    package var approvedRequester = false
    package var oneTimeToken = ""
    /// The invitation's sealed email or phone (unset: in plaintext, or none).
    package var sealedLookup: Shareledger_Events_V1_SealedPersonalData {
        get { _sealedLookup ?? Shareledger_Events_V1_SealedPersonalData() }
        set { _sealedLookup = newValue }
    }
    package var hasSealedLookup: Bool { _sealedLookup != nil }
    package mutating func clearSealedLookup() { _sealedLookup = nil }
    package var emailHash = Data()
    package var phoneHash = Data()
    package var forgottenAtMicros: Int64 = 0

    private var _lookupInfo: Shareledger_Events_V1_LookupInfo?
    private var _sealedLookup: Shareledger_Events_V1_SealedPersonalData?

    package init() {}

    /// The row an earlier release stored as protobuf.
    package init(legacy m: Shareledger_Readmodels_V1_ParticipantState) {
        userRecordName = m.userRecordName
        if m.hasLookupInfo { _lookupInfo = m.lookupInfo }
        (role, permission, status, addedAtMicros) = (m.role, m.permission, m.status, m.addedAtMicros)
        (approvedRequester, oneTimeToken) = (m.approvedRequester, m.oneTimeToken)
        if m.hasSealedLookup { _sealedLookup = m.sealedLookup }
        (emailHash, phoneHash, forgottenAtMicros) = (m.emailHash, m.phoneHash, m.forgottenAtMicros)
    }
}
