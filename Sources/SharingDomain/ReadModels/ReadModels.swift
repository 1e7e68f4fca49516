import ByteKeys
import EventLog
import Foundation
import SwiftProtobuf

package typealias PB = Shareledger_Events_V1_FieldValue
package typealias RecordState = Shareledger_Readmodels_V1_RecordState
package typealias ResidualTaskState = Shareledger_Readmodels_V1_ResidualTask
package typealias SharedZoneState = Shareledger_Readmodels_V1_SharedZoneState
package typealias VerificationState = Shareledger_Readmodels_V1_VerificationState
package typealias AccessEntryState = Shareledger_Readmodels_V1_AccessEntryState
package typealias AddressState = Shareledger_Readmodels_V1_AddressState

/// The read models' named databases and their key layouts (`docs/log-format.md`, "Read models").
///
/// Every read model is derived from the log and written in the same transaction as the events it
/// reflects. Values are the hand-written compact layout for the rows every action touches
/// (``CompactRow``: shares, participants, zones, users) and protobuf messages
/// (`Protos/shareledger/readmodels/v1`, serialized deterministically) for the others, so a rebuild
/// from the log reproduces them byte for byte.
///
/// A class, not a struct: the decider, the projector and the presenter each hold the read models,
/// and a decision builds them per command; copying two dozen table values (each with its
/// name) per command showed in the writer's profile, a reference is one retain. Immutable: the
/// variants (``keepingRows(in:)``, ``sealing(with:)``, ``notSealingNewEvents()``) are new instances.
/// The tables are the domain's (``ReadModelTable``); the store behind them is not its business.
package final class ReadModels: Sendable {
    /// container ‖ 0 ‖ user record name → UserState.
    package let users: ReadModelTable
    /// container ‖ 0 ‖ `e` or `p` ‖ normalized email or phone → user record name.
    package let userLookup: ReadModelTable
    /// container ‖ 0 ‖ owner ‖ 0 ‖ zone name → ZoneState.
    package let zones: ReadModelTable
    /// zone id (8, big-endian) ‖ record name → RecordState.
    package let records: ReadModelTable
    /// (dupsort) zone id (8) ‖ parent record name → child record name.
    package let recordChildren: ReadModelTable
    /// token → ShareState.
    package let shares: ReadModelTable
    /// token ‖ participant id → ParticipantState.
    package let participants: ReadModelTable
    /// container ‖ 0 ‖ owner ‖ 0 ‖ token → (empty).
    package let sharesByOwner: ReadModelTable
    /// container ‖ 0 ‖ user ‖ 0 ‖ token → participant id (every status, removed included).
    package let sharesByUser: ReadModelTable
    /// container ‖ 0 ‖ user ‖ 0 ‖ zone id (8) → SharedZoneState: zones in each user's shared database.
    package let sharedZones: ReadModelTable
    /// task id (8, big-endian) → ResidualTask: the outbox of the residual-task worker.
    package let outbox: ReadModelTable
    /// token ‖ participant id ‖ 0 ‖ user → VerificationState.
    package let verifications: ReadModelTable
    /// token ‖ kind (`r` pending access request, `b` blocked identity) ‖ user → AccessEntryState.
    package let access: ReadModelTable
    /// one-time URL token → share token ‖ participant id: the one-time URLs of participants in a
    /// share (unused, or taken by the participant who accepted through it).
    package let oneTimeURLs: ReadModelTable
    /// counter name → 8-byte big-endian count.
    package let counters: ReadModelTable
    /// container ‖ 0 ‖ `E` or `P` ‖ keyed hash (32) → AddressState: an address that was forgotten;
    /// the same key ‖ token ‖ participant id → (empty): an invitation sealed to that address.
    package let addresses: ReadModelTable
    /// (dupsort, 8-byte values) token → positions of the events about that share (fetches and
    /// residual-task completions included): the share's history.
    package let shareHistory: ReadModelTable
    /// (dupsort, 8-byte values) container ‖ 0 ‖ user → positions of the events the user did or was
    /// the subject of: the user's history.
    package let userHistory: ReadModelTable
    /// (dupsort, 8-byte values) container → positions of the container's domain events.
    package let containerHistory: ReadModelTable
    /// position (8, big-endian) → ``HistoryJournalEntry``: history entries not yet folded into the
    /// three indexes above (``ReadModels/foldHistory(_:)``).
    package let historyJournal: ReadModelTable
    /// Invitations to be indexed under their address in `rm_addresses`, by position
    /// (``ReadModels/journalAddress(_:position:entry:)``).
    package let addressJournal: ReadModelTable
    /// Per zone: each record's latest change by position (a tombstone for a deleted record), and
    /// where it is by record name (``ReadModels/noteRecordChange(_:zoneID:_:)``): what sync reads.
    package let recordChanges: ReadModelTable
    /// container ‖ 0 ‖ user ‖ 0 ‖ scope ‖ owner ‖ 0 ‖ zone → when the zone came into or left the
    /// user's private or shared database (``ReadModels/noteZoneChange(_:_:user:_:_:)``).
    package let zoneChanges: ReadModelTable
    /// task id → WorkerTaskState: the worker's bookkeeping (not a read model: not rebuilt or compared).
    package let workerTasks: ReadModelTable
    /// `worker_lease` → WorkerLease: which residual-task worker may take tasks, until when (not a read
    /// model). Until format 2's databases gained it, the lease lived in the log's `meta`.
    package let workerState: ReadModelTable

    /// Decoded rows kept between reads (``RowCache``): the writer's, or a replay's; nil for readers.
    package let rowCache: RowCache?

    /// The key store of the ledger (crypto-shredding): seals personal fields of new events, opens
    /// them for answers, and hashes emails and phones for lookups. Nil for stores that are not a
    /// ledger opened in this process (in-memory domains, scratch copies before ``sealing(with:)``):
    /// events are then written and projected with plaintext personal fields, as before.
    package let personalData: (any PersonalDataKeys)?

    /// Whether new events' personal fields are sealed (`ShareLedger.Configuration.sealsPersonalData`).
    package let sealsNewEvents: Bool

    /// The tables, by ``ReadModelTable/index``, each with its store's handle.
    package let tables: [ReadModelTable]

    /// These read models, not sealing new events (sealed ones are still opened).
    package func notSealingNewEvents() -> ReadModels {
        ReadModels(tables: tables, rowCache: rowCache, personalData: personalData, sealsNewEvents: false)
    }

    /// These read models, with `keys` as their key store.
    package func sealing(with keys: (any PersonalDataKeys)?) -> ReadModels {
        ReadModels(tables: tables, rowCache: rowCache, personalData: keys, sealsNewEvents: sealsNewEvents)
    }

    /// These read models, keeping decoded rows in `cache`.
    package func keepingRows(in cache: RowCache) -> ReadModels {
        ReadModels(tables: tables, rowCache: cache, personalData: personalData, sealsNewEvents: sealsNewEvents)
    }

    /// The read models' tables in a store that needs no handles (``InMemoryReadModelStore``).
    package static let unattached = ReadModels(tables: ReadModelTable.catalog, rowCache: nil, personalData: nil, sealsNewEvents: true)

    /// The read models over `tables` (``ReadModelTable/catalog``, each with its store's handle).
    package init(tables: [ReadModelTable], rowCache: RowCache?, personalData: (any PersonalDataKeys)?, sealsNewEvents: Bool) {
        precondition(
            tables.count == ReadModelTable.catalog.count && zip(tables, ReadModelTable.catalog).allSatisfy { $0.name == $1.name },
            "the read models' tables are not the catalog's")
        self.tables = tables
        self.rowCache = rowCache
        self.personalData = personalData
        self.sealsNewEvents = sealsNewEvents
        users = tables[0]
        userLookup = tables[1]
        zones = tables[2]
        records = tables[3]
        recordChildren = tables[4]
        shares = tables[5]
        participants = tables[6]
        sharesByOwner = tables[7]
        sharesByUser = tables[8]
        sharedZones = tables[9]
        outbox = tables[10]
        verifications = tables[11]
        counters = tables[12]
        access = tables[13]
        oneTimeURLs = tables[14]
        addresses = tables[15]
        shareHistory = tables[16]
        userHistory = tables[17]
        containerHistory = tables[18]
        historyJournal = tables[19]
        addressJournal = tables[20]
        recordChanges = tables[21]
        zoneChanges = tables[22]
        workerTasks = tables[23]
        workerState = tables[24]
    }

    /// Every read-model table, in catalog order: every table but the worker's
    /// bookkeeping and lease, which are not derived from the log. Copies take them all; comparisons
    /// compare their ``logicalEntries(_:_:)`` (the history journal as part of the history indexes).
    package var all: [ReadModelTable] {
        [
            users, userLookup, zones, records, recordChildren, shares, participants, sharesByOwner, sharesByUser,
            sharedZones, outbox, verifications, counters, access, oneTimeURLs, addresses, shareHistory, userHistory, containerHistory,
            historyJournal, addressJournal, recordChanges, zoneChanges,
        ]
    }

    // MARK: - Keys

    /// The parts' UTF-8 bytes, each after the first behind a 0 byte.
    package static func key(_ first: String, _ second: String) -> [UInt8] {
        var out = [UInt8](capacity: first.utf8.count + 1 + second.utf8.count)
        out.appendUTF8(first)
        out.append(0)
        out.appendUTF8(second)
        return out
    }

    /// The parts' UTF-8 bytes, each after the first behind a 0 byte.
    package static func key(_ first: String, _ second: String, _ third: String) -> [UInt8] {
        var out = [UInt8](capacity: first.utf8.count + second.utf8.count + third.utf8.count + 2)
        out.appendUTF8(first)
        out.append(0)
        out.appendUTF8(second)
        out.append(0)
        out.appendUTF8(third)
        return out
    }

    package static func userKey(_ container: String, _ user: String) -> [UInt8] { key(container, user) }

    package static func lookupKey(_ container: String, email: String) -> [UInt8] {
        key(container, "e" + normalizeEmail(email))
    }

    package static func lookupKey(_ container: String, phone: String) -> [UInt8] {
        key(container, "p" + normalizePhone(phone))
    }

    /// Bytes of a keyed hash in a lookup key (HMAC-SHA256).
    package static let lookupHashBytes = 32

    /// container ‖ 0 ‖ `kind` (`E` or `P`) ‖ a keyed hash.
    package static func lookupKey(_ container: String, hash: [UInt8], kind: Character) -> [UInt8] {
        var out = [UInt8](capacity: container.utf8.count + 1 + kind.utf8.count + hash.count)
        out.appendUTF8(container)
        out.append(0)
        out.append(contentsOf: kind.utf8)
        out.append(contentsOf: hash)
        return out
    }

    /// The `rm_addresses` key of an address: container ‖ 0 ‖ `E` or `P` ‖ its keyed hash (the
    /// layout of a hashed ``lookupKey(_:hash:kind:)``); an invitation sealed to it adds token ‖
    /// participant id.
    package static func addressKey(_ container: String, _ address: AddressHash) -> [UInt8] {
        lookupKey(container, hash: address.hash, kind: address.kind.letter)
    }

    /// Emails compare case-insensitively, without surrounding spaces.
    ///
    /// ASCII addresses (nearly all) take a byte loop: Foundation's `trimmingCharacters(in:)` bridges
    /// through `NSString` and was a seventh of the writer's time for an invitation by email. For ASCII
    /// text both give the same answer: `.whitespaces` holds only space and tab there, and
    /// `lowercased()` maps only `A`–`Z`.
    package static func normalizeEmail(_ email: String) -> String {
        if let ascii = ASCIIText.trimmedLowercased(email) { return ascii }
        return email.trimmingCharacters(in: .whitespaces).lowercased()
    }

    /// Phone numbers compare by their digits and a leading `+` (ASCII numbers without Foundation, as
    /// ``normalizeEmail(_:)``).
    package static func normalizePhone(_ phone: String) -> String {
        if let ascii = ASCIIText.phoneDigits(phone) { return ascii }
        let trimmed = phone.trimmingCharacters(in: .whitespaces)
        let digits = trimmed.filter(\.isASCIIDigit)
        return (trimmed.hasPrefix("+") ? "+" : "") + digits
    }

    package static func zoneKey(_ container: String, owner: String, zone: String) -> [UInt8] { key(container, owner, zone) }

    package static func recordKey(zoneID: UInt64, _ record: String) -> [UInt8] {
        var out = [UInt8](capacity: 8 + record.utf8.count)
        out.appendBigEndian(zoneID)
        out.appendUTF8(record)
        return out
    }

    package static func participantKey(_ token: String, _ participantID: String) -> [UInt8] {
        var out = [UInt8](capacity: token.utf8.count + participantID.utf8.count)
        out.appendUTF8(token)
        out.appendUTF8(participantID)
        return out
    }

    package static func sharedZoneKey(_ container: String, user: String, zoneID: UInt64) -> [UInt8] {
        var out = [UInt8](capacity: container.utf8.count + user.utf8.count + 10)
        out.appendUTF8(container)
        out.append(0)
        out.appendUTF8(user)
        out.append(0)
        out.appendBigEndian(zoneID)
        return out
    }

    /// What an entry of `rm_access` is.
    package enum AccessKind: UInt8 {
        /// A pending access request.
        case request = 0x72  // "r"
        /// A blocked identity.
        case blocked = 0x62  // "b"
    }

    package static func accessKey(_ token: String, _ kind: AccessKind, user: String) -> [UInt8] {
        var out = [UInt8](capacity: token.utf8.count + 1 + user.utf8.count)
        out.appendUTF8(token)
        out.append(kind.rawValue)
        out.appendUTF8(user)
        return out
    }

    package static func verificationKey(_ token: String, _ participantID: String, user: String) -> [UInt8] {
        var out = [UInt8](capacity: token.utf8.count + participantID.utf8.count + 1 + user.utf8.count)
        out.appendUTF8(token)
        out.appendUTF8(participantID)
        out.append(0)
        out.appendUTF8(user)
        return out
    }

    // MARK: - Values

    /// LMDB's key size limit. A longer (or empty) key cannot be stored, so a lookup of one finds
    /// nothing; it must never reach LMDB, where the error would abort the whole transaction.
    package static let maxKeyBytes = 511

    package static func isStorable(_ key: [UInt8]) -> Bool { !key.isEmpty && key.count <= maxKeyBytes }

    /// Calls `body` with a key of `count` bytes that `build` writes on the stack, or returns nil
    /// when no such key can be stored (empty, or longer than ``maxKeyBytes``): for lookups whose key
    /// is not kept, which then allocate nothing for it.
    @inline(__always)
    package static func withKey<R>(
        count: Int, _ build: (inout KeyWriter) -> Void, _ body: (UnsafeRawBufferPointer) throws -> R?
    ) rethrows -> R? {
        guard count > 0, count <= maxKeyBytes else { return nil }
        return try withBuilt(count: count, build, body)
    }

    /// Calls `body` with `count` bytes that `build` writes into a temporary buffer (on the stack, or
    /// on the heap past the standard library's limit for a temporary): a key or a value that is put or
    /// looked up once and not kept, without an array for it.
    @inline(__always)
    package static func withBuilt<R>(
        count: Int, _ build: (inout KeyWriter) -> Void, _ body: (UnsafeRawBufferPointer) throws -> R
    ) rethrows -> R {
        try withUnsafeTemporaryAllocation(byteCount: count, alignment: 1) { buffer in
            var writer = KeyWriter(buffer: buffer)
            build(&writer)
            precondition(writer.count == count, "a key's or value's parts do not add up to its length")
            return try body(UnsafeRawBufferPointer(buffer))
        }
    }

    /// Writes a key's or value's parts into a buffer of its exact length (``withKey(count:_:_:)``,
    /// ``withBuilt(count:_:_:)``).
    package struct KeyWriter {
        fileprivate let buffer: UnsafeMutableRawBufferPointer
        fileprivate var count = 0

        /// Appends a byte.
        package mutating func append(_ byte: UInt8) {
            buffer[count] = byte
            count += 1
        }

        /// Appends the 8 big-endian bytes of `value`.
        package mutating func append(bigEndian value: UInt64) {
            var be = value.bigEndian
            withUnsafeBytes(of: &be) { bytes in
                UnsafeMutableRawBufferPointer(rebasing: buffer[count..<count + 8]).copyMemory(from: bytes)
            }
            count += 8
        }

        /// Appends the UTF-8 bytes of `text`, at most `limit` of them.
        package mutating func append(_ text: String, atMost limit: Int = .max) {
            var text = text
            text.withUTF8 { utf8 in
                let length = min(utf8.count, limit)
                UnsafeMutableRawBufferPointer(rebasing: buffer[count..<count + length])
                    .copyMemory(from: UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(utf8)[..<length]))
                count += length
            }
        }
    }

    // Inlined (with `put` and the row cache's `row`) into each typed read, where the row
    // type is known: called generically, every read looked up the metadata of `M?` and `M??` in the
    // runtime's generic-metadata cache, 8 % of a rebuild's samples.
    @inline(__always)
    package func message<M: StoredRow>(
        _ type: M.Type, _ txn: borrowing some ReadModelStore & ~Copyable, _ db: ReadModelTable, _ key: [UInt8]
    ) throws -> M? {
        try message(M.self, txn, db, RowCache.Key(db: db.index, key: key))
    }

    /// The row whose key is the UTF-8 bytes of `text` (a share's token): ``message(_:_:_:_:)`` without
    /// copying the key, neither for the row cache nor for the store.
    @inline(__always)
    package func message<M: StoredRow>(
        _ type: M.Type, _ txn: borrowing some ReadModelStore & ~Copyable, _ db: ReadModelTable, text: String
    ) throws -> M? {
        try message(M.self, txn, db, RowCache.Key(db: db.index, text: text))
    }

    /// The row of `key` in `db` (nil for a key that cannot be stored), from the row cache when it
    /// keeps the table, else decoded from its stored bytes (and then kept).
    @inline(__always)
    private func message<M: StoredRow>(
        _ type: M.Type, _ txn: borrowing some ReadModelStore & ~Copyable, _ db: ReadModelTable, _ key: RowCache.Key
    ) throws -> M? {
        guard key.withBytes({ !$0.isEmpty && $0.count <= ReadModels.maxKeyBytes }) else { return nil }
        let rowCache = RowCache.keeps(db) ? rowCache : nil
        if let rowCache, let kept = rowCache.row(M.self, key) { return kept }
        let row = try key.withBytes { k in try txn.withValue(db, key: k) { raw in try M.decodeStored(raw, database: db.name) } }
        rowCache?.keep(key, row: row)
        return row
    }

    @inline(__always)
    package func put<M: StoredRow>(_ txn: borrowing some ReadModelStore & ~Copyable, _ db: ReadModelTable, _ key: [UInt8], _ row: M) throws {
        try put(txn, db, RowCache.Key(db: db.index, key: key), row)
    }

    /// Writes `row` under the UTF-8 bytes of `text`: ``put(_:_:_:_:)`` without copying the key.
    @inline(__always)
    package func put<M: StoredRow>(_ txn: borrowing some ReadModelStore & ~Copyable, _ db: ReadModelTable, text: String, _ row: M) throws {
        try put(txn, db, RowCache.Key(db: db.index, text: text), row)
    }

    /// Writes `row` under `key` in `db`, and keeps it in the row cache when it keeps the table.
    @inline(__always)
    private func put<M: StoredRow>(_ txn: borrowing some ReadModelStore & ~Copyable, _ db: ReadModelTable, _ key: RowCache.Key, _ row: M) throws {
        let value = try row.storedBytes()
        try key.withBytes { k in try value.withUnsafeBytes { v in try txn.put(db, key: k, value: v, flags: []) } }
        if let rowCache, RowCache.keeps(db) { rowCache.keep(key, row: row) }
    }

    /// Deletes the row of `key` in `db` (and forgets it in the ``rowCache``); returns whether there was one.
    @discardableResult
    package func deleteRow(_ txn: borrowing some ReadModelStore & ~Copyable, _ db: ReadModelTable, _ key: [UInt8]) throws -> Bool {
        if let rowCache, RowCache.keeps(db) { rowCache.keep(db, key, nil) }
        return try txn.delete(db, key: key)
    }

    package func putRaw(_ txn: borrowing some ReadModelStore & ~Copyable, _ db: ReadModelTable, _ key: [UInt8], _ value: [UInt8]) throws {
        try txn.put(db, key: key, value: value)
    }

    /// The value under the UTF-8 bytes of `text`, as a string (the key not copied).
    package func string(_ txn: borrowing some ReadModelStore & ~Copyable, _ db: ReadModelTable, text: String) throws -> String? {
        try string(txn, db, RowCache.Key(db: db.index, text: text))
    }

    package func string(_ txn: borrowing some ReadModelStore & ~Copyable, _ db: ReadModelTable, _ key: [UInt8]) throws -> String? {
        try string(txn, db, RowCache.Key(db: db.index, key: key))
    }

    /// The value under `key` as a string (nil for none, or a key that cannot be stored).
    private func string(_ txn: borrowing some ReadModelStore & ~Copyable, _ db: ReadModelTable, _ key: RowCache.Key) throws -> String? {
        try key.withBytes { k in
            guard !k.isEmpty, k.count <= ReadModels.maxKeyBytes else { return nil }
            return try txn.withValue(db, key: k) { String(decoding: $0, as: UTF8.self) }
        }
    }

    /// Every entry of `db` whose key starts with `prefix`, in key order: (key suffix after the prefix, value).
    package func scan(_ txn: borrowing some ReadModelStore & ~Copyable, _ db: ReadModelTable, prefix: [UInt8], limit: Int = .max)
        throws -> [(suffix: [UInt8], value: [UInt8])]
    {
        var out: [(suffix: [UInt8], value: [UInt8])] = []
        try visit(txn, db, prefix: prefix) { key, value in
            guard out.count < limit else { return false }
            out.append((Array(key[prefix.count...]), Array(value)))
            return true
        }
        return out
    }

    /// Visits the entries of `db` whose key starts with `prefix` (every entry for an empty prefix;
    /// none for a prefix no key can start with), in key order, while `body` returns true: each
    /// whole key and its value, valid only inside `body`.
    package func visit(
        _ txn: borrowing some ReadModelStore & ~Copyable, _ db: ReadModelTable, prefix: [UInt8],
        _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        guard prefix.count <= ReadModels.maxKeyBytes else { return }
        try prefix.withUnsafeBytes { p in
            try txn.visit(db, from: prefix.isEmpty ? nil : p) { key, value in
                guard prefix.isEmpty || (key.count >= prefix.count && memcmp(p.baseAddress!, key.baseAddress!, prefix.count) == 0)
                else { return false }
                return try body(key, value)
            }
        }
    }

    // MARK: - Counters

    package enum Counter: String, CaseIterable {
        case shares, participants, acceptedParticipants, users, zones, records, participantZones
    }

    package func counter(_ txn: borrowing some ReadModelStore & ~Copyable, _ counter: Counter) throws -> UInt64 {
        var name = counter.rawValue
        return try name.withUTF8 { key in
            try txn.withValue(counters, key: UnsafeRawBufferPointer(key)) { BigEndian.uint64($0) } ?? nil
        } ?? 0
    }

    /// Adds `delta` to `counter` (its key and value written from the stack: no allocation).
    package func add(_ txn: borrowing some ReadModelStore & ~Copyable, _ counter: Counter, _ delta: Int64) throws {
        guard delta != 0 else { return }
        let current = try self.counter(txn, counter)
        let next = delta < 0 ? current &- UInt64(-delta) : current &+ UInt64(delta)
        var name = counter.rawValue
        try name.withUTF8 { key in
            try BigEndian.withBytes(of: next) { value in
                try txn.put(counters, key: UnsafeRawBufferPointer(key), value: value, flags: [])
            }
        }
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}

package typealias WorkerTaskState = Shareledger_Readmodels_V1_WorkerTaskState
package typealias WorkerLease = Shareledger_Readmodels_V1_WorkerLease
