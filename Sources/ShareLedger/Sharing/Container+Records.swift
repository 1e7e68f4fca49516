import Foundation
import LMDB
import SharingDomain
import SwiftProtobuf
import Synchronization

extension Container {
    // MARK: - Zones and records

    /// Creates a zone in the user's private database; saving an existing zone returns it unchanged.
    /// The default zone (`_defaultZone`) is saved like any other, always without capabilities (as in
    /// CloudKit: no atomic batches, no change feed, no sharing).
    ///
    /// - Throws: `LedgerError.Code.badDatabase` for another user's zone,
    ///   `LedgerError.Code.invalidArguments` for a bad name,
    ///   `LedgerError.Code.notAuthenticated` without an account.
    public func save(_ zone: RecordZone) async throws(LedgerError) -> RecordZone {
        guard case .zone(let saved) = try await runOne(.saveZone(zone.zoneID, capabilities: zone.capabilities.rawValue))
        else { throw LedgerError.unexpectedOutput("save(zone)") }
        return saved
    }

    /// Deletes a zone of the user's, with its records and shares (participants lose the zone). The
    /// default zone cannot be deleted (`LedgerError.Code.invalidArguments`).
    public func deleteRecordZone(withID zoneID: RecordZoneID) async throws(LedgerError) {
        _ = try await runOne(.deleteZone(zoneID))
    }

    /// Saves a record: creates it (no change tag) or changes it (with the change tag it was fetched
    /// with). A participant with read-write permission may save records of a share they accepted.
    ///
    /// - Throws: `LedgerError.Code.serverRecordChanged` for a missing or stale change tag,
    ///   `LedgerError.Code.zoneNotFound`, `LedgerError.Code.referenceViolation` for a missing parent,
    ///   `LedgerError.Code.alreadyShared` when the new parent would put a share inside another,
    ///   `LedgerError.Code.permissionFailure` for a participant without read-write permission,
    ///   `LedgerError.Code.limitExceeded` past 1 MB of fields.
    public func save(_ record: Record) async throws(LedgerError) -> Record {
        guard case .record(let saved) = try await runOne(.saveRecord(record)) else {
            throw LedgerError.unexpectedOutput("save(record)")
        }
        return saved
    }

    /// Deletes a record. Deleting the root of a share deletes the share (as in CloudKit). Records
    /// whose parent it was keep their `parent` reference, which then points at nothing.
    public func deleteRecord(withID recordID: RecordID) async throws(LedgerError) {
        _ = try await runOne(.deleteRecord(recordID))
    }

    /// The record, if the user may read it (their own, or in a share they accepted).
    ///
    /// - Throws: `LedgerError.Code.unknownItem` when it does not exist or is not shared with the user.
    public func record(for recordID: RecordID) throws(LedgerError) -> Record {
        let user = try registeredUser()
        let owner = recordID.zoneID.ownerName == RecordZoneID.defaultOwnerName ? user : recordID.zoneID.ownerName
        let container = containerIdentifier
        let ledger = self.ledger
        return try ledger.read("reading record \(recordID.recordName)") { txn in
            let models = ledger.models
            // In another user's zone, a missing zone or record and one not shared with the user get
            // the same answer: it tells nothing about what the owner has.
            let hidden = LedgerError(.unknownItem, "record \(recordID.recordName): \(Decider.recordNotShared)")
            guard let zone = try models.zone(txn, container, owner: owner, zone: recordID.zoneID.zoneName),
                let state = try models.record(txn, zoneID: zone.zoneID, recordID.recordName)
            else {
                throw owner == user ? LedgerError(.unknownItem, "record \(recordID.recordName) does not exist") : hidden
            }
            if owner != user {
                guard try Container.canRead(txn, models, zone: zone, record: recordID.recordName, user: user) else {
                    throw hidden
                }
            }
            let id = RecordID(recordName: recordID.recordName, zoneID: RecordZoneID(zoneName: recordID.zoneID.zoneName, ownerName: owner))
            return try ledger.presenter.record(txn, state, id: id)
        }
    }

    static func canRead(_ txn: borrowing Transaction, _ models: ReadModels, zone: ZoneState, record: String, user: String)
        throws -> Bool
    {
        guard let token = try models.coveringShare(txn, zone: zone, from: record), let share = try models.share(txn, token),
            let entry = try models.participant(txn, of: user, in: share, token: token)
        else { return false }
        return entry.state.status == .statusAccepted
    }

    /// The zones of the user's private database.
    public func recordZones() throws(LedgerError) -> [RecordZone] {
        let user = try registeredUser()
        let container = containerIdentifier
        let ledger = self.ledger
        return try ledger.read("listing zones") { txn in
            try ledger.models.scan(txn, ledger.models.zones, prefix: ReadModels.key(container, user) + [0]).map { entry in
                let state = try entry.value.withUnsafeBytes { try ZoneState.decodeStored($0, database: "rm_zones") }
                let id = RecordZoneID(zoneName: String(decoding: entry.suffix, as: UTF8.self), ownerName: user)
                return ledger.presenter.zone(state, id: id)
            }
        }
    }
}
