import EventLog
import Foundation

// MARK: - Conversions between the public types and the protobuf messages

extension PBRole {
    package var role: Share.Participant.Role { Share.Participant.Role(rawValue: rawValue) ?? .unknown }
    package init(_ role: Share.Participant.Role) { self = PBRole(rawValue: role.rawValue) ?? .unknown }
}

extension PBPermission {
    package var permission: Share.Participant.Permission { Share.Participant.Permission(rawValue: rawValue) ?? .unknown }
    package init(_ permission: Share.Participant.Permission) { self = PBPermission(rawValue: permission.rawValue) ?? .unknown }
}

extension PBStatus {
    package var status: Share.Participant.AcceptanceStatus { Share.Participant.AcceptanceStatus(rawValue: rawValue) ?? .unknown }
    package init(_ status: Share.Participant.AcceptanceStatus) { self = PBStatus(rawValue: status.rawValue) ?? .statusUnknown }
}

extension PBLookupInfo {
    package var lookupInfo: LookupInfo? {
        if !emailAddress.isEmpty { return LookupInfo(emailAddress: emailAddress) }
        if !phoneNumber.isEmpty { return LookupInfo(phoneNumber: phoneNumber) }
        if !userRecordName.isEmpty { return LookupInfo(userRecordID: RecordID(userRecordName: userRecordName)) }
        return nil
    }

    package init(_ lookup: LookupInfo) {
        self.init()
        if let email = lookup.emailAddress { emailAddress = email }
        if let phone = lookup.phoneNumber { phoneNumber = phone }
        if let id = lookup.userRecordID { userRecordName = id.recordName }
    }
}

extension FieldValue {
    package init(_ value: PB, zoneID: RecordZoneID) {
        switch value.value {
        case .stringValue(let s): self = .string(s)
        case .int64Value(let i): self = .int64(i)
        case .doubleValue(let d): self = .double(d)
        case .dateMicros(let micros): self = .date(Date(micros: micros))
        case .bytesValue(let data): self = .bytes(Array(data))
        case .reference(let reference): self = .reference(RecordID(recordName: reference.recordName, zoneID: zoneID))
        case .list(let list): self = .list(list.values.map { FieldValue($0, zoneID: zoneID) })
        case .none: self = .list([])
        }
    }

    package var message: PB {
        var out = PB()
        switch self {
        case .string(let s): out.stringValue = s
        case .int64(let i): out.int64Value = i
        case .double(let d): out.doubleValue = d
        // Deciders refuse dates outside `FieldValue.dateRange` first; clamped so that nothing can trap here.
        case .date(let date): out.dateMicros = CheckedConversion.int64(clamping: date.timeIntervalSince1970 * 1_000_000)
        case .bytes(let bytes): out.bytesValue = Data(bytes)
        case .reference(let id):
            var reference = Shareledger_Events_V1_Reference()
            reference.recordName = id.recordName
            out.reference = reference
        case .list(let values):
            var list = Shareledger_Events_V1_FieldValueList()
            list.values = values.map(\.message)
            out.list = list
        }
        return out
    }
}

extension Date {
    /// The date `micros` microseconds after 1970 (how events and rows store times).
    package init(micros: Int64) { self.init(timeIntervalSince1970: Double(micros) / 1_000_000) }
}
