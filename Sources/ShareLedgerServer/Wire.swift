import Foundation
import ShareLedger

/// The ledger's values in CloudKit Web Services' JSON (record, share, participant, user identity and
/// ShortGUID Result dictionaries), and records read back from it.
enum Wire {
    static func millis(_ date: Date?) -> JSONValue {
        .int(Int64(((date ?? Date(timeIntervalSince1970: 0)).timeIntervalSince1970 * 1_000).rounded()))
    }

    static func zoneID(_ id: RecordZoneID) -> JSONValue {
        ["zoneName": .string(id.zoneName), "ownerRecordName": .string(id.ownerName), "zoneType": "REGULAR_CUSTOM_ZONE"]
    }

    static func reference(_ id: RecordID) -> JSONValue {
        ["recordName": .string(id.recordName), "zoneID": zoneID(id.zoneID), "action": "NONE"]
    }

    // MARK: - Records

    static func record(_ record: Record, desiredKeys: Set<String>? = nil) -> JSONValue {
        var fields: [String: JSONValue] = [:]
        for (key, value) in record.fields where desiredKeys?.contains(key) ?? true {
            fields[key] = field(value)
        }
        var object: [String: JSONValue] = [
            "recordName": .string(record.recordID.recordName),
            "recordType": .string(record.recordType),
            "zoneID": zoneID(record.recordID.zoneID),
            "fields": .object(fields),
            "deleted": false,
        ]
        if let tag = record.recordChangeTag { object["recordChangeTag"] = .string(tag) }
        let modifier: JSONValue = record.lastModifiedUserRecordID.map { .string($0.recordName) } ?? .null
        object["created"] = ["timestamp": millis(record.creationDate), "userRecordName": modifier]
        object["modified"] = ["timestamp": millis(record.modificationDate), "userRecordName": modifier]
        if let parent = record.parent { object["parent"] = ["recordName": .string(parent.recordName)] }
        if let share = record.share { object["share"] = reference(share) }
        return .object(object)
    }

    static func field(_ value: FieldValue) -> JSONValue {
        let (json, type) = fieldValue(value)
        return ["value": json, "type": .string(type)]
    }

    private static func fieldValue(_ value: FieldValue) -> (JSONValue, String) {
        switch value {
        case .string(let text): return (.string(text), "STRING")
        case .int64(let number): return (.int(number), "INT64")
        case .double(let number): return (.double(number), "DOUBLE")
        case .date(let date): return (millis(date), "TIMESTAMP")
        case .bytes(let bytes): return (.string(Data(bytes).base64EncodedString()), "BYTES")
        case .reference(let id): return (reference(id), "REFERENCE")
        case .list(let values):
            let items = values.map(fieldValue)
            return (.array(items.map(\.0)), (items.first?.1 ?? "STRING") + "_LIST")
        }
    }

    /// A field of a request: `{value, type?}` (without `type`, strings, integers and doubles are inferred).
    static func parseField(_ json: JSONValue, path: String) throws(WireError) -> FieldValue {
        let value = try json.required("value", in: path)
        let type = try json.optionalString("type", in: path)
        return try parseFieldValue(value, type: type, path: path + ".value")
    }

    private static func parseFieldValue(_ value: JSONValue, type: String?, path: String) throws(WireError) -> FieldValue {
        switch type {
        case "STRING": return .string(try value.string(path))
        case "INT64": return .int64(try value.int64(path))
        case "DOUBLE": return .double(try value.double(path))
        case "TIMESTAMP": return .date(Date(timeIntervalSince1970: Double(try value.int64(path)) / 1_000))
        case "BYTES":
            guard let data = Data(base64Encoded: try value.string(path)) else { throw WireError.wrongType(path, "base64") }
            return .bytes(Array(data))
        case "REFERENCE":
            let name = try value.required("recordName", in: path).string(path + ".recordName")
            let zone = try value["zoneID"].map { zone throws(WireError) in try parseZoneID(zone, path: path + ".zoneID") }
            return .reference(RecordID(recordName: name, zoneID: zone ?? RecordZoneID(zoneName: RecordZoneID.defaultZoneName)))
        case let list? where list.hasSuffix("_LIST"):
            let element = String(list.dropLast(5))
            var items: [FieldValue] = []
            for (index, item) in try value.array(path).enumerated() {
                items.append(try parseFieldValue(item, type: element, path: "\(path)[\(index)]"))
            }
            return .list(items)
        case nil:
            switch value {
            case .string(let text): return .string(text)
            case .int(let number): return .int64(number)
            case .double(let number): return .double(number)
            default: throw WireError(.badRequest, "\(path): give the field's type")
            }
        case let other?:
            throw WireError(.badRequest, "\(path): unknown field type \(other.prefix(32))")
        }
    }

    /// `{zoneName, ownerRecordName?}`; no owner means the caller's own zone.
    static func parseZoneID(_ json: JSONValue, path: String) throws(WireError) -> RecordZoneID {
        let name = try json.required("zoneName", in: path).string(path + ".zoneName")
        let owner = try json.optionalString("ownerRecordName", in: path)
        _ = try json.optionalString("zoneType", in: path)
        return RecordZoneID(zoneName: name, ownerName: owner ?? RecordZoneID.defaultOwnerName)
    }

    // MARK: - Shares

    static func permission(_ permission: Share.Participant.Permission) -> JSONValue {
        switch permission {
        case .none: return "NONE"
        case .readOnly: return "READ_ONLY"
        case .readWrite: return "READ_WRITE"
        default: return "UNKNOWN"
        }
    }

    static func parsePermission(_ json: JSONValue, path: String) throws(WireError) -> Share.Participant.Permission {
        switch try json.string(path) {
        case "NONE": return .none
        case "READ_ONLY": return .readOnly
        case "READ_WRITE": return .readWrite
        default: throw WireError(.badRequest, "\(path) must be NONE, READ_ONLY or READ_WRITE")
        }
    }

    static func type(_ role: Share.Participant.Role) -> JSONValue {
        switch role {
        case .owner: return "OWNER"
        case .administrator: return "ADMINISTRATOR"
        case .privateUser: return "USER"
        case .publicUser: return "PUBLIC_USER"
        default: return "UNKNOWN"
        }
    }

    static func status(_ status: Share.Participant.AcceptanceStatus) -> JSONValue {
        switch status {
        case .pending: return "INVITED"
        case .accepted: return "ACCEPTED"
        case .removed: return "REMOVED"
        default: return "UNKNOWN"
        }
    }

    static func lookupInfo(_ info: LookupInfo?) -> JSONValue {
        var object: [String: JSONValue] = [:]
        if let email = info?.emailAddress { object["emailAddress"] = .string(email) }
        if let phone = info?.phoneNumber { object["phoneNumber"] = .string(phone) }
        if let id = info?.userRecordID { object["userRecordName"] = .string(id.recordName) }
        return .object(object)
    }

    static func identity(_ identity: UserIdentity) -> JSONValue {
        var object: [String: JSONValue] = ["lookupInfo": lookupInfo(identity.lookupInfo)]
        if let id = identity.userRecordID { object["userRecordName"] = .string(id.recordName) }
        if let names = identity.nameComponents {
            var components: [String: JSONValue] = [:]
            if let given = names.givenName { components["givenName"] = .string(given) }
            if let family = names.familyName { components["familyName"] = .string(family) }
            if let middle = names.middleName { components["middleName"] = .string(middle) }
            if let nickname = names.nickname { components["nickname"] = .string(nickname) }
            object["nameComponents"] = .object(components)
        }
        return .object(object)
    }

    static func participant(_ participant: Share.Participant) -> JSONValue {
        [
            "participantId": .string(participant.participantID),
            "userIdentity": identity(participant.userIdentity),
            "permission": permission(participant.permission),
            "type": type(participant.role),
            "acceptanceStatus": status(participant.acceptanceStatus),
        ]
    }

    /// The `cloudkit.share` record dictionary. The share's URL is in `fields.cloudkit.shareURL` and
    /// its token (what resolve and accept take) in `shortGUID`.
    static func share(_ share: Share) -> JSONValue {
        var fields: [String: JSONValue] = ["cloudkit.shareURL": field(.string(share.url.absoluteString))]
        if let title = share.title { fields["cloudkit.title"] = field(.string(title)) }
        var object: [String: JSONValue] = [
            "recordName": .string(share.recordID.recordName),
            "recordType": .string(Share.recordType),
            "recordChangeTag": .string(share.recordChangeTag),
            "zoneID": zoneID(share.recordID.zoneID),
            "fields": .object(fields),
            "shortGUID": .string(share.token.text),
            "publicPermission": permission(share.publicPermission),
            "participants": .array(share.participants.map(participant)),
            "owner": participant(share.owner),
            "created": [
                "timestamp": millis(share.creationDate),
                "userRecordName": .string(share.owner.userIdentity.userRecordID?.recordName ?? ""),
            ],
            "deleted": false,
        ]
        if let current = share.currentUserParticipant { object["currentUserParticipant"] = participant(current) }
        if let root = share.hierarchicalRootRecordID { object["share"] = reference(root) }
        return .object(object)
    }

    /// The ShortGUID Result dictionary of `records/resolve` and `records/accept`.
    static func shortGUIDResult(
        _ metadata: Share.Metadata, shortGUID: JSONValue, environment: String, caller: String, desiredKeys: Set<String>?
    ) -> JSONValue {
        let ownerName = metadata.ownerIdentity.userRecordID?.recordName
        var object: [String: JSONValue] = [
            "shortGUID": shortGUID,
            "containerIdentifier": .string(metadata.containerIdentifier),
            "environment": .string(environment),
            "databaseScope": ownerName == caller ? "PRIVATE" : "SHARED",
            "zoneID": zoneID(metadata.share.recordID.zoneID),
            "share": share(metadata.share),
            "ownerIdentity": identity(metadata.ownerIdentity),
            "participantStatus": status(metadata.participantStatus),
            "participantPermission": permission(metadata.participantPermission),
            "participantType": type(metadata.participantRole),
        ]
        if let root = metadata.hierarchicalRootRecordID { object["rootRecordName"] = .string(root.recordName) }
        if let rootRecord = metadata.rootRecord { object["rootRecord"] = record(rootRecord, desiredKeys: desiredKeys) }
        return .object(object)
    }
}
