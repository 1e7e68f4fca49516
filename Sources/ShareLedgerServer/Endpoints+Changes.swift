import Foundation
import ShareLedger

/// Sync: `records/changes` (the changes of one zone since a `syncToken`) and `zones/changes` (the
/// zones of the database that changed since one), through `Container.recordZoneChanges(in:since:limit:)`
/// and `Container.databaseChanges(_:since:limit:)`. A participant syncs a shared zone through
/// `/shared/`, its owner through `/private/`.
extension Endpoints {
    /// `resultsLimit` (1 to the item limit; 200 when absent).
    static func resultsLimit(_ request: DatabaseRequest) throws(WireError) -> Int {
        let limit = try request.body["resultsLimit"].map { value throws(WireError) in try value.int64("resultsLimit") } ?? 200
        guard (1...Int64(request.maxItems)).contains(limit) else {
            throw WireError(.badRequest, "resultsLimit must be 1 to \(request.maxItems)")
        }
        return Int(limit)
    }

    /// `syncToken`, if given; one this server did not give fails the request (`changeTokenExpired`).
    static func syncToken(_ request: DatabaseRequest) throws(WireError) -> SyncToken? {
        guard let given = request.body.nullable("syncToken") else { return nil }
        let text = try given.string("syncToken")
        guard let token = SyncToken(text) else {
            throw WireError(LedgerError(.changeTokenExpired, "syncToken is not a token this server gave; fetch without one"))
        }
        return token
    }

    @Sendable static func recordChanges(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        try request.requirePrivateOrShared("records/changes")
        guard let zoneJSON = request.body["zoneID"] else {
            throw WireError(.badRequest, "body.zoneID is required: records/changes reads one custom zone")
        }
        let zone = try Wire.parseZoneID(zoneJSON, path: "zoneID")
        if let refused = request.notInDatabase(zone, path: "zoneID") { throw refused }
        if request.database == .shared, request.ownZone(zone).ownerName == request.caller.userRecordName {
            throw WireError(.zoneNotFound, "zoneID: the shared database holds others' zones; sync your own through the private database")
        }
        let limit = try resultsLimit(request)
        var desired: Set<String>?
        if let keys = request.body.nullable("desiredKeys") {
            desired = []
            for (index, key) in try keys.array("desiredKeys").enumerated() { desired?.insert(try key.string("desiredKeys[\(index)]")) }
        }
        let token = try syncToken(request)
        let changes: RecordZoneChanges
        do {
            changes = try request.container.recordZoneChanges(in: zone, since: token, limit: limit)
        } catch {
            throw WireError(error)
        }
        var records = changes.changedRecords.map { Wire.record($0, desiredKeys: desired) }
        records += changes.changedShares.map(Wire.share)
        records += changes.deletedRecordIDs.map { id -> JSONValue in ["recordName": .string(id.recordName), "deleted": true] }
        return [
            "zoneID": Wire.zoneID(request.ownZone(zone)),
            "records": .array(records),
            "syncToken": .string(changes.syncToken.text),
            "moreComing": .bool(changes.moreComing),
        ]
    }

    @Sendable static func zoneChanges(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        let scope: DatabaseScope
        switch request.database {
        case .private: scope = .private
        case .shared: scope = .shared
        case .public: throw WireError(.badRequest, "zones/changes works in the private and shared databases; the ledger keeps no public zones")
        }
        let limit = try resultsLimit(request)
        let token = try syncToken(request)
        let changes: DatabaseChanges
        do {
            changes = try request.container.databaseChanges(scope, since: token, limit: limit)
        } catch {
            throw WireError(error)
        }
        var zones = changes.changedZoneIDs.map(zone)
        zones += changes.deletedZoneIDs.map { id -> JSONValue in ["zoneID": Wire.zoneID(id), "deleted": true] }
        return ["zones": .array(zones), "syncToken": .string(changes.syncToken.text), "moreComing": .bool(changes.moreComing)]
    }
}
