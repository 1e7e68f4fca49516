import Foundation
import ShareLedger

/// The ledger's values in CloudKit Web Services' JSON (record, share, participant, user identity and
/// ShortGUID Result dictionaries), and records read back from it.
enum Wire {
    // The writers below put each object's keys in the order `JSONValue` sorts them (`String`'s
    // `<`), so that the bytes are those of the sorted dictionaries the server used to build
    // (JSONWriter's contract; WireRenderingTests).

    /// A date as CloudKit's milliseconds since 1970 (clamped: a stored date always fits, and a
    /// rendering never traps).
    static func millis(_ date: Date?) -> Int64 {
        CheckedConversion.int64(clamping: (date ?? Date(timeIntervalSince1970: 0)).timeIntervalSince1970 * 1_000)
    }

    static func zoneID(_ id: RecordZoneID) -> JSONValue {
        .rendered(JSONWriter.render(capacity: 96) { writeZoneID(id, into: &$0) })
    }

    static func writeZoneID(_ id: RecordZoneID, into out: inout JSONWriter) {
        // `ownerName` repeats `ownerRecordName` (Apple's key) for clients that read that key
        // (MistKit's zone list and lookup); `zoneType` tells the default zone from custom ones.
        out.object { out in
            out.member("ownerName", id.ownerName)
            out.member("ownerRecordName", id.ownerName)
            out.member("zoneName", id.zoneName)
            if id.zoneName == RecordZoneID.defaultZoneName {
                out.member("zoneType", "DEFAULT_ZONE" as StaticString)
            } else {
                out.member("zoneType", "REGULAR_CUSTOM_ZONE" as StaticString)
            }
        }
    }

    static func writeReference(_ id: RecordID, into out: inout JSONWriter) {
        out.object { out in
            out.member("action", "NONE" as StaticString)
            out.member("recordName", id.recordName)
            out.key("zoneID")
            writeZoneID(id.zoneID, into: &out)
        }
    }

    /// `{timestamp, userRecordName}` (`created`, `modified`).
    private static func writeStamp(_ date: Date?, user: String?, into out: inout JSONWriter) {
        out.object { out in
            out.key("timestamp")
            out.int(millis(date))
            out.key("userRecordName")
            if let user { out.string(user) } else { out.null() }
        }
    }

    // MARK: - Records

    static func record(_ record: Record, desiredKeys: Set<String>? = nil) -> JSONValue {
        .rendered(JSONWriter.render { writeRecord(record, desiredKeys: desiredKeys, into: &$0) })
    }

    static func writeRecord(_ record: Record, desiredKeys: Set<String>?, into out: inout JSONWriter) {
        let modifier = record.lastModifiedUserRecordID?.recordName
        out.object { out in
            out.key("created")
            writeStamp(record.creationDate, user: record.creatorUserRecordID?.recordName, into: &out)
            out.key("deleted")
            out.bool(false)
            out.key("fields")
            out.object { out in
                for (key, value) in record.fields.sorted(by: { $0.key < $1.key }) where desiredKeys?.contains(key) ?? true {
                    out.key(key)
                    writeField(value, into: &out)
                }
            }
            out.key("modified")
            writeStamp(record.modificationDate, user: modifier, into: &out)
            if let parent = record.parent {
                out.key("parent")
                out.object { out in
                    out.member("recordName", parent.recordName)
                }
            }
            out.member("recordChangeTag", record.recordChangeTag)
            out.member("recordName", record.recordID.recordName)
            out.member("recordType", record.recordType)
            if let share = record.share {
                out.key("share")
                writeReference(share, into: &out)
            }
            out.key("zoneID")
            writeZoneID(record.recordID.zoneID, into: &out)
        }
    }

    /// `{type, value}`.
    static func writeField(_ value: FieldValue, into out: inout JSONWriter) {
        out.object { out in
            out.member("type", fieldType(value))
            out.key("value")
            writeFieldValue(value, into: &out)
        }
    }

    private static func fieldType(_ value: FieldValue) -> String {
        switch value {
        case .string: return "STRING"
        case .int64: return "INT64"
        case .double: return "DOUBLE"
        case .date: return "TIMESTAMP"
        case .bytes: return "BYTES"
        case .reference: return "REFERENCE"
        case .list(let values): return (values.first.map(fieldType) ?? "STRING") + "_LIST"
        }
    }

    private static func writeFieldValue(_ value: FieldValue, into out: inout JSONWriter) {
        switch value {
        case .string(let text): out.string(text)
        case .int64(let number): out.int(number)
        case .double(let number): out.value(.double(number))
        case .date(let date): out.int(millis(date))
        case .bytes(let bytes): out.string(Data(bytes).base64EncodedString())
        case .reference(let id): writeReference(id, into: &out)
        case .list(let values):
            out.array { out in
                for item in values { writeFieldValue(item, into: &out) }
            }
        }
    }

    /// A field of a request: `{value, type?}`. Without `type`, the type of `existing` (the record's
    /// current value of the field) when there is one, else the value's JSON form: a string is a
    /// STRING, an integer an INT64, another number a DOUBLE, an object with `recordName` a REFERENCE,
    /// a list the list of its items' type (an empty list has none to keep).
    static func parseField(_ json: JSONValue, path: String, existing: FieldValue? = nil) throws(WireError) -> FieldValue {
        let value = try json.required("value", in: path)
        let type = try json.optionalString("type", in: path) ?? existing.flatMap(typeToKeep)
        return try parseFieldValue(value, type: type, path: path + ".value")
    }

    /// The type an untyped value takes from the field's current value (none for an empty list).
    private static func typeToKeep(_ value: FieldValue) -> String? {
        if case .list(let items) = value, items.isEmpty { return nil }
        return fieldType(value)
    }

    /// The type of an untyped JSON value, or nil when it has none CloudKit could store.
    private static func inferredType(_ value: JSONValue) -> String? {
        switch value {
        case .string: return "STRING"
        case .int: return "INT64"
        case .double: return "DOUBLE"
        case .object(let object) where object["recordName"] != nil: return "REFERENCE"
        case .array(let items):
            let types = Set(items.map(inferredType))
            if types.isEmpty { return "STRING_LIST" }
            if types == ["INT64", "DOUBLE"] { return "DOUBLE_LIST" }
            guard types.count == 1, let only = types.first, let element = only, !element.hasSuffix("_LIST") else { return nil }
            return element + "_LIST"
        default: return nil
        }
    }

    private static func parseFieldValue(_ value: JSONValue, type: String?, path: String) throws(WireError) -> FieldValue {
        switch type {
        case "STRING": return .string(try value.string(path))
        case "INT64": return .int64(try value.int64(path))
        case "DOUBLE": return .double(try value.finiteDouble(path))
        case "TIMESTAMP": return .date(try timestamp(value, path: path))
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
            guard let inferred = inferredType(value) else {
                throw WireError(.badRequest, "\(path): give the field's type (its value has no type of its own)")
            }
            return try parseFieldValue(value, type: inferred, path: path)
        case let other?:
            throw WireError(.badRequest, "\(path): unknown field type \(other.prefix(32))")
        }
    }

    /// A `TIMESTAMP` value: integer milliseconds since 1970 (a JSON number or a string of one) within
    /// ``FieldValue/dateMillisecondsRange``.
    static func timestamp(_ value: JSONValue, path: String) throws(WireError) -> Date {
        let range = FieldValue.dateMillisecondsRange
        let millis = try value.int64(path, in: range, what: "a TIMESTAMP in milliseconds since 1970")
        return Date(timeIntervalSince1970: Double(millis) / 1_000)
    }

    /// `{zoneName, ownerRecordName?}` (`ownerName`, MistKit's spelling, is read too); no owner
    /// means the caller's own zone.
    static func parseZoneID(_ json: JSONValue, path: String) throws(WireError) -> RecordZoneID {
        let name = try json.required("zoneName", in: path).string(path + ".zoneName")
        // Both are read (and type-checked) whichever is given.
        let recordOwner = try json.optionalString("ownerRecordName", in: path)
        let mistKitOwner = try json.optionalString("ownerName", in: path)
        let owner = recordOwner ?? mistKitOwner
        _ = try json.optionalString("zoneType", in: path)
        return RecordZoneID(zoneName: name, ownerName: owner ?? RecordZoneID.defaultOwnerName)
    }

    // MARK: - Shares

    static func permission(_ permission: Share.Participant.Permission) -> StaticString {
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

    static func type(_ role: Share.Participant.Role) -> StaticString {
        switch role {
        case .owner: return "OWNER"
        case .administrator: return "ADMINISTRATOR"
        case .privateUser: return "USER"
        case .publicUser: return "PUBLIC_USER"
        default: return "UNKNOWN"
        }
    }

    static func status(_ status: Share.Participant.AcceptanceStatus) -> StaticString {
        switch status {
        case .pending: return "INVITED"
        case .accepted: return "ACCEPTED"
        case .removed: return "REMOVED"
        default: return "UNKNOWN"
        }
    }

    static func identity(_ identity: UserIdentity) -> JSONValue {
        .rendered(JSONWriter.render(capacity: 256) { writeIdentity(identity, into: &$0) })
    }

    static func writeIdentity(_ identity: UserIdentity, into out: inout JSONWriter) {
        out.object { out in
            out.key("lookupInfo")
            out.object { out in
                out.member("emailAddress", identity.lookupInfo?.emailAddress)
                out.member("phoneNumber", identity.lookupInfo?.phoneNumber)
                out.member("userRecordName", identity.lookupInfo?.userRecordID?.recordName)
            }
            if let names = identity.nameComponents {
                out.key("nameComponents")
                out.object { out in
                    out.member("familyName", names.familyName)
                    out.member("givenName", names.givenName)
                    out.member("middleName", names.middleName)
                    out.member("nickname", names.nickname)
                }
            }
            out.member("userRecordName", identity.userRecordID?.recordName)
        }
    }

    static func writeParticipant(_ participant: Share.Participant, into out: inout JSONWriter) {
        out.object { out in
            out.member("acceptanceStatus", status(participant.acceptanceStatus))
            out.member("participantId", participant.participantID)
            out.member("permission", permission(participant.permission))
            out.member("type", type(participant.role))
            out.key("userIdentity")
            writeIdentity(participant.userIdentity, into: &out)
        }
    }

    /// The `cloudkit.share` record dictionary. The share's URL is in `fields.cloudkit.shareURL` and
    /// its token (what resolve and accept take) in `shortGUID`.
    static func share(_ share: Share) -> JSONValue {
        .rendered(JSONWriter.render(capacity: 1_024) { writeShare(share, into: &$0) })
    }

    static func writeShare(_ share: Share, into out: inout JSONWriter) {
        out.object { out in
            // The access-request keys (an extension) only when set: the owner's and administrators' view.
            if share.allowsAccessRequests {
                out.key("allowsAccessRequests")
                out.bool(true)
            }
            if !share.blockedIdentities.isEmpty {
                out.key("blockedIdentities")
                out.array { out in
                    for blocked in share.blockedIdentities {
                        out.object { out in
                            out.key("userIdentity")
                            writeIdentity(blocked.userIdentity, into: &out)
                        }
                    }
                }
            }
            out.key("created")
            writeStamp(share.creationDate, user: share.owner.userIdentity.userRecordID?.recordName ?? "", into: &out)
            if let current = share.currentUserParticipant {
                out.key("currentUserParticipant")
                writeParticipant(current, into: &out)
            }
            out.key("deleted")
            out.bool(false)
            out.key("fields")
            out.object { out in
                out.key("cloudkit.shareURL")
                writeField(.string(share.url.absoluteString), into: &out)
                if let title = share.title {
                    out.key("cloudkit.title")
                    writeField(.string(title), into: &out)
                }
            }
            out.key("owner")
            writeParticipant(share.owner, into: &out)
            out.key("participants")
            out.array { out in
                for participant in share.participants { writeParticipant(participant, into: &out) }
            }
            out.member("publicPermission", permission(share.publicPermission))
            out.member("recordChangeTag", share.recordChangeTag)
            out.member("recordName", share.recordID.recordName)
            out.member("recordType", Share.recordType)
            if !share.requesters.isEmpty {
                out.key("requesters")
                out.array { out in
                    for requester in share.requesters {
                        out.object { out in
                            out.key("participantLookupInfo")
                            out.object { out in
                                out.member("emailAddress", requester.participantLookupInfo.emailAddress)
                                out.member("phoneNumber", requester.participantLookupInfo.phoneNumber)
                                out.member("userRecordName", requester.participantLookupInfo.userRecordID?.recordName)
                            }
                            out.key("userIdentity")
                            writeIdentity(requester.userIdentity, into: &out)
                        }
                    }
                }
            }
            if let root = share.hierarchicalRootRecordID {
                out.key("share")
                writeReference(root, into: &out)
            }
            out.member("shortGUID", share.token.text)
            out.key("zoneID")
            writeZoneID(share.recordID.zoneID, into: &out)
        }
    }

    /// The ShortGUID Result dictionary of `records/resolve` and `records/accept`.
    static func shortGUIDResult(
        _ metadata: Share.Metadata, shortGUID: JSONValue, environment: String, caller: String, desiredKeys: Set<String>?
    ) -> JSONValue {
        .rendered(
            JSONWriter.render(capacity: 2_048) { out in
                writeShortGUIDResult(
                    metadata, shortGUID: shortGUID, environment: environment, caller: caller, desiredKeys: desiredKeys,
                    into: &out)
            })
    }

    static func writeShortGUIDResult(
        _ metadata: Share.Metadata, shortGUID: JSONValue, environment: String, caller: String, desiredKeys: Set<String>?,
        into out: inout JSONWriter
    ) {
        out.object { out in
            out.member("containerIdentifier", metadata.containerIdentifier)
            let own = metadata.ownerIdentity.userRecordID?.recordName == caller
            out.member("databaseScope", own ? "PRIVATE" : "SHARED" as StaticString)
            out.member("environment", environment)
            out.key("ownerIdentity")
            writeIdentity(metadata.ownerIdentity, into: &out)
            out.member("participantPermission", permission(metadata.participantPermission))
            out.member("participantStatus", status(metadata.participantStatus))
            out.member("participantType", type(metadata.participantRole))
            if let rootRecord = metadata.rootRecord {
                out.key("rootRecord")
                writeRecord(rootRecord, desiredKeys: desiredKeys, into: &out)
            }
            out.member("rootRecordName", metadata.hierarchicalRootRecordID?.recordName)
            out.key("share")
            writeShare(metadata.share, into: &out)
            out.key("shortGUID")
            out.value(shortGUID)
            out.key("zoneID")
            writeZoneID(metadata.share.recordID.zoneID, into: &out)
        }
    }
}
