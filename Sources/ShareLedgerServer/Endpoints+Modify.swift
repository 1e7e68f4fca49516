import Foundation
import ShareLedger

/// `records/modify`: records (create, update, forceUpdate, replace, delete, forceDelete), shares
/// (`cloudkit.share` records: `forRecord` for a hierarchy share, record name `cloudkit.zoneshare` for
/// a zone share, `publicPermission`, `participants`) — each operation one ledger call, in order.
extension Endpoints {
    @Sendable static func modify(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        try request.requirePrivateOrShared("records/modify")
        let operations = try request.items("operations")
        if try request.body["atomic"].map({ flag throws(WireError) in try flag.bool("atomic") }) == true, operations.count > 1 {
            throw WireError(
                .badRequest, "atomic: true is not supported for more than one operation; send atomic: false (each operation "
                    + "is applied on its own and answered per item)")
        }
        let requestZone = try request.zoneID()
        var results: [JSONValue] = []
        for (index, operation) in operations.enumerated() {
            let path = "operations[\(index)]"
            let type = try operation.required("operationType", in: path).string(path + ".operationType")
            let recordJSON = try operation.required("record", in: path)
            _ = try recordJSON.object(path + ".record")
            let recordType = try recordJSON.optionalString("recordType", in: path + ".record")
            let name = try recordJSON.optionalString("recordName", in: path + ".record")
            let zone = try recordJSON["zoneID"].map { zone throws(WireError) in
                try Wire.parseZoneID(zone, path: path + ".record.zoneID")
            } ?? requestZone
            do {
                if recordType == Share.recordType || name == Share.zoneWideShareRecordName {
                    results.append(try await modifyShare(request, type: type, json: recordJSON, name: name, zone: zone, path: path))
                } else {
                    results.append(try await modifyRecord(request, type: type, json: recordJSON, name: name, zone: zone, path: path))
                }
            } catch let error as LedgerError {
                results.append(itemError(WireError(error), ["recordName": name.map(JSONValue.string) ?? .null]))
            } catch let error as WireError where error.code == .badRequest || error.code == .notFound {
                // A malformed operation fails alone, as CloudKit answers it per record.
                results.append(itemError(error, ["recordName": name.map(JSONValue.string) ?? .null]))
            } catch let error as WireError {
                throw error
            } catch {
                results.append(itemError(WireError(.internalError, "the operation failed"), [:]))
            }
        }
        return ["records": .array(results)]
    }

    private static func modifyRecord(
        _ request: DatabaseRequest, type: String, json: JSONValue, name: String?, zone: RecordZoneID?, path: String
    ) async throws -> JSONValue {
        guard let name else { throw WireError(.badRequest, "\(path).record.recordName is required") }
        let id = try recordID(name, zone: zone, caller: request.caller.userRecordName, path: path)
        switch type {
        case "delete", "forceDelete":
            try await request.container.deleteRecord(withID: id)
            return ["recordName": .string(name), "zoneID": Wire.zoneID(id.zoneID), "deleted": true]
        case "create", "update", "forceUpdate", "replace":
            break
        default:
            throw WireError(
                .badRequest, "\(path).operationType must be create, update, forceUpdate, replace, delete or forceDelete")
        }
        guard let recordType = try json.optionalString("recordType", in: path + ".record") else {
            throw WireError(.badRequest, "\(path).record.recordType is required")
        }
        var fields: [String: FieldValue] = [:]
        if let given = json["fields"] {
            for (key, value) in try given.object(path + ".record.fields") {
                fields[key] = try Wire.parseField(value, path: "\(path).record.fields.\(key)")
            }
        }
        let parent = try json["parent"].map { parent throws(WireError) in
            RecordID(recordName: try parent.required("recordName", in: path + ".record.parent").string(path + ".record.parent.recordName"), zoneID: id.zoneID)
        }
        var record = Record(recordType: recordType, recordID: id, fields: fields, parent: parent)
        switch type {
        case "create":
            break
        case "forceUpdate", "replace":
            // Without a change tag check: take the current one.
            record.recordChangeTag = (try? request.container.record(for: id))?.recordChangeTag
        default:
            record.recordChangeTag = try json.optionalString("recordChangeTag", in: path + ".record")
        }
        return Wire.record(try await request.container.save(record))
    }

    private static func modifyShare(
        _ request: DatabaseRequest, type: String, json: JSONValue, name: String?, zone: RecordZoneID?, path: String
    ) async throws -> JSONValue {
        let container = request.container
        let caller = request.caller.userRecordName
        let publicPermission = try json["publicPermission"].map { value throws(WireError) in
            try Wire.parsePermission(value, path: path + ".record.publicPermission")
        }
        let title: String? = try json["fields"]?["cloudkit.title"].map { field throws(WireError) in
            guard case .string(let text) = try Wire.parseField(field, path: path + ".record.fields.cloudkit.title") else {
                throw WireError.wrongType(path + ".record.fields.cloudkit.title", "a STRING field")
            }
            return text
        }
        let participants = try json["participants"].map { list throws(WireError) in
            try parseParticipants(list, path: path + ".record.participants")
        }
        guard let zone else { throw WireError(.badRequest, "\(path): give zoneID (in the record or the request)") }
        var share: Share
        switch type {
        case "create":
            if name == Share.zoneWideShareRecordName {
                share = try await container.share(recordZoneID: zone, title: title, publicPermission: publicPermission ?? .none)
            } else {
                guard let forRecord = json["forRecord"] else {
                    throw WireError(.badRequest, "\(path).record.forRecord is required for a hierarchy share")
                }
                let root = try forRecord.required("recordName", in: path + ".record.forRecord").string(path + ".record.forRecord.recordName")
                share = try await container.share(
                    rootRecord: RecordID(recordName: root, zoneID: zone), title: title, publicPermission: publicPermission ?? .none)
            }
        case "update", "forceUpdate", "replace", "delete", "forceDelete":
            guard let name else { throw WireError(.badRequest, "\(path).record.recordName is required") }
            guard let found = findShare(RecordID(recordName: name, zoneID: zone), in: try visibleShares(container), caller: caller) else {
                throw WireError(.notFound, "unknownItem: the share does not exist, or it is not shared with you")
            }
            share = found
            let tag = type == "update" ? try json.optionalString("recordChangeTag", in: path + ".record") : nil
            if type == "delete" || type == "forceDelete" {
                try await container.deleteShare(share.url, ifChangeTag: tag)
                return ["recordName": .string(name), "zoneID": Wire.zoneID(share.recordID.zoneID), "deleted": true]
            }
            if let tag, tag != share.recordChangeTag {
                throw LedgerError(.serverRecordChanged, "the share changed since it was fetched; fetch it, apply your change, and save again")
            }
            if let publicPermission, publicPermission != share.publicPermission {
                share = try await container.setPublicPermission(publicPermission, for: share.url)
            }
            if let title, title != share.title {
                share = try await container.setTitle(title, for: share.url)
            }
        default:
            throw WireError(.badRequest, "\(path).operationType must be create, update, forceUpdate, replace, delete or forceDelete")
        }
        if let participants {
            share = try await applyParticipants(participants, to: share, container: container, removeMissing: type != "create")
        }
        return Wire.share(share)
    }

    struct RequestedParticipant {
        var lookup: LookupInfo
        var permission: Share.Participant.Permission
        var role: Share.Participant.Role
    }

    private static func parseParticipants(_ list: JSONValue, path: String) throws(WireError) -> [RequestedParticipant] {
        var out: [RequestedParticipant] = []
        for (index, item) in try list.array(path).enumerated() {
            let itemPath = "\(path)[\(index)]"
            let type = try item.optionalString("type", in: itemPath) ?? "USER"
            if type == "OWNER" || type == "PUBLIC_USER" { continue }  // not invited: the owner is there, public users join
            let info = try item.required("userIdentity", in: itemPath).required("lookupInfo", in: itemPath + ".userIdentity")
            let infoPath = itemPath + ".userIdentity.lookupInfo"
            let lookup: LookupInfo
            if let email = try info.optionalString("emailAddress", in: infoPath) {
                lookup = LookupInfo(emailAddress: email)
            } else if let phone = try info.optionalString("phoneNumber", in: infoPath) {
                lookup = LookupInfo(phoneNumber: phone)
            } else if let user = try info.optionalString("userRecordName", in: infoPath) {
                lookup = LookupInfo(userRecordID: RecordID(userRecordName: user))
            } else {
                throw WireError(.badRequest, "\(infoPath) needs emailAddress, phoneNumber or userRecordName")
            }
            let permission = try item["permission"].map { value throws(WireError) in
                try Wire.parsePermission(value, path: itemPath + ".permission")
            } ?? .readOnly
            out.append(RequestedParticipant(lookup: lookup, permission: permission, role: type == "ADMINISTRATOR" ? .administrator : .privateUser))
        }
        return out
    }

    /// Makes the share's invited participants the requested ones: invites the new, changes the
    /// permission of the changed, and (on an update) removes the invited ones not listed.
    private static func applyParticipants(
        _ requested: [RequestedParticipant], to share: Share, container: Container, removeMissing: Bool
    ) async throws -> Share {
        var share = share
        func matches(_ participant: Share.Participant, _ lookup: LookupInfo) -> Bool {
            let identity = participant.userIdentity
            if let email = lookup.emailAddress { return identity.lookupInfo?.emailAddress?.lowercased() == email.lowercased() }
            if let phone = lookup.phoneNumber { return identity.lookupInfo?.phoneNumber == phone }
            if let user = lookup.userRecordID?.recordName { return identity.userRecordID?.recordName == user }
            return false
        }
        var kept = Set<String>()
        for wanted in requested {
            if let existing = share.participants.first(where: { $0.role != .owner && $0.acceptanceStatus != .removed && matches($0, wanted.lookup) }) {
                kept.insert(existing.participantID)
                if existing.permission != wanted.permission || existing.role != wanted.role {
                    share = try await container.setPermission(
                        wanted.permission, role: wanted.role, forParticipant: existing.participantID, in: share.url)
                }
            } else {
                share = try await container.addParticipant(wanted.lookup, permission: wanted.permission, role: wanted.role, to: share.url)
                if let added = share.participants.last(where: { matches($0, wanted.lookup) }) { kept.insert(added.participantID) }
            }
        }
        if removeMissing {
            for participant in share.participants
            where participant.role != .owner && participant.role != .publicUser && participant.acceptanceStatus != .removed
                && !kept.contains(participant.participantID)
            {
                share = try await container.removeParticipant(participant.participantID, from: share.url)
            }
        }
        return share
    }
}
