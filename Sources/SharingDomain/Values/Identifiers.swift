import EventLog
import Foundation

/// Identifies a record zone: its name and the user record name of its owner (CloudKit's
/// `CKRecordZone.ID`).
///
/// In the owner's own calls the owner may be written as ``RecordZoneID/defaultOwnerName``
/// (`__defaultOwner__`, CloudKit's `CKCurrentUserDefaultName`); the ledger stores and returns the
/// owner's real user record name.
public struct RecordZoneID: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The zone's name, unique among the owner's zones.
    public var zoneName: String
    /// The owner's user record name, or ``defaultOwnerName`` for "the acting user".
    public var ownerName: String

    /// CloudKit's name for "the current user" as a zone owner (`CKCurrentUserDefaultName`).
    public static let defaultOwnerName = "__defaultOwner__"
    /// CloudKit's name of the default zone. Shares need a custom zone, so the ledger keeps no records there.
    public static let defaultZoneName = "_defaultZone"

    /// Makes a zone id; the owner defaults to the acting user.
    public init(zoneName: String, ownerName: String = RecordZoneID.defaultOwnerName) {
        self.zoneName = zoneName
        self.ownerName = ownerName
    }

    /// `zoneName` owned by `ownerName`.
    public var description: String { "\(zoneName) (owner \(ownerName))" }
}

/// Identifies a record: its name and its zone (CloudKit's `CKRecord.ID`).
public struct RecordID: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The record's name, unique in its zone.
    public var recordName: String
    /// The zone that holds it.
    public var zoneID: RecordZoneID

    /// Makes a record id.
    public init(recordName: String, zoneID: RecordZoneID) {
        self.recordName = recordName
        self.zoneID = zoneID
    }

    /// A user's record id: CloudKit keeps user records in the default zone.
    public init(userRecordName: String) {
        self.init(recordName: userRecordName, zoneID: RecordZoneID(zoneName: RecordZoneID.defaultZoneName))
    }

    /// The record name and its zone.
    public var description: String { "\(recordName) in \(zoneID)" }
}

/// How to find a user: by email address, phone number or user record id; exactly one is set
/// (CloudKit's `CKUserIdentity.LookupInfo`).
public struct LookupInfo: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The email address, if the lookup is by email.
    public let emailAddress: String?
    /// The phone number, if the lookup is by phone.
    public let phoneNumber: String?
    /// The user record id, if the lookup is by account.
    public let userRecordID: RecordID?

    /// A lookup by email address.
    public init(emailAddress: String) {
        self.emailAddress = emailAddress
        self.phoneNumber = nil
        self.userRecordID = nil
    }

    /// A lookup by phone number.
    public init(phoneNumber: String) {
        self.emailAddress = nil
        self.phoneNumber = phoneNumber
        self.userRecordID = nil
    }

    /// A lookup by user record id.
    public init(userRecordID: RecordID) {
        self.emailAddress = nil
        self.phoneNumber = nil
        self.userRecordID = userRecordID
    }

    /// What the lookup is by, for messages and logs: the user record name of a lookup by account;
    /// for an email address or phone number only a placeholder (``PersonalData/redact(_:as:)``, e.g.
    /// `<email #3f2a91c0d4e1>`), never the address or number itself. Equal addresses give equal
    /// descriptions within one process.
    public var description: String {
        if let emailAddress { return PersonalData.redact(emailAddress, as: .emailAddress) }
        if let phoneNumber { return PersonalData.redact(phoneNumber, as: .phoneNumber) }
        return "user \(userRecordID?.recordName ?? "?")"
    }
}

/// A user as others see them (CloudKit's `CKUserIdentity`).
public struct UserIdentity: Sendable, Hashable, Codable {
    /// The user's record id; `nil` for an invitee with no account yet.
    public var userRecordID: RecordID?
    /// How the user was looked up (for an invitee: the email or phone the invitation went to).
    public var lookupInfo: LookupInfo?
    /// The user's name, when known.
    public var nameComponents: PersonNameComponents?
    /// Whether the identity belongs to an account. `false` for an invitation to an email or phone that
    /// no account has claimed yet.
    public var hasiCloudAccount: Bool
    /// `true` when the user's personal data (email, phone, name) was forgotten on request
    /// (`ShareLedger.forget(user:in:requestedBy:)`), or, for a participant, the email or phone the
    /// invitation went to was (`ShareLedger.forget(address:in:requestedBy:)`): the ledger can no
    /// longer read it. `nil` otherwise.
    public var personalDataErased: Bool?

    /// Makes an identity.
    public init(
        userRecordID: RecordID?, lookupInfo: LookupInfo?, nameComponents: PersonNameComponents?, hasiCloudAccount: Bool
    ) {
        self.userRecordID = userRecordID
        self.lookupInfo = lookupInfo
        self.nameComponents = nameComponents
        self.hasiCloudAccount = hasiCloudAccount
    }
}
