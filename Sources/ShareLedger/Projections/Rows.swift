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
struct UserState: Equatable, Sendable {
    var emailAddress = ""
    var phoneNumber = ""
    var givenName = ""
    var familyName = ""
    var registeredAtMicros: Int64 = 0
    var middleName = ""
    var nickname = ""
    /// The sealed personal data (unset: the user's data is in plaintext or was never given).
    var sealed: Shareledger_Events_V1_SealedPersonalData {
        get { _sealed ?? Shareledger_Events_V1_SealedPersonalData() }
        set { _sealed = newValue }
    }
    var hasSealed: Bool { _sealed != nil }
    mutating func clearSealed() { _sealed = nil }
    var emailHash = Data()
    var phoneHash = Data()
    var forgottenAtMicros: Int64 = 0

    private var _sealed: Shareledger_Events_V1_SealedPersonalData?

    init() {}

    /// The row an earlier release stored as protobuf.
    init(legacy m: Shareledger_Readmodels_V1_UserState) {
        (emailAddress, phoneNumber, givenName, familyName) = (m.emailAddress, m.phoneNumber, m.givenName, m.familyName)
        (registeredAtMicros, middleName, nickname) = (m.registeredAtMicros, m.middleName, m.nickname)
        if m.hasSealed { _sealed = m.sealed }
        (emailHash, phoneHash, forgottenAtMicros) = (m.emailHash, m.phoneHash, m.forgottenAtMicros)
    }
}

/// A record zone of an owner (`rm_zones`).
struct ZoneState: Equatable, Sendable {
    var zoneID: UInt64 = 0
    var capabilities: UInt32 = 0
    var zoneShareToken = ""
    var lastZoneShareToken = ""
    var hierarchyShareCount: UInt32 = 0
    var createdAtMicros: Int64 = 0

    init() {}

    /// The row an earlier release stored as protobuf.
    init(legacy m: Shareledger_Readmodels_V1_ZoneState) {
        (zoneID, capabilities, zoneShareToken) = (m.zoneID, m.capabilities, m.zoneShareToken)
        (lastZoneShareToken, hierarchyShareCount, createdAtMicros) = (m.lastZoneShareToken, m.hierarchyShareCount, m.createdAtMicros)
    }
}

/// A share (`rm_shares`).
struct ShareState: Equatable, Sendable {
    var container = ""
    var ownerName = ""
    var zoneName = ""
    var zoneID: UInt64 = 0
    var shareRecordName = ""
    var rootRecordName = ""
    var title = ""
    var publicPermission: Shareledger_Events_V1_Permission = .unknown
    var changeTag: UInt64 = 0
    var createdAtMicros: Int64 = 0
    var ownerParticipantID = ""
    var activeParticipantCount: UInt32 = 0
    var unmatchedPendingCount: UInt32 = 0
    var allowsAccessRequests = false
    /// The sealed title (unset: the title is in plaintext).
    var sealedTitle: Shareledger_Events_V1_SealedPersonalData {
        get { _sealedTitle ?? Shareledger_Events_V1_SealedPersonalData() }
        set { _sealedTitle = newValue }
    }
    var hasSealedTitle: Bool { _sealedTitle != nil }
    mutating func clearSealedTitle() { _sealedTitle = nil }

    private var _sealedTitle: Shareledger_Events_V1_SealedPersonalData?

    init() {}

    /// The row an earlier release stored as protobuf.
    init(legacy m: Shareledger_Readmodels_V1_ShareState) {
        (container, ownerName, zoneName, zoneID) = (m.container, m.ownerName, m.zoneName, m.zoneID)
        (shareRecordName, rootRecordName, title) = (m.shareRecordName, m.rootRecordName, m.title)
        (publicPermission, changeTag, createdAtMicros) = (m.publicPermission, m.changeTag, m.createdAtMicros)
        (ownerParticipantID, activeParticipantCount) = (m.ownerParticipantID, m.activeParticipantCount)
        (unmatchedPendingCount, allowsAccessRequests) = (m.unmatchedPendingCount, m.allowsAccessRequests)
        if m.hasSealedTitle { _sealedTitle = m.sealedTitle }
    }
}

/// A participant of a share (`rm_participants`).
struct ParticipantState: Equatable, Sendable {
    var userRecordName = ""
    /// How the participant was invited (unset: the owner's own entry, or a public participant).
    var lookupInfo: Shareledger_Events_V1_LookupInfo {
        get { _lookupInfo ?? Shareledger_Events_V1_LookupInfo() }
        set { _lookupInfo = newValue }
    }
    var hasLookupInfo: Bool { _lookupInfo != nil }
    mutating func clearLookupInfo() { _lookupInfo = nil }
    var role: Shareledger_Events_V1_Role = .unknown
    var permission: Shareledger_Events_V1_Permission = .unknown
    var status: Shareledger_Events_V1_AcceptanceStatus = .statusUnknown
    var addedAtMicros: Int64 = 0
    var approvedRequester = false
    var oneTimeToken = ""
    /// The invitation's sealed email or phone (unset: in plaintext, or none).
    var sealedLookup: Shareledger_Events_V1_SealedPersonalData {
        get { _sealedLookup ?? Shareledger_Events_V1_SealedPersonalData() }
        set { _sealedLookup = newValue }
    }
    var hasSealedLookup: Bool { _sealedLookup != nil }
    mutating func clearSealedLookup() { _sealedLookup = nil }
    var emailHash = Data()
    var phoneHash = Data()
    var forgottenAtMicros: Int64 = 0

    private var _lookupInfo: Shareledger_Events_V1_LookupInfo?
    private var _sealedLookup: Shareledger_Events_V1_SealedPersonalData?

    init() {}

    /// The row an earlier release stored as protobuf.
    init(legacy m: Shareledger_Readmodels_V1_ParticipantState) {
        userRecordName = m.userRecordName
        if m.hasLookupInfo { _lookupInfo = m.lookupInfo }
        (role, permission, status, addedAtMicros) = (m.role, m.permission, m.status, m.addedAtMicros)
        (approvedRequester, oneTimeToken) = (m.approvedRequester, m.oneTimeToken)
        if m.hasSealedLookup { _sealedLookup = m.sealedLookup }
        (emailHash, phoneHash, forgottenAtMicros) = (m.emailHash, m.phoneHash, m.forgottenAtMicros)
    }
}
