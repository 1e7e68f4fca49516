import Foundation
import LMDB
import SharingDomain

extension Container {
    /// The records of a zone that the user may read and `isIncluded` accepts, of `recordType` when
    /// given, in record-name order, at most `limit` (CloudKit's `CKQueryOperation` over one zone;
    /// `records/query` over HTTP). Read in chunks of 256 records, a short read transaction each.
    ///
    /// In the user's own zone every record is readable; in another user's zone, those covered by a
    /// share the user accepted.
    ///
    /// - Throws: `LedgerError.Code.zoneNotFound` when the user's own zone does not exist (another
    ///   user's missing zone reads as one with nothing shared), `LedgerError.Code.notAuthenticated`.
    public func records(
        inZone zoneID: RecordZoneID, recordType: String? = nil, limit: Int = .max,
        where isIncluded: (Record) -> Bool = { _ in true }
    ) throws(LedgerError) -> [Record] {
        let user = try registeredUser()
        let owner = zoneID.ownerName == RecordZoneID.defaultOwnerName ? user : zoneID.ownerName
        let container = containerIdentifier
        let ledger = self.ledger
        let id = RecordZoneID(zoneName: zoneID.zoneName, ownerName: owner)
        var out: [Record] = []
        var after: [UInt8]?
        while out.count < limit {
            // One chunk: the next names after `after`, and the readable records among them.
            let (last, chunk, missing) = try ledger.read("querying zone \(zoneID.zoneName)") {
                txn -> ([UInt8]?, [Record], Bool) in
                let models = ledger.models
                guard let zone = try models.zone(txn, container, owner: owner, zone: zoneID.zoneName) else { return (nil, [], true) }
                let prefix = ReadModels.recordKey(zoneID: zone.zoneID, "")
                let names = try models.keySuffixes(txn, models.records, prefix: prefix, after: after, limit: 256)
                var records: [Record] = []
                for nameBytes in names {
                    let name = String(decoding: nameBytes, as: UTF8.self)
                    guard let state = try models.record(txn, zoneID: zone.zoneID, name),
                        recordType == nil || state.recordType == recordType
                    else { continue }
                    if owner != user, try !Container.canRead(txn, models, zone: zone, record: name, user: user) { continue }
                    records.append(try ledger.presenter.record(txn, state, id: RecordID(recordName: name, zoneID: id)))
                }
                return (names.last, records, false)
            }
            if missing {
                if owner == user { throw LedgerError(.zoneNotFound, "zone \(zoneID.zoneName) does not exist") }
                return []
            }
            for record in chunk where isIncluded(record) {
                out.append(record)
                if out.count == limit { break }
            }
            guard let last else { break }
            after = last
        }
        return out
    }
}
