import EventLog
import Foundation
import LMDB
import SwiftProtobuf

typealias PB = Shareledger_Events_V1_FieldValue
typealias RecordState = Shareledger_Readmodels_V1_RecordState
typealias ResidualTaskState = Shareledger_Readmodels_V1_ResidualTask
typealias SharedZoneState = Shareledger_Readmodels_V1_SharedZoneState
typealias VerificationState = Shareledger_Readmodels_V1_VerificationState
typealias AccessEntryState = Shareledger_Readmodels_V1_AccessEntryState
typealias AddressState = Shareledger_Readmodels_V1_AddressState

/// The read models' named databases and their key layouts (`docs/log-format.md`, "Read models").
///
/// Every read model is derived from the log and written in the same transaction as the events it
/// reflects. Values are the hand-written compact layout for the rows every action touches
/// (``CompactRow``: shares, participants, zones, users) and protobuf messages
/// (`Protos/shareledger/readmodels/v1`, serialized deterministically) for the others, so a rebuild
/// from the log reproduces them byte for byte.
///
/// A class, not a struct: the decider, the projector and the presenter each hold the read models,
/// and a decision builds them per command; copying two dozen ``Database`` values (each with its
/// name) per command showed in the writer's profile, a reference is one retain. Immutable: the
/// variants (``keepingRows(in:)``, ``sealing(with:)``, ``notSealingNewEvents()``) are new instances.
package final class ReadModels: Sendable {
    /// container ‖ 0 ‖ user record name → UserState.
    let users: Database
    /// container ‖ 0 ‖ `e` or `p` ‖ normalized email or phone → user record name.
    let userLookup: Database
    /// container ‖ 0 ‖ owner ‖ 0 ‖ zone name → ZoneState.
    let zones: Database
    /// zone id (8, big-endian) ‖ record name → RecordState.
    let records: Database
    /// (dupsort) zone id (8) ‖ parent record name → child record name.
    let recordChildren: Database
    /// token → ShareState.
    let shares: Database
    /// token ‖ participant id → ParticipantState.
    let participants: Database
    /// container ‖ 0 ‖ owner ‖ 0 ‖ token → (empty).
    let sharesByOwner: Database
    /// container ‖ 0 ‖ user ‖ 0 ‖ token → participant id (every status, removed included).
    let sharesByUser: Database
    /// container ‖ 0 ‖ user ‖ 0 ‖ zone id (8) → SharedZoneState: zones in each user's shared database.
    let sharedZones: Database
    /// task id (8, big-endian) → ResidualTask: the outbox of the residual-task worker.
    let outbox: Database
    /// token ‖ participant id ‖ 0 ‖ user → VerificationState.
    let verifications: Database
    /// token ‖ kind (`r` pending access request, `b` blocked identity) ‖ user → AccessEntryState.
    let access: Database
    /// one-time URL token → share token ‖ participant id: the one-time URLs of participants in a
    /// share (unused, or taken by the participant who accepted through it).
    let oneTimeURLs: Database
    /// counter name → 8-byte big-endian count.
    let counters: Database
    /// container ‖ 0 ‖ `E` or `P` ‖ keyed hash (32) → AddressState: an address that was forgotten;
    /// the same key ‖ token ‖ participant id → (empty): an invitation sealed to that address.
    let addresses: Database
    /// (dupsort, 8-byte values) token → positions of the events about that share (fetches and
    /// residual-task completions included): the share's history.
    package let shareHistory: Database
    /// (dupsort, 8-byte values) container ‖ 0 ‖ user → positions of the events the user did or was
    /// the subject of: the user's history.
    package let userHistory: Database
    /// (dupsort, 8-byte values) container → positions of the container's domain events.
    package let containerHistory: Database
    /// position (8, big-endian) → ``HistoryJournalEntry``: history entries not yet folded into the
    /// three indexes above (``ReadModels/foldHistory(_:)``).
    package let historyJournal: Database
    /// Invitations to be indexed under their address in `rm_addresses`, by position
    /// (``ReadModels/journalAddress(_:position:entry:)``).
    let addressJournal: Database
    /// Per zone: each record's latest change by position (a tombstone for a deleted record), and
    /// where it is by record name (``ReadModels/noteRecordChange(_:zoneID:_:)``): what sync reads.
    let recordChanges: Database
    /// container ‖ 0 ‖ user ‖ 0 ‖ scope ‖ owner ‖ 0 ‖ zone → when the zone came into or left the
    /// user's private or shared database (``ReadModels/noteZoneChange(_:_:user:_:_:)``).
    let zoneChanges: Database
    /// task id → WorkerTaskState: the worker's bookkeeping (not a read model: not rebuilt or compared).
    let workerTasks: Database
    /// `worker_lease` → WorkerLease: which residual-task worker may take tasks, until when (not a read
    /// model). Until format 2's databases gained it, the lease lived in the log's `meta`.
    let workerState: Database

    /// Decoded rows kept between reads (``RowCache``): the writer's, or a replay's; nil for readers.
    let rowCache: RowCache?

    /// The key store of the ledger (crypto-shredding): seals personal fields of new events, opens
    /// them for answers, and hashes emails and phones for lookups. Nil for stores that are not a
    /// ledger opened in this process (in-memory domains, scratch copies before ``sealing(with:)``):
    /// events are then written and projected with plaintext personal fields, as before.
    package let vault: PersonalDataVault?

    /// Whether new events' personal fields are sealed (``ShareLedger/Configuration/sealsPersonalData``).
    let sealsNewEvents: Bool

    /// The databases by name, for the variants below.
    private let byName: [String: Database]

    /// These read models, not sealing new events (sealed ones are still opened).
    func notSealingNewEvents() -> ReadModels {
        ReadModels(byName: byName, rowCache: rowCache, vault: vault, sealsNewEvents: false)
    }

    /// These read models, with `vault` as their key store.
    package func sealing(with vault: PersonalDataVault?) -> ReadModels {
        ReadModels(byName: byName, rowCache: rowCache, vault: vault, sealsNewEvents: sealsNewEvents)
    }

    /// These read models, keeping decoded rows in `cache`.
    func keepingRows(in cache: RowCache) -> ReadModels {
        ReadModels(byName: byName, rowCache: cache, vault: vault, sealsNewEvents: sealsNewEvents)
    }

    /// The databases the sharing layer adds to the log's environment (``EventLog/Configuration/databases``).
    /// Every one but the worker's bookkeeping and lease is derived from the log, so it lives in the
    /// companion environment that is flushed off the commit path (``DerivedState``), with a twin
    /// that a rebuild which rewrites it fills and switches in (``ReadModelRebuild``).
    static let specs: [DatabaseSpec] = [
        DatabaseSpec("rm_users", derived: true, twinned: true),
        DatabaseSpec("rm_user_lookup", derived: true, twinned: true),
        DatabaseSpec("rm_zones", derived: true, twinned: true),
        DatabaseSpec("rm_records", derived: true, twinned: true),
        DatabaseSpec("rm_record_children", [.dupSort], derived: true, twinned: true),
        DatabaseSpec("rm_shares", derived: true, twinned: true),
        DatabaseSpec("rm_participants", derived: true, twinned: true),
        DatabaseSpec("rm_shares_by_owner", derived: true, twinned: true),
        DatabaseSpec("rm_shares_by_user", derived: true, twinned: true),
        DatabaseSpec("rm_shared_zones", derived: true, twinned: true),
        DatabaseSpec("rm_outbox", derived: true, twinned: true),
        DatabaseSpec("rm_verifications", derived: true, twinned: true),
        DatabaseSpec("rm_counters", derived: true, twinned: true),
        DatabaseSpec("rm_access", derived: true, twinned: true),
        DatabaseSpec("rm_one_time_urls", derived: true, twinned: true),
        DatabaseSpec("rm_addresses", derived: true, twinned: true),
        DatabaseSpec("idx_share_history", [.dupSort, .dupFixed], derived: true, twinned: true),
        DatabaseSpec("idx_user_history", [.dupSort, .dupFixed], derived: true, twinned: true),
        DatabaseSpec("idx_container_history", [.dupSort, .dupFixed], derived: true, twinned: true),
        DatabaseSpec("idx_history_journal", derived: true, twinned: true),
        DatabaseSpec("idx_address_journal", derived: true, twinned: true),
        DatabaseSpec("idx_record_changes", derived: true, twinned: true),
        DatabaseSpec("idx_zone_changes", derived: true, twinned: true),
        DatabaseSpec("worker_tasks"),
        DatabaseSpec("worker_state"),
    ]

    /// The read models of a log opened with ``specs`` among its databases.
    convenience init(_ store: LogStore) {
        self.init(
            byName: store.extensionDatabases, rowCache: nil,
            vault: PersonalDataVault.registered(at: store.environment.options.path), sealsNewEvents: true)
    }

    /// The read models' tables in a store that is not LMDB (``InMemoryReadModelStore``).
    static let unattached = ReadModels(
        byName: Dictionary(uniqueKeysWithValues: specs.map { ($0.name, Database.unattached(name: $0.name, flags: $0.flags)) }),
        rowCache: nil, vault: nil, sealsNewEvents: true)

    private init(byName: [String: Database], rowCache: RowCache?, vault: PersonalDataVault?, sealsNewEvents: Bool) {
        self.byName = byName
        self.rowCache = rowCache
        self.vault = vault
        self.sealsNewEvents = sealsNewEvents
        precondition(ReadModels.specs.allSatisfy { byName[$0.name] != nil }, "the log was opened without the read models' databases")
        users = byName["rm_users"]!
        userLookup = byName["rm_user_lookup"]!
        zones = byName["rm_zones"]!
        records = byName["rm_records"]!
        recordChildren = byName["rm_record_children"]!
        shares = byName["rm_shares"]!
        participants = byName["rm_participants"]!
        sharesByOwner = byName["rm_shares_by_owner"]!
        sharesByUser = byName["rm_shares_by_user"]!
        sharedZones = byName["rm_shared_zones"]!
        outbox = byName["rm_outbox"]!
        verifications = byName["rm_verifications"]!
        counters = byName["rm_counters"]!
        access = byName["rm_access"]!
        oneTimeURLs = byName["rm_one_time_urls"]!
        addresses = byName["rm_addresses"]!
        shareHistory = byName["idx_share_history"]!
        userHistory = byName["idx_user_history"]!
        containerHistory = byName["idx_container_history"]!
        historyJournal = byName["idx_history_journal"]!
        addressJournal = byName["idx_address_journal"]!
        recordChanges = byName["idx_record_changes"]!
        zoneChanges = byName["idx_zone_changes"]!
        workerTasks = byName["worker_tasks"]!
        workerState = byName["worker_state"]!
    }

    /// Every read-model database, in `specs` order: every database of `specs` but the worker's
    /// bookkeeping and lease, which are not derived from the log. Copies take them all; comparisons
    /// compare their ``logicalEntries(_:_:)`` (the history journal as part of the history indexes).
    package var all: [Database] {
        [
            users, userLookup, zones, records, recordChildren, shares, participants, sharesByOwner, sharesByUser,
            sharedZones, outbox, verifications, counters, access, oneTimeURLs, addresses, shareHistory, userHistory, containerHistory,
            historyJournal, addressJournal, recordChanges, zoneChanges,
        ]
    }

    // MARK: - Keys

    static func key(_ parts: String...) -> [UInt8] {
        var out: [UInt8] = []
        for (index, part) in parts.enumerated() {
            if index > 0 { out.append(0) }
            out.append(contentsOf: part.utf8)
        }
        return out
    }

    package static func userKey(_ container: String, _ user: String) -> [UInt8] { key(container, user) }

    static func lookupKey(_ container: String, email: String) -> [UInt8] {
        key(container, "e" + normalizeEmail(email))
    }

    static func lookupKey(_ container: String, phone: String) -> [UInt8] {
        key(container, "p" + normalizePhone(phone))
    }

    /// Bytes of a keyed hash in a lookup key (HMAC-SHA256).
    static let lookupHashBytes = 32

    /// container ‖ 0 ‖ `kind` (`E` or `P`) ‖ a keyed hash.
    static func lookupKey(_ container: String, hash: [UInt8], kind: Character) -> [UInt8] {
        key(container, String(kind)) + hash
    }

    /// The `rm_addresses` key of an address: container ‖ 0 ‖ `E` or `P` ‖ its keyed hash (the
    /// layout of a hashed ``lookupKey(_:hash:kind:)``); an invitation sealed to it adds token ‖
    /// participant id.
    static func addressKey(_ container: String, _ address: AddressHash) -> [UInt8] {
        lookupKey(container, hash: address.hash, kind: address.kind.letter)
    }

    /// Emails compare case-insensitively, without surrounding spaces.
    ///
    /// ASCII addresses (nearly all) take a byte loop: Foundation's `trimmingCharacters(in:)` bridges
    /// through `NSString` and was a seventh of the writer's time for an invitation by email. For ASCII
    /// text both give the same answer: `.whitespaces` holds only space and tab there, and
    /// `lowercased()` maps only `A`–`Z`.
    static func normalizeEmail(_ email: String) -> String {
        if let ascii = ASCIIText.trimmedLowercased(email) { return ascii }
        return email.trimmingCharacters(in: .whitespaces).lowercased()
    }

    /// Phone numbers compare by their digits and a leading `+` (ASCII numbers without Foundation, as
    /// ``normalizeEmail(_:)``).
    static func normalizePhone(_ phone: String) -> String {
        if let ascii = ASCIIText.phoneDigits(phone) { return ascii }
        let trimmed = phone.trimmingCharacters(in: .whitespaces)
        let digits = trimmed.filter(\.isASCIIDigit)
        return (trimmed.hasPrefix("+") ? "+" : "") + digits
    }

    static func zoneKey(_ container: String, owner: String, zone: String) -> [UInt8] { key(container, owner, zone) }

    static func recordKey(zoneID: UInt64, _ record: String) -> [UInt8] {
        BigEndian.bytes(of: zoneID) + Array(record.utf8)
    }

    static func participantKey(_ token: String, _ participantID: String) -> [UInt8] {
        Array(token.utf8) + Array(participantID.utf8)
    }

    static func sharedZoneKey(_ container: String, user: String, zoneID: UInt64) -> [UInt8] {
        key(container, user) + [0] + BigEndian.bytes(of: zoneID)
    }

    /// What an entry of `rm_access` is.
    enum AccessKind: UInt8 {
        /// A pending access request.
        case request = 0x72  // "r"
        /// A blocked identity.
        case blocked = 0x62  // "b"
    }

    static func accessKey(_ token: String, _ kind: AccessKind, user: String) -> [UInt8] {
        Array(token.utf8) + [kind.rawValue] + Array(user.utf8)
    }

    static func verificationKey(_ token: String, _ participantID: String, user: String) -> [UInt8] {
        Array(token.utf8) + Array(participantID.utf8) + [0] + Array(user.utf8)
    }

    // MARK: - Values

    /// LMDB's key size limit. A longer (or empty) key cannot be stored, so a lookup of one finds
    /// nothing; it must never reach LMDB, where the error would abort the whole transaction.
    static let maxKeyBytes = 511

    package static func isStorable(_ key: [UInt8]) -> Bool { !key.isEmpty && key.count <= maxKeyBytes }

    func message<M: StoredRow>(
        _ type: M.Type, _ txn: borrowing some ReadModelStore & ~Copyable, _ db: Database, _ key: [UInt8]
    ) throws -> M? {
        guard ReadModels.isStorable(key) else { return nil }
        if let rowCache, RowCache.keeps(db) {
            if let kept = rowCache.row(M.self, db, key) { return kept }
            let row = try decode(M.self, txn, db, key)
            rowCache.keep(db, key, row: row)
            return row
        }
        return try decode(M.self, txn, db, key)
    }

    /// The row of `key` in `db`, decoded from its stored bytes.
    private func decode<M: StoredRow>(
        _ type: M.Type, _ txn: borrowing some ReadModelStore & ~Copyable, _ db: Database, _ key: [UInt8]
    ) throws -> M? {
        try key.withUnsafeBytes { k in
            try txn.withValue(db, key: k) { raw in try M.decodeStored(raw, database: db.name) }
        }
    }

    func put<M: StoredRow>(_ txn: borrowing some ReadModelStore & ~Copyable, _ db: Database, _ key: [UInt8], _ row: M) throws {
        try txn.put(db, key: key, value: try row.storedBytes())
        if let rowCache, RowCache.keeps(db) { rowCache.keep(db, key, row: row) }
    }

    /// Deletes the row of `key` in `db` (and forgets it in the ``rowCache``); returns whether there was one.
    @discardableResult
    func deleteRow(_ txn: borrowing some ReadModelStore & ~Copyable, _ db: Database, _ key: [UInt8]) throws -> Bool {
        if let rowCache, RowCache.keeps(db) { rowCache.keep(db, key, nil) }
        return try txn.delete(db, key: key)
    }

    func putRaw(_ txn: borrowing some ReadModelStore & ~Copyable, _ db: Database, _ key: [UInt8], _ value: [UInt8]) throws {
        try txn.put(db, key: key, value: value)
    }

    func string(_ txn: borrowing some ReadModelStore & ~Copyable, _ db: Database, _ key: [UInt8]) throws -> String? {
        guard ReadModels.isStorable(key) else { return nil }
        return try key.withUnsafeBytes { k in
            try txn.withValue(db, key: k) { String(decoding: $0, as: UTF8.self) }
        }
    }

    /// Every entry of `db` whose key starts with `prefix`, in key order: (key suffix after the prefix, value).
    func scan(_ txn: borrowing some ReadModelStore & ~Copyable, _ db: Database, prefix: [UInt8], limit: Int = .max)
        throws -> [(suffix: [UInt8], value: [UInt8])]
    {
        guard prefix.count <= ReadModels.maxKeyBytes else { return [] }
        var out: [(suffix: [UInt8], value: [UInt8])] = []
        try prefix.withUnsafeBytes { p in
            try txn.visit(db, from: prefix.isEmpty ? nil : p) { key, value in
                guard out.count < limit else { return false }
                guard prefix.isEmpty || (key.count >= prefix.count && memcmp(p.baseAddress!, key.baseAddress!, prefix.count) == 0)
                else { return false }
                out.append((Array(key[prefix.count...]), Array(value)))
                return true
            }
        }
        return out
    }

    // MARK: - Counters

    enum Counter: String, CaseIterable {
        case shares, participants, acceptedParticipants, users, zones, records, participantZones
    }

    func counter(_ txn: borrowing some ReadModelStore & ~Copyable, _ counter: Counter) throws -> UInt64 {
        try txn.get(counters, key: Array(counter.rawValue.utf8)).flatMap { BigEndian.uint64($0) } ?? 0
    }

    func add(_ txn: borrowing some ReadModelStore & ~Copyable, _ counter: Counter, _ delta: Int64) throws {
        guard delta != 0 else { return }
        let current = try self.counter(txn, counter)
        let next = delta < 0 ? current &- UInt64(-delta) : current &+ UInt64(delta)
        try txn.put(counters, key: Array(counter.rawValue.utf8), value: BigEndian.bytes(of: next))
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}

typealias WorkerTaskState = Shareledger_Readmodels_V1_WorkerTaskState
typealias WorkerLease = Shareledger_Readmodels_V1_WorkerLease

extension LogStore {
    /// The read models of a store opened with their databases (``openLedger(_:)``, or a log opened by
    /// ``ShareLedger/open(_:)``).
    package var models: ReadModels { ReadModels(self) }

    /// Opens a ledger's databases, the read models' included, without a writer thread: scratch
    /// ledgers of rebuilds and snapshots, and copies read by the audit.
    ///
    /// Without a writer there is nothing to bring a derived state kept apart up to the log, so a
    /// new ledger opened this way keeps its read models with the log (one environment); a ledger
    /// already laid out with its derived state apart is opened as it is.
    package static func openLedger(_ configuration: EventLog.Configuration) throws(LedgerError) -> LogStore {
        var configuration = ReadModels.ledgerConfiguration(configuration)
        configuration.defersDerivedState = false
        return try open(configuration)
    }
}

extension ReadModels {
    /// How the log's writer brings the read models of `store` up to its head when it finds them
    /// behind (``EventLog/Configuration/derivedReplay``): each domain event projected as it was
    /// when it was appended; other event types change nothing.
    static func projection(into store: LogStore) -> DerivedProjection {
        let projector = Projector(models: store.models)
        return { txn, envelope in
            guard let event = try DomainEvent.decode(envelope) else { return }
            _ = try projector.apply(event, Projector.Context(envelope), txn)
        }
    }

    /// `configuration` with the read models' databases added: how every opening of a sharing
    /// ledger's environment (``ShareLedger/open(_:)``, ``ShareLedger/openLog(_:)``, scratch copies)
    /// asks the log for them.
    static func ledgerConfiguration(_ configuration: EventLog.Configuration) -> EventLog.Configuration {
        var configuration = configuration
        configuration.databases = specs
        // A key store copied in before the first open (to import an export with its keys).
        configuration.companionFiles = [PersonalDataVault.fileName]
        // Scratch ledgers keep everything in one environment (``DerivedState/placement``).
        configuration.defersDerivedState = true
        configuration.derivedReplay = { store in ReadModels.projection(into: store) }
        return configuration
    }
}
