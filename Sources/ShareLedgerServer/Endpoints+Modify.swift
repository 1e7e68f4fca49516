import Foundation
import ShareLedger

/// `records/modify`: records (create, update, forceUpdate, replace, forceReplace, delete,
/// forceDelete, with CloudKit's semantics: `update` and `forceUpdate` change only the named fields,
/// `replace` and `forceReplace` set the others to null, the `force` forms skip the change-tag check
/// and create a missing record; creating an existing record is `EXISTS`), shares
/// (`cloudkit.share` records: `forRecord` for a hierarchy share, record name `cloudkit.zoneshare` for
/// a zone share, `publicPermission`, `participants`).
///
/// Record operations go to the ledger as one `Container.modifyRecords(_:atomically:)` call: with
/// `atomic` (CloudKit's default, true) all or nothing per zone, the failed operation answered with its
/// error and the zone's others with `ATOMIC_ERROR`. A share operation is several ledger calls (the
/// share, then each participant), so it cannot join an atomic batch: `atomic: true` with a share among
/// several operations is refused; without `atomic`, such a request is applied one operation at a time.
extension Endpoints {
    @Sendable static func modify(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        try request.requirePrivateOrShared("records/modify")
        let operations = try request.items("operations")
        let atomicFlag = try request.body["atomic"].map { flag throws(WireError) in try flag.bool("atomic") }
        let requestZone = try request.zoneID()
        // Every operation is read before any is applied: a malformed one fails the request and changes nothing.
        var parsed: [ParsedOperation] = []
        for (index, operation) in operations.enumerated() {
            let operation = try ParsedOperation(operation, path: "operations[\(index)]", requestZone: requestZone) { id in
                try? request.container.record(for: id)
            }
            if let refused = request.notInDatabase(operation.zone, path: "operations[\(index)]") { throw refused }
            parsed.append(operation)
        }
        try await request.ensureDefaultZone(for: parsed.filter { !$0.isShare }.map(\.zone))
        if !parsed.contains(where: \.isShare) {
            return ["records": .array(try await modifyRecords(request, parsed, atomically: atomicFlag ?? true))]
        }
        if atomicFlag == true, parsed.count > 1 {
            throw WireError(
                .badRequest,
                "atomic: true cannot take a cloudkit.share operation among several (a share is several ledger changes); "
                    + "send it in a request of its own, or send atomic: false")
        }
        var results: [JSONValue] = []
        for operation in parsed {
            do {
                if operation.isShare {
                    results.append(try await modifyShare(request, operation))
                } else {
                    guard let result = try await request.container.modifyRecords([recordChange(request, operation)]).first
                    else { throw WireError(.internalError, "the operation had no result") }
                    results.append(try recordResult(request, operation, result).get())
                }
            } catch let error as LedgerError {
                results.append(itemError(WireError(error), ["recordName": operation.name.map(JSONValue.string) ?? .null]))
            } catch let error as WireError {
                results.append(itemError(error, ["recordName": operation.name.map(JSONValue.string) ?? .null]))
            } catch {
                results.append(itemError(WireError(.internalError, "the operation failed"), [:]))
            }
        }
        return ["records": .array(results)]
    }

    /// One operation of `records/modify`, read and checked.
    struct ParsedOperation {
        enum Kind: String {
            case create, update, forceUpdate, replace, forceReplace, delete, forceDelete
        }

        var kind: Kind
        var name: String?
        var zone: RecordZoneID
        var isShare: Bool
        var recordType: String?
        var changeTag: String?
        var fields: [String: FieldValue] = [:]
        /// The keys named in `fields`, those given `"value": null` included (an update removes them).
        var namedKeys = Set<String>()
        var parentName: String?
        var rootName: String?
        var title: String?
        var publicPermission: Share.Participant.Permission?
        var participants: [RequestedParticipant]?

        /// - Parameter existing: The record as it stands, asked for (once) when a field of an
        ///   update or replace has no `type`: such a value takes the type of the field it replaces.
        init(
            _ operation: JSONValue, path: String, requestZone: RecordZoneID?, existing: (RecordID) -> Record?
        ) throws(WireError) {
            let typeText = try operation.required("operationType", in: path).string(path + ".operationType")
            guard let kind = Kind(rawValue: typeText) else {
                throw WireError(
                    .badRequest,
                    "\(path).operationType must be create, update, forceUpdate, replace, forceReplace, delete or forceDelete")
            }
            self.kind = kind
            let record = try operation.required("record", in: path)
            let recordPath = path + ".record"
            _ = try record.object(recordPath)
            recordType = try record.optionalString("recordType", in: recordPath)
            name = try record.optionalString("recordName", in: recordPath)
            changeTag = try record.optionalString("recordChangeTag", in: recordPath)
            let zone = try record["zoneID"].map { zone throws(WireError) in
                try Wire.parseZoneID(zone, path: recordPath + ".zoneID")
            }
            // CloudKit's default: the default zone.
            self.zone = zone ?? requestZone ?? RecordZoneID(zoneName: RecordZoneID.defaultZoneName)
            isShare = recordType == Share.recordType || name == Share.zoneWideShareRecordName
            if let given = record["fields"] {
                var current: Record??
                for (key, value) in try given.object(recordPath + ".fields") {
                    namedKeys.insert(key)
                    // `{"value": null}`: the field is named without a value (an update removes it).
                    if value["value"] == JSONValue.null { continue }
                    var hint: FieldValue?
                    if value["type"] == nil, kind != .create, let name {
                        if current == nil { current = .some(existing(RecordID(recordName: name, zoneID: self.zone))) }
                        hint = current??.fields[key]
                    }
                    fields[key] = try Wire.parseField(value, path: "\(recordPath).fields.\(key)", existing: hint)
                }
            }
            parentName = try record["parent"].map { parent throws(WireError) in
                try parent.required("recordName", in: recordPath + ".parent").string(recordPath + ".parent.recordName")
            }
            // The share keys are read (and their types checked) on every record; only shares use them.
            rootName = try record["forRecord"].map { root throws(WireError) in
                _ = try root.optionalString("recordChangeTag", in: recordPath + ".forRecord")
                return try root.required("recordName", in: recordPath + ".forRecord").string(recordPath + ".forRecord.recordName")
            }
            publicPermission = try record["publicPermission"].map { value throws(WireError) in
                try Wire.parsePermission(value, path: recordPath + ".publicPermission")
            }
            participants = try record["participants"].map { list throws(WireError) in
                try Endpoints.parseParticipants(list, path: recordPath + ".participants")
            }
            if isShare {
                if let title = fields["cloudkit.title"] {
                    guard case .string(let text) = title else {
                        throw WireError.wrongType(recordPath + ".fields.cloudkit.title", "a STRING field")
                    }
                    self.title = text
                }
                if kind == .create, name != Share.zoneWideShareRecordName, rootName == nil {
                    throw WireError(.badRequest, "\(recordPath).forRecord is required for a hierarchy share")
                }
            }
            // CloudKit names a created record without a name: a random UUID.
            if kind == .create, !isShare, name == nil { name = UUID().uuidString }
            if kind != .create || !isShare, name == nil {
                throw WireError(.badRequest, "\(recordPath).recordName is required")
            }
            if !isShare, kind != .delete, kind != .forceDelete, recordType == nil {
                throw WireError(.badRequest, "\(recordPath).recordType is required")
            }
            if !isShare, kind == .update || kind == .replace, changeTag == nil {
                throw WireError(
                    .badRequest,
                    "\(recordPath).recordChangeTag is required for \(kind.rawValue); send force\(kind == .update ? "Update" : "Replace") "
                        + "to skip the check")
            }
        }
    }

    /// The record operations, as one ledger call (all or nothing per zone when `atomically`).
    private static func modifyRecords(
        _ request: DatabaseRequest, _ operations: [ParsedOperation], atomically: Bool
    ) async throws(WireError) -> [JSONValue] {
        let changes = operations.map { recordChange(request, $0) }
        let results: [Result<Record?, LedgerError>]
        do {
            results = try await request.container.modifyRecords(changes, atomically: atomically)
        } catch {
            throw WireError(error)
        }
        return zip(operations, results).map { operation, result in
            switch recordResult(request, operation, result) {
            case .success(let json): return json
            case .failure(let error):
                return itemError(error, ["recordName": operation.name.map(JSONValue.string) ?? .null])
            }
        }
    }

    /// A record operation as the ledger's change (CloudKit's semantics per operation type).
    private static func recordChange(_ request: DatabaseRequest, _ operation: ParsedOperation) -> RecordChange {
        let id = RecordID(recordName: operation.name ?? "", zoneID: operation.zone)
        var record = Record(
            recordType: operation.recordType ?? "", recordID: id, fields: operation.fields,
            parent: operation.parentName.map { RecordID(recordName: $0, zoneID: id.zoneID) })
        switch operation.kind {
        case .delete:
            return operation.changeTag.map { .deleteIfUnchanged(id, changeTag: $0) } ?? .delete(id)
        case .forceDelete:
            return .delete(id)
        case .create:
            return .save(record)
        case .replace:
            record.recordChangeTag = operation.changeTag
            return .save(record)
        case .forceReplace:
            return .saving(record, policy: .allKeys)
        case .update, .forceUpdate:
            record.recordChangeTag = operation.changeTag
            return .saving(record, policy: .changedKeys(operation.namedKeys, checkingChangeTag: operation.kind == .update))
        }
    }

    /// The answer to one record operation: the saved record, or the deletion. Creating a record that
    /// exists is `EXISTS` (the ledger answers it as a change-tag conflict, as CloudKit's framework does).
    private static func recordResult(
        _ request: DatabaseRequest, _ operation: ParsedOperation, _ result: Result<Record?, LedgerError>
    ) -> Result<JSONValue, WireError> {
        switch result {
        case .success(let saved?):
            return .success(Wire.record(saved))
        case .success(nil):
            return .success([
                "recordName": .string(operation.name ?? ""),
                "zoneID": Wire.zoneID(request.ownZone(operation.zone)), "deleted": true,
            ])
        case .failure(let error) where operation.kind == .create && error.code == .serverRecordChanged:
            return .failure(WireError(.exists, "record \(operation.name ?? "") exists already; update or replace it instead"))
        case .failure(let error):
            return .failure(WireError(error))
        }
    }

    private static func modifyShare(_ request: DatabaseRequest, _ operation: ParsedOperation) async throws -> JSONValue {
        let container = request.container
        var share: Share
        switch operation.kind {
        case .create:
            if let root = operation.rootName {
                share = try await container.share(
                    rootRecord: RecordID(recordName: root, zoneID: operation.zone), title: operation.title,
                    publicPermission: operation.publicPermission ?? .none)
            } else {
                share = try await container.share(
                    recordZoneID: operation.zone, title: operation.title, publicPermission: operation.publicPermission ?? .none)
            }
        case .update, .forceUpdate, .replace, .forceReplace, .delete, .forceDelete:
            let id = RecordID(recordName: operation.name ?? "", zoneID: operation.zone)
            guard let found = findShare(id, in: try visibleShares(container), caller: request.caller.userRecordName) else {
                throw WireError(.notFound, "unknownItem: the share does not exist, or it is not shared with you")
            }
            share = found
            let tag = operation.kind == .update || operation.kind == .delete ? operation.changeTag : nil
            if operation.kind == .delete || operation.kind == .forceDelete {
                try await container.deleteShare(share.url, ifChangeTag: tag)
                return [
                    "recordName": .string(id.recordName), "zoneID": Wire.zoneID(request.ownZone(share.recordID.zoneID)),
                    "deleted": true,
                ]
            }
            if let tag, tag != share.recordChangeTag {
                throw LedgerError(
                    .serverRecordChanged, "the share changed since it was fetched; fetch it, apply your change, and save again")
            }
            if let permission = operation.publicPermission, permission != share.publicPermission {
                share = try await container.setPublicPermission(permission, for: share.url)
            }
            if let title = operation.title, title != share.title {
                share = try await container.setTitle(title, for: share.url)
            }
        }
        if let participants = operation.participants {
            share = try await applyParticipants(
                participants, to: share, container: container, removeMissing: operation.kind != .create)
        }
        return Wire.share(share)
    }

    struct RequestedParticipant {
        var lookup: LookupInfo
        var permission: Share.Participant.Permission
        var role: Share.Participant.Role
    }

    static func parseParticipants(_ list: JSONValue, path: String) throws(WireError) -> [RequestedParticipant] {
        var out: [RequestedParticipant] = []
        for (index, item) in try list.array(path).enumerated() {
            let itemPath = "\(path)[\(index)]"
            let type = try item.optionalString("type", in: itemPath) ?? "USER"
            guard ["OWNER", "ADMINISTRATOR", "USER", "PUBLIC_USER"].contains(type) else {
                throw WireError(.badRequest, "\(itemPath).type must be OWNER, ADMINISTRATOR, USER or PUBLIC_USER")
            }
            let info = try item.required("userIdentity", in: itemPath).required("lookupInfo", in: itemPath + ".userIdentity")
            let infoPath = itemPath + ".userIdentity.lookupInfo"
            _ = try info.object(infoPath)
            let email = try info.optionalString("emailAddress", in: infoPath)
            let phone = try info.optionalString("phoneNumber", in: infoPath)
            let user = try info.optionalString("userRecordName", in: infoPath)
            let permission =
                try item["permission"].map { value throws(WireError) in
                    try Wire.parsePermission(value, path: itemPath + ".permission")
                } ?? .readOnly
            // Not invited: the owner is there already, public users join through the URL.
            if type == "OWNER" || type == "PUBLIC_USER" { continue }
            let lookup: LookupInfo
            if let email {
                lookup = LookupInfo(emailAddress: email)
            } else if let phone {
                lookup = LookupInfo(phoneNumber: phone)
            } else if let user {
                lookup = LookupInfo(userRecordID: RecordID(userRecordName: user))
            } else {
                throw WireError(.badRequest, "\(infoPath) needs emailAddress, phoneNumber or userRecordName")
            }
            out.append(
                RequestedParticipant(
                    lookup: lookup, permission: permission, role: type == "ADMINISTRATOR" ? .administrator : .privateUser))
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
            if let existing = share.participants.first(where: {
                $0.role != .owner && $0.acceptanceStatus != .removed && matches($0, wanted.lookup)
            }) {
                kept.insert(existing.participantID)
                if existing.permission != wanted.permission || existing.role != wanted.role {
                    share = try await container.setPermission(
                        wanted.permission, role: wanted.role, forParticipant: existing.participantID, in: share.url)
                }
            } else {
                share = try await container.addParticipant(
                    wanted.lookup, permission: wanted.permission, role: wanted.role, to: share.url)
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
