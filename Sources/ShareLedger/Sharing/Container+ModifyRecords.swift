import Foundation
import SharingDomain

/// One change of ``Container/modifyRecords(_:atomically:)``.
public enum RecordChange: Sendable {
    /// Saves a record: creates it (no change tag) or changes it (with the change tag it was fetched with).
    case save(Record)
    /// Saves a record as `policy` says (`RecordSavePolicy`).
    case saving(Record, policy: RecordSavePolicy)
    /// Deletes the record with this id.
    case delete(RecordID)
    /// Deletes the record with this id if its change tag is still `changeTag` (else
    /// `LedgerError.Code.serverRecordChanged`; Web Services' `delete` with a `recordChangeTag`).
    case deleteIfUnchanged(RecordID, changeTag: String)

    /// The id of the record the change is about.
    public var recordID: RecordID {
        switch self {
        case .save(let record), .saving(let record, _): return record.recordID
        case .delete(let id), .deleteIfUnchanged(let id, _): return id
        }
    }
}

extension Container {
    /// Saves and deletes several records in one call, in order (CloudKit's
    /// `modifyRecords(saving:deleting:atomically:)`; `records/modify` over HTTP): one result per
    /// change, the saved record or `nil` for a deletion.
    ///
    /// With `atomically` (the default, as in CloudKit), the changes are all or nothing within each
    /// zone: when one change in a zone fails, no change in that zone is made, and the zone's other
    /// changes answer `LedgerError.Code.batchRequestFailed` next to the real error. Zones succeed or
    /// fail independently of each other. Without it, each change stands alone. Either way the changes
    /// of one zone are one command, committed together, and a change sees the ones before it.
    ///
    /// - Throws: `LedgerError.Code.limitExceeded` for more than 400 changes,
    ///   `LedgerError.Code.notAuthenticated` without an account; nothing is changed then.
    public func modifyRecords(
        _ changes: [RecordChange], atomically: Bool = true
    ) async throws(LedgerError) -> [Result<Record?, LedgerError>] {
        guard changes.count <= Container.maxItemsPerOperation else {
            throw LedgerError(
                .limitExceeded, "\(changes.count) record changes; the limit is \(Container.maxItemsPerOperation). Split the request")
        }
        let user = try registeredUser()
        // The changes by zone, zones in the order they first appear; the default owner is the caller.
        var byZone: [RecordZoneID: [Int]] = [:]
        var zones: [RecordZoneID] = []
        for (index, change) in changes.enumerated() {
            let named = change.recordID.zoneID
            let zone =
                named.ownerName == RecordZoneID.defaultOwnerName ? RecordZoneID(zoneName: named.zoneName, ownerName: user) : named
            if byZone[zone] == nil { zones.append(zone) }
            byZone[zone, default: []].append(index)
        }
        var results = [Result<Record?, LedgerError>](
            repeating: .failure(.unexpectedOutput("modifyRecords")), count: changes.count)
        for zone in zones {
            let indices = byZone[zone] ?? []
            let steps = indices.map { index -> DomainAction in
                switch changes[index] {
                case .save(let record): return .saveRecord(record)
                case .saving(let record, let policy): return .saveRecordWithPolicy(record, policy)
                case .delete(let id): return .deleteRecord(id)
                case .deleteIfUnchanged(let id, let tag): return .deleteRecordIfUnchanged(id, changeTag: tag)
                }
            }
            for (index, output) in zip(indices, try await run(steps, atomic: atomically)) {
                results[index] = output.flatMap { output in
                    switch (changes[index], output) {
                    case (.save, .record(let record)), (.saving, .record(let record)): return .success(record)
                    case (.delete, _), (.deleteIfUnchanged, _): return .success(nil)
                    default: return .failure(.unexpectedOutput("modifyRecords"))
                    }
                }
            }
        }
        return results
    }
}
