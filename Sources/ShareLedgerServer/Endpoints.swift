import Foundation
import ShareLedger

/// One request to `/database/1/{container}/{environment}/{database}/{subpath}`, authenticated:
/// what the endpoint handlers work with.
struct DatabaseRequest: Sendable {
    /// CloudKit's database scopes.
    enum Database: String, Sendable {
        case `public`, `private`, shared
    }

    var container: Container
    var environment: String
    var database: Database
    var caller: Caller
    var body: JSONValue
    var maxItems: Int
    var shareURLHost: String

    /// The items of `key`, at most ``maxItems`` (else the whole request fails with `BAD_REQUEST`).
    func items(_ key: String) throws(WireError) -> [JSONValue] {
        let items = try body.required(key, in: "body").array(key)
        guard items.count <= maxItems else {
            throw WireError(.badRequest, "\(items.count) items in \(key); the limit is \(maxItems). Split the request")
        }
        return items
    }

    /// The request-level `zoneID`, if any.
    func zoneID() throws(WireError) -> RecordZoneID? {
        try body["zoneID"].map { zone throws(WireError) in try Wire.parseZoneID(zone, path: "zoneID") }
    }

    /// `zone` with the default owner named: the caller (what answers say, as CloudKit does).
    func ownZone(_ zone: RecordZoneID) -> RecordZoneID {
        zone.ownerName == RecordZoneID.defaultOwnerName
            ? RecordZoneID(zoneName: zone.zoneName, ownerName: caller.userRecordName) : zone
    }

    /// Why `zone` is not in this database, if it is not: CloudKit's private database holds the
    /// caller's own zones only; others' zones are reached through the shared database.
    func notInDatabase(_ zone: RecordZoneID, path: String) -> WireError? {
        guard database == .private, ownZone(zone).ownerName != caller.userRecordName else { return nil }
        return WireError(
            .zoneNotFound,
            "\(path): the private database holds only your own zones; reach others' zones through the shared database")
    }

    /// Whether `zone` is the caller's default zone in the private database, which CloudKit has for
    /// every user: the ledger keeps it as a zone saved on first use (``ensureDefaultZone(for:)``).
    func isOwnDefaultZone(_ zone: RecordZoneID) -> Bool {
        database == .private && zone.zoneName == RecordZoneID.defaultZoneName
            && ownZone(zone).ownerName == caller.userRecordName
    }

    /// Saves the caller's default zone (a logged, idempotent zone save) when one of `zones` is it
    /// and it does not exist yet, so that records can be written there as in CloudKit.
    func ensureDefaultZone(for zones: [RecordZoneID]) async throws(WireError) {
        guard let zone = zones.first(where: isOwnDefaultZone) else { return }
        do {
            guard !(try container.recordZones().contains { $0.zoneID.zoneName == zone.zoneName }) else { return }
            _ = try await container.save(RecordZone(zoneID: RecordZoneID(zoneName: zone.zoneName)))
        } catch {
            throw WireError(error)
        }
    }

    func requirePrivateOrShared(_ what: String) throws(WireError) {
        guard database != .public else {
            throw WireError(.badRequest, "\(what) works in the private and shared databases; the ledger keeps no public records")
        }
    }
}

/// The endpoints: each takes the request and returns the response body (HTTP 200) or throws the
/// error that fails the whole request. Per-item failures are error dictionaries in the results.
enum Endpoints {
    typealias Handler = @Sendable (DatabaseRequest) async throws(WireError) -> JSONValue

    /// Endpoints by subpath (after the database), with the HTTP methods they take.
    static let all: [String: (methods: Set<String>, handler: Handler)] = [
        "records/resolve": (["POST"], resolve),
        "records/accept": (["POST"], accept),
        "records/lookup": (["POST"], lookup),
        "records/modify": (["POST"], modify),
        "records/query": (["POST"], query),
        "records/changes": (["POST"], recordChanges),
        "zones/list": (["GET", "POST"], listZones),
        "zones/modify": (["POST"], modifyZones),
        "zones/lookup": (["POST"], lookupZones),
        "zones/changes": (["POST"], zoneChanges),
        "users/caller": (["GET", "POST"], caller),
        "users/current": (["GET"], currentUser),
        "users/lookup/email": (["POST"], lookupEmail),
        "users/discover": (["POST"], discover),
        "users/lookup/phone": (["POST"], lookupPhone),
        "users/lookup/id": (["POST"], lookupID),
        "users/lookup/participants": (["POST"], lookupParticipants),
        "shares/accessRequests/allow": (["POST"], allowAccessRequests),
        "shares/accessRequests/request": (["POST"], requestAccess),
        "shares/accessRequests/approve": (["POST"], approveRequesters),
        "shares/accessRequests/deny": (["POST"], denyRequesters),
        "shares/identities/block": (["POST"], blockIdentities),
        "shares/identities/unblock": (["POST"], unblockIdentities),
        "shares/oneTimeParticipants/add": (["POST"], addOneTimeParticipant),
    ]

    static func itemError(_ error: WireError, _ extra: [String: JSONValue]) -> JSONValue {
        error.dictionary(uuid: nil, extra: extra)
    }

    // MARK: - records/resolve and records/accept

    struct ShortGUIDItem {
        var echo: JSONValue
        /// The shortGUID's token; `nil` when the value cannot be one (answered as an unknown item).
        var token: ShareToken?
        var shouldFetchRootRecord: Bool
        var desiredKeys: [String]?
    }

    static func shortGUIDs(_ request: DatabaseRequest) throws(WireError) -> [ShortGUIDItem] {
        var out: [ShortGUIDItem] = []
        for (index, item) in try request.items("shortGUIDs").enumerated() {
            let path = "shortGUIDs[\(index)]"
            let value = try item.required("value", in: path).string(path + ".value")
            let fetchRoot = try item["shouldFetchRootRecord"].map { flag throws(WireError) in
                try flag.bool(path + ".shouldFetchRootRecord")
            }
            var keys: [String]?
            if let desired = item.nullable("rootRecordDesiredKeys") {
                keys = []
                for (keyIndex, key) in try desired.array(path + ".rootRecordDesiredKeys").enumerated() {
                    keys?.append(try key.string("\(path).rootRecordDesiredKeys[\(keyIndex)]"))
                }
            }
            out.append(ShortGUIDItem(echo: item, token: ShareToken(value), shouldFetchRootRecord: fetchRoot ?? false, desiredKeys: keys))
        }
        return out
    }

    static let unknownShortGUID = WireError(.notFound, "unknownItem: the share does not exist, or it is not shared with you")

    @Sendable static func resolve(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        let items = try shortGUIDs(request)
        // One logged fetch per group of items asking the same about the root record.
        struct Options: Hashable {
            var fetchRoot: Bool
            var keys: [String]?
        }
        // By token: the library records the same fetch as for the token's URL, without a URL built
        // per item here and parsed again there.
        var groups: [Options: [ShareToken]] = [:]
        for item in items {
            guard let token = item.token else { continue }
            groups[Options(fetchRoot: item.shouldFetchRootRecord, keys: item.desiredKeys), default: []].append(token)
        }
        var answers: [Options: [ShareToken: Result<Share.Metadata, LedgerError>]] = [:]
        for (options, tokens) in groups {
            do {
                answers[options] = try await request.container.shareMetadatas(
                    forTokens: tokens, shouldFetchRootRecord: options.fetchRoot, rootRecordDesiredKeys: options.keys)
            } catch {
                throw WireError(error)
            }
        }
        let results: [JSONValue] = items.map { item in
            let options = Options(fetchRoot: item.shouldFetchRootRecord, keys: item.desiredKeys)
            guard let token = item.token, let result = answers[options]?[token] else {
                return itemError(unknownShortGUID, ["shortGUID": item.echo])
            }
            switch result {
            case .success(let metadata):
                return Wire.shortGUIDResult(
                    metadata, shortGUID: item.echo, environment: request.environment,
                    caller: request.caller.userRecordName, desiredKeys: item.desiredKeys.map(Set.init))
            case .failure(let error):
                return itemError(WireError(error), ["shortGUID": item.echo])
            }
        }
        return ["results": .array(results)]
    }

    @Sendable static func accept(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        let items = try shortGUIDs(request)
        let urls = items.map { item in item.token.flatMap { ShareURL.make(host: request.shareURLHost, token: $0) } }
        var metadatas: [URL: Result<Share.Metadata, LedgerError>] = [:]
        for url in urls {
            guard let url, metadatas[url] == nil else { continue }
            metadatas[url] = Result { () throws(LedgerError) in try request.container.shareMetadataWithoutLogging(for: url) }
        }
        var seen = Set<Share.Metadata>()
        let toAccept = urls.compactMap { url in url.flatMap { try? metadatas[$0]?.get() } }.filter {
            seen.insert($0).inserted
        }
        let accepted: [Share.Metadata: Result<Share, LedgerError>]
        do {
            accepted = toAccept.isEmpty ? [:] : try await request.container.accept(toAccept)
        } catch {
            throw WireError(error)
        }
        let results: [JSONValue] = zip(items, urls).map { item, url in
            guard let url, let found = metadatas[url] else {
                return itemError(unknownShortGUID, ["shortGUID": item.echo])
            }
            let result = found.flatMap { metadata in
                (accepted[metadata] ?? .failure(LedgerError(.unknownItem, "not accepted"))).map { (metadata, $0) }
            }
            switch result {
            case .success(let (found, share)):
                var metadata = found
                metadata.share = share
                if let current = share.currentUserParticipant {
                    metadata.participantStatus = current.acceptanceStatus
                    metadata.participantPermission = current.permission
                    metadata.participantRole = current.role
                }
                return Wire.shortGUIDResult(
                    metadata, shortGUID: item.echo, environment: request.environment,
                    caller: request.caller.userRecordName, desiredKeys: nil)
            case .failure(let error):
                return itemError(WireError(error), ["shortGUID": item.echo])
            }
        }
        return ["results": .array(results)]
    }

    // MARK: - records/lookup

    /// The shares the caller owns or takes part in, by record name and zone: what lookup and modify
    /// find `cloudkit.share` records in.
    static func visibleShares(_ container: Container) throws(WireError) -> [RecordID: Share] {
        do {
            var out: [RecordID: Share] = [:]
            for share in try container.ownedShares() + container.participatingShares() {
                out[share.recordID] = share
            }
            return out
        } catch {
            throw WireError(error)
        }
    }

    /// A record id of the request in the ledger's terms (no zone: CloudKit's default zone).
    static func recordID(_ name: String, zone: RecordZoneID?) -> RecordID {
        RecordID(recordName: name, zoneID: zone ?? RecordZoneID(zoneName: RecordZoneID.defaultZoneName))
    }

    static func sameZone(_ lhs: RecordZoneID, _ rhs: RecordZoneID, caller: String) -> Bool {
        func owner(_ id: RecordZoneID) -> String { id.ownerName == RecordZoneID.defaultOwnerName ? caller : id.ownerName }
        return lhs.zoneName == rhs.zoneName && owner(lhs) == owner(rhs)
    }

    static func findShare(_ id: RecordID, in shares: [RecordID: Share], caller: String) -> Share? {
        shares.first { key, _ in key.recordName == id.recordName && sameZone(key.zoneID, id.zoneID, caller: caller) }?.value
    }

    @Sendable static func lookup(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        try request.requirePrivateOrShared("records/lookup")
        let items = try request.items("records")
        let requestZone = try request.zoneID()
        var desired: Set<String>?
        if let keys = request.body.nullable("desiredKeys") {
            desired = []
            for (index, key) in try keys.array("desiredKeys").enumerated() {
                desired?.insert(try key.string("desiredKeys[\(index)]"))
            }
        }
        let caller = request.caller.userRecordName
        var shares: [RecordID: Share]?
        var ownZones: Set<String>?
        var results: [JSONValue] = []
        for (index, item) in items.enumerated() {
            let path = "records[\(index)]"
            let name = try item.required("recordName", in: path).string(path + ".recordName")
            let zone = try item["zoneID"].map { zone throws(WireError) in try Wire.parseZoneID(zone, path: path + ".zoneID") }
            let id = recordID(name, zone: zone ?? requestZone)
            // MistKit names `desiredKeys` per record (Apple, per request): an item's own list wins.
            var keys = desired
            if let given = item.nullable("desiredKeys") {
                keys = []
                for (keyIndex, key) in try given.array(path + ".desiredKeys").enumerated() {
                    keys?.insert(try key.string("\(path).desiredKeys[\(keyIndex)]"))
                }
            }
            if let refused = request.notInDatabase(id.zoneID, path: path) {
                results.append(itemError(refused, ["recordName": .string(name)]))
                continue
            }
            do {
                results.append(Wire.record(try request.container.record(for: id), desiredKeys: keys))
            } catch {
                if shares == nil { shares = try visibleShares(request.container) }
                if let share = findShare(id, in: shares ?? [:], caller: caller) {
                    results.append(Wire.share(share))
                } else if request.ownZone(id.zoneID).ownerName == caller, !(try ownZoneNames(request, &ownZones)).contains(id.zoneID.zoneName) {
                    // A zone of the caller's own that does not exist: ZONE_NOT_FOUND, as modify answers.
                    results.append(
                        itemError(WireError(.zoneNotFound, "zone \(id.zoneID.zoneName) does not exist"), ["recordName": .string(name)]))
                } else {
                    results.append(itemError(WireError(error), ["recordName": .string(name)]))
                }
            }
        }
        return ["records": .array(results)]
    }

    /// The names of the caller's zones, read once per request.
    static func ownZoneNames(_ request: DatabaseRequest, _ cache: inout Set<String>?) throws(WireError) -> Set<String> {
        if let cache { return cache }
        do {
            // The default zone counts as existing: CloudKit's private database always has it.
            let names = Set(try request.container.recordZones().map(\.zoneID.zoneName)).union([RecordZoneID.defaultZoneName])
            cache = names
            return names
        } catch {
            throw WireError(error)
        }
    }

    // MARK: - zones

    static func zone(_ id: RecordZoneID) -> JSONValue {
        ["zoneID": Wire.zoneID(id), "atomic": .bool(id.zoneName != RecordZoneID.defaultZoneName)]
    }

    @Sendable static func listZones(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        do {
            switch request.database {
            case .private:
                // The default zone first, whether or not a record was written there yet (CloudKit's
                // private database always has it).
                let custom = try request.container.recordZones().map(\.zoneID).filter { $0.zoneName != RecordZoneID.defaultZoneName }
                let defaultZone = RecordZoneID(zoneName: RecordZoneID.defaultZoneName, ownerName: request.caller.userRecordName)
                return ["zones": .array(([defaultZone] + custom).map(zone))]
            case .shared: return ["zones": .array(try request.container.sharedDatabaseZones().map(zone))]
            case .public:
                return ["zones": [zone(RecordZoneID(zoneName: RecordZoneID.defaultZoneName, ownerName: "_defaultOwner"))]]
            }
        } catch {
            throw WireError(error)
        }
    }

    /// `zones/lookup`: `{"zones": [{"zoneID": …}]}` (Apple's form) or `{"zones": [zoneID]}` (MistKit's);
    /// one zone or error (`ZONE_NOT_FOUND`) per item, in order.
    @Sendable static func lookupZones(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        var wanted: [(id: RecordZoneID, json: JSONValue)] = []
        for (index, item) in try request.items("zones").enumerated() {
            let path = "zones[\(index)]"
            let json = item["zoneID"] ?? item
            wanted.append((try Wire.parseZoneID(json, path: item["zoneID"] == nil ? path : path + ".zoneID"), json))
        }
        let known: Set<RecordZoneID>
        do {
            switch request.database {
            case .private:
                known = Set(try request.container.recordZones().map { request.ownZone($0.zoneID) }).union([
                    RecordZoneID(zoneName: RecordZoneID.defaultZoneName, ownerName: request.caller.userRecordName)
                ])
            case .shared: known = Set(try request.container.sharedDatabaseZones().map(request.ownZone))
            case .public: known = []
            }
        } catch {
            throw WireError(error)
        }
        let results: [JSONValue] = wanted.map { item in
            let id = request.ownZone(item.id)
            guard known.contains(id) else {
                return itemError(WireError(.zoneNotFound, "zone \(id.zoneName) does not exist in this database"), ["zoneID": item.json])
            }
            return zone(id)
        }
        return ["zones": .array(results)]
    }

    @Sendable static func modifyZones(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        guard request.database == .private else { throw WireError(.badRequest, "zones/modify works in the private database") }
        // Read every operation first: a malformed one fails the request and changes nothing.
        var operations: [(create: Bool, id: RecordZoneID, json: JSONValue)] = []
        for (index, item) in try request.items("operations").enumerated() {
            let path = "operations[\(index)]"
            let type = try item.required("operationType", in: path).string(path + ".operationType")
            guard type == "create" || type == "delete" else {
                throw WireError(.badRequest, "\(path).operationType must be create or delete")
            }
            let zoneJSON = try item.required("zone", in: path).required("zoneID", in: path + ".zone")
            operations.append((type == "create", try Wire.parseZoneID(zoneJSON, path: path + ".zone.zoneID"), zoneJSON))
        }
        var results: [JSONValue] = []
        for operation in operations {
            do {
                if operation.create {
                    results.append(zone(try await request.container.save(RecordZone(zoneID: operation.id)).zoneID))
                } else {
                    try await request.container.deleteRecordZone(withID: operation.id)
                    results.append(["zoneID": Wire.zoneID(operation.id), "deleted": true])
                }
            } catch {
                results.append(itemError(WireError(error), ["zoneID": operation.json]))
            }
        }
        return ["zones": .array(results)]
    }

    // MARK: - users

    @Sendable static func caller(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        do {
            // Apple's users/caller: `{"users": [identity]}`, one identity.
            return ["users": [Wire.identity(try request.container.currentUserIdentity())]]
        } catch {
            throw WireError(error)
        }
    }

    /// `users/current`: Apple's User dictionary of the caller (`userRecordName`, and `firstName` and
    /// `lastName` when the user registered a name).
    @Sendable static func currentUser(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        let identity: UserIdentity
        do {
            identity = try request.container.currentUserIdentity()
        } catch {
            throw WireError(error)
        }
        var user: [String: JSONValue] = ["userRecordName": .string(identity.userRecordID?.recordName ?? request.caller.userRecordName)]
        if let given = identity.nameComponents?.givenName { user["firstName"] = .string(given) }
        if let family = identity.nameComponents?.familyName { user["lastName"] = .string(family) }
        return .object(user)
    }

    /// `users/lookup/email`: each lookup is recorded in the log like a participant lookup, and only a
    /// registered user may ask (`Container.discoverUserIdentities(for:)`).
    @Sendable static func lookupEmail(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        try await lookupUsers(request, key: "emailAddress") { LookupInfo(emailAddress: $0) }
    }

    /// `users/discover`: Apple's identity discovery for `lookupInfos` (each an `emailAddress`, a
    /// `phoneNumber` or a `userRecordName`), through the same recorded participant lookup as
    /// `users/lookup/email`; answers the identities found, in request order (as Apple does, an
    /// unknown or malformed lookup info has no entry).
    @Sendable static func discover(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        var infos: [LookupInfo] = []
        for (index, item) in try request.items("lookupInfos").enumerated() {
            let path = "lookupInfos[\(index)]"
            let email = try item.optionalString("emailAddress", in: path)
            let phone = try item.optionalString("phoneNumber", in: path)
            let userName = try item.optionalString("userRecordName", in: path)
            if let email {
                infos.append(LookupInfo(emailAddress: email))
            } else if let phone {
                infos.append(LookupInfo(phoneNumber: phone))
            } else if let name = userName {
                infos.append(LookupInfo(userRecordID: RecordID(userRecordName: name)))
            } else {
                throw WireError(.badRequest, "\(path) needs an emailAddress, a phoneNumber or a userRecordName")
            }
        }
        let answers: [LookupInfo: Result<UserIdentity, LedgerError>]
        do {
            answers = try await request.container.discoverUserIdentities(for: infos)
        } catch {
            throw WireError(error)
        }
        let found: [JSONValue] = infos.compactMap { info in
            guard case .success(let identity)? = answers[info] else { return nil }
            return Wire.identity(identity)
        }
        return ["users": .array(found)]
    }
}
