import ByteKeys
import Crypto
import Foundation
import LMDB
import SharingDomain

/// A point in the change history of a zone or of a user's database (CloudKit's sync token,
/// `CKServerChangeToken`): opaque text a client keeps and hands back to get what changed since.
///
/// A token names a log position (with, for a zone, the zone's identity) and carries a checksum, so
/// an edited or truncated token is refused rather than read as another point. Positions never
/// change, so a token stays good across restarts, rebuilds and replicas of the ledger; one of a
/// zone that was deleted (even if a zone of the same name exists again) is refused with
/// ``EventLog/LedgerError/Code/changeTokenExpired``: fetch from the start.
public struct SyncToken: Sendable, Hashable, CustomStringConvertible {
    /// The token's text (URL-safe base64, 35 characters).
    public let text: String

    enum Kind: UInt8 {
        case zone = 0x7A  // "z"
        case database = 0x64  // "d"
    }

    let kind: Kind
    /// The zone's id (the position of its creation) for a zone's token; the scope for a database's.
    let subject: UInt64
    let position: UInt64

    static let version: UInt8 = 1
    static let byteCount = 26

    init(kind: Kind, subject: UInt64, position: UInt64) {
        (self.kind, self.subject, self.position) = (kind, subject, position)
        var bytes: [UInt8] = [SyncToken.version, kind.rawValue] + BigEndian.bytes(of: subject) + BigEndian.bytes(of: position)
        bytes += SyncToken.checksum(bytes)
        text = Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Reads a token this ledger gave; nil for text that is not one (wrong length, alphabet or checksum).
    public init?(_ text: String) {
        guard text.utf8.count == 35, text.utf8.allSatisfy({ $0 < 0x80 }) else { return nil }
        let standard = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/") + "="
        guard let data = Data(base64Encoded: standard), data.count == SyncToken.byteCount else { return nil }
        let bytes = Array(data)
        guard bytes[0] == SyncToken.version, let kind = Kind(rawValue: bytes[1]),
            Array(bytes[18...]) == SyncToken.checksum(Array(bytes[..<18])),
            let subject = BigEndian.uint64(bytes, at: 2), let position = BigEndian.uint64(bytes, at: 10)
        else { return nil }
        self.init(kind: kind, subject: subject, position: position)
    }

    /// The first 8 bytes of SHA-256 over a domain string and the token's fields.
    static func checksum(_ bytes: [UInt8]) -> [UInt8] {
        Array(SHA256.hash(data: Array("ShareLedger sync token".utf8) + bytes).prefix(8))
    }

    /// The token's text.
    public var description: String { text }
}

/// What changed in a zone since a sync token (CloudKit's `CKFetchRecordZoneChangesOperation` for
/// one zone; `records/changes` over HTTP).
public struct RecordZoneChanges: Sendable {
    /// The records saved since the token, as they are now, each once, in the order of their last change.
    public var changedRecords: [Record]
    /// The shares (`cloudkit.share` records) of the zone saved or changed since the token (their
    /// participants, permissions, requesters...), as the user sees them.
    public var changedShares: [Share]
    /// The records (shares included) deleted since the token (none when fetching from the start).
    public var deletedRecordIDs: [RecordID]
    /// Where the next fetch starts.
    public var syncToken: SyncToken
    /// Whether more changes follow: fetch again with ``syncToken``.
    public var moreComing: Bool
}

/// What changed in a user's private or shared database since a sync token (CloudKit's
/// `CKFetchDatabaseChangesOperation`; `zones/changes` over HTTP).
public struct DatabaseChanges: Sendable {
    /// The zones that came into the database or whose records changed since the token.
    public var changedZoneIDs: [RecordZoneID]
    /// The zones that left the database since the token: deleted by their owner, or (shared
    /// database) no longer shared with the user.
    public var deletedZoneIDs: [RecordZoneID]
    /// Where the next fetch starts.
    public var syncToken: SyncToken
    /// Whether more changes follow (the answer was cut at its limit): fetch again with ``syncToken``.
    public var moreComing: Bool
}

/// A user's databases, as sync sees them.
public enum DatabaseScope: String, Sendable, Hashable, CaseIterable {
    /// The user's own zones.
    case `private`
    /// Other users' zones shared with the user (after accepting, once the residual task placed them).
    case shared

    var changeScope: ChangeScope { self == .private ? .private : .shared }
    var subject: UInt64 { UInt64(changeScope.rawValue) }
}

extension LedgerError.Code {
    /// The sync token is not one of this zone or database (a zone deleted since, or text that is
    /// no token): fetch from the start, without a token.
    public static let changeTokenExpired = LedgerError.Code(21, "changeTokenExpired")
}

extension Container {
    /// The most changes one fetch looks at before it answers `moreComing` (changes the user may not
    /// see are skipped, but count here).
    static let maxChangesExamined = 4_096

    /// The changes of a zone since `token` (from the zone's start when nil), at most `limit` records
    /// (CloudKit's `CKFetchRecordZoneChangesOperation`). In the user's own zone, every change; in
    /// another user's zone that is in the user's shared database, the changes of records shared
    /// with the user (deletions of records a share of the user covered when they went).
    ///
    /// Reads one index entry per change since the token (a per-zone change index kept with the
    /// read models), never the log.
    ///
    /// - Throws: `LedgerError.Code.zoneNotFound` when the zone is not in the user's
    ///   private database (own zones) or shared database (others'),
    ///   ``EventLog/LedgerError/Code/changeTokenExpired`` for a token of another zone (or of this zone
    ///   before it was deleted and made again), `LedgerError.Code.invalidArguments` for a
    ///   limit below 1, `LedgerError.Code.notAuthenticated`.
    public func recordZoneChanges(in zoneID: RecordZoneID, since token: SyncToken? = nil, limit: Int = 200) throws(LedgerError)
        -> RecordZoneChanges
    {
        guard limit >= 1 else { throw LedgerError(.invalidArguments, "the limit must be at least 1") }
        let user = try registeredUser()
        let owner = zoneID.ownerName == RecordZoneID.defaultOwnerName ? user : zoneID.ownerName
        let container = containerIdentifier
        let ledger = self.ledger
        let id = RecordZoneID(zoneName: zoneID.zoneName, ownerName: owner)
        return try ledger.read("fetching the changes of zone \(zoneID.zoneName)") { txn -> RecordZoneChanges in
            let models = ledger.models
            let missing = LedgerError(
                .zoneNotFound,
                owner == user
                    ? "zone \(zoneID.zoneName) does not exist" : "zone \(zoneID.zoneName) is not in your shared database")
            guard let zone = try models.zone(txn, container, owner: owner, zone: zoneID.zoneName) else { throw missing }
            if owner != user {
                let key = ReadModels.sharedZoneKey(container, user: user, zoneID: zone.zoneID)
                guard try key.withUnsafeBytes({ k in try txn.withValue(models.sharedZones, key: k) { _ in true } }) == true else {
                    throw missing
                }
            }
            var start = zone.zoneID
            if let token {
                guard token.kind == .zone, token.subject == zone.zoneID, token.position >= zone.zoneID,
                    token.position <= (try Container.headPosition(txn, ledger))
                else {
                    throw LedgerError(
                        .changeTokenExpired, "the sync token is not one of zone \(zoneID.zoneName) as it is now; fetch its changes without a token")
                }
                start = token.position
            }
            let examined = try models.recordChanges(txn, zoneID: zone.zoneID, after: start, limit: Container.maxChangesExamined)
            var changed: [Record] = []
            var shares: [Share] = []
            var deleted: [RecordID] = []
            var last = start
            var cut = examined.count == Container.maxChangesExamined
            for entry in examined {
                guard changed.count + shares.count + deleted.count < limit else {
                    cut = true
                    break
                }
                last = entry.position
                if entry.deleted {
                    // From the start, a deletion changes nothing the client has.
                    guard token != nil else { continue }
                    if owner != user {
                        guard !entry.shareToken.isEmpty, let share = try models.share(txn, entry.shareToken),
                            let participant = try models.participant(txn, of: user, in: share, token: entry.shareToken),
                            participant.state.status == .statusAccepted
                        else { continue }
                    }
                    deleted.append(RecordID(recordName: entry.recordName, zoneID: id))
                } else if entry.isShare {
                    guard let state = try models.share(txn, entry.shareToken) else { continue }
                    if owner != user {
                        guard let participant = try models.participant(txn, of: user, in: state, token: entry.shareToken),
                            participant.state.status == .statusAccepted
                        else { continue }
                    }
                    shares.append(try ledger.presenter.share(txn, token: entry.shareToken, state: state, viewer: user))
                } else {
                    guard let state = try models.record(txn, zoneID: zone.zoneID, entry.recordName) else { continue }
                    if owner != user, try !Container.canRead(txn, models, zone: zone, record: entry.recordName, user: user) { continue }
                    changed.append(try ledger.presenter.record(txn, state, id: RecordID(recordName: entry.recordName, zoneID: id)))
                }
            }
            return RecordZoneChanges(
                changedRecords: changed, changedShares: shares, deletedRecordIDs: deleted, syncToken: SyncToken(kind: .zone, subject: zone.zoneID, position: last),
                moreComing: cut)
        }
    }

    /// The zones of the user's private or shared database that changed since `token` (all of them
    /// when nil), at most `limit` (CloudKit's `CKFetchDatabaseChangesOperation`): zones that came
    /// into the database or whose records changed, and zones that left it.
    ///
    /// Reads one index entry per zone of the database and one per zone's changes, never the log.
    ///
    /// - Throws: ``EventLog/LedgerError/Code/changeTokenExpired`` for a token of another database
    ///   or a position the ledger has not reached, `LedgerError.Code.invalidArguments` for
    ///   a limit below 1, `LedgerError.Code.notAuthenticated`.
    public func databaseChanges(_ scope: DatabaseScope, since token: SyncToken? = nil, limit: Int = 200) throws(LedgerError)
        -> DatabaseChanges
    {
        guard limit >= 1 else { throw LedgerError(.invalidArguments, "the limit must be at least 1") }
        let user = try registeredUser()
        let container = containerIdentifier
        let ledger = self.ledger
        return try ledger.read("fetching the changes of the \(scope.rawValue) database") { txn -> DatabaseChanges in
            let models = ledger.models
            let head = try Container.headPosition(txn, ledger)
            var since: UInt64 = 0
            if let token {
                guard token.kind == .database, token.subject == scope.subject, token.position <= head else {
                    throw LedgerError(
                        .changeTokenExpired, "the sync token is not one of your \(scope.rawValue) database; fetch its changes without a token")
                }
                since = token.position
            }
            // Each zone with when it last changed (as far as it is after `since`), in that order.
            var found: [(zone: RecordZoneID, at: UInt64, deleted: Bool)] = []
            for entry in try models.zoneChanges(txn, container, user: user, scope.changeScope) {
                let id = RecordZoneID(zoneName: entry.zoneName, ownerName: entry.ownerName)
                if entry.deleted {
                    if token != nil, entry.position > since { found.append((id, entry.position, true)) }
                    continue
                }
                var at = entry.position
                if at <= since {
                    // The zone's first change after the token, if any: one seek.
                    guard let next = try models.recordChanges(txn, zoneID: entry.zoneID, after: since, limit: 1).first else { continue }
                    at = next.position
                }
                found.append((id, at, false))
            }
            found.sort { $0.at < $1.at }
            let page = found.prefix(limit)
            let moreComing = found.count > limit
            // Cut at the limit: the next fetch starts just before the first zone left out.
            let next = moreComing ? found[limit].at - 1 : head
            return DatabaseChanges(
                changedZoneIDs: page.filter { !$0.deleted }.map(\.zone), deletedZoneIDs: page.filter(\.deleted).map(\.zone),
                syncToken: SyncToken(kind: .database, subject: scope.subject, position: max(next, since)), moreComing: moreComing)
        }
    }

    /// The log position the read models reflect, in `txn`.
    static func headPosition(_ txn: borrowing Transaction, _ ledger: ShareLedger) throws -> UInt64 {
        try ledger.log.store.recordedDerivedPosition(txn)?.position ?? ledger.log.store.readHead(txn).position.rawValue
    }
}
