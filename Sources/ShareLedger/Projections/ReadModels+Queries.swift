import Foundation
import LMDB
import SwiftProtobuf

/// Typed reads of the read models, shared by the decider (inside the writer's transaction) and the
/// query API (inside short read transactions).
extension ReadModels {
    func user(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, _ name: String) throws -> UserState? {
        try message(UserState.self, txn, users, ReadModels.userKey(container, name))
    }

    /// Whether `name` is a registered user of `container` (forgotten ones included), without
    /// decoding the row: most decisions check only that the caller or a named user exists, and a
    /// replay has no row cache to answer that from (decoding the row was 6 % of a rebuild's samples).
    func userExists(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, _ name: String) throws -> Bool {
        let key = ReadModels.userKey(container, name)
        guard ReadModels.isStorable(key) else { return false }
        if let rowCache, let known = rowCache.knows(users, key) { return known }
        return try key.withUnsafeBytes { k in try txn.withValue(users, key: k) { _ in true } } ?? false
    }

    func zone(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, owner: String, zone: String) throws -> ZoneState? {
        try message(ZoneState.self, txn, zones, ReadModels.zoneKey(container, owner: owner, zone: zone))
    }

    func record(_ txn: borrowing some ReadModelStore & ~Copyable, zoneID: UInt64, _ name: String) throws -> RecordState? {
        try message(RecordState.self, txn, records, ReadModels.recordKey(zoneID: zoneID, name))
    }

    /// A record's parent and the token of the live share rooted at it (empty when none), read from
    /// its stored bytes without decoding its fields: for walks up and down a hierarchy, which need
    /// nothing else of each record they pass.
    func recordLink(_ txn: borrowing some ReadModelStore & ~Copyable, zoneID: UInt64, _ name: String) throws
        -> (parent: String, shareToken: String)?
    {
        let key = ReadModels.recordKey(zoneID: zoneID, name)
        guard ReadModels.isStorable(key) else { return nil }
        return try key.withUnsafeBytes { k in
            try txn.withValue(records, key: k) { raw throws -> (parent: String, shareToken: String) in
                // RecordState: parent_record_name = 3, share_token = 5.
                guard let parent = ProtobufScan.lengthDelimited(field: 3, in: raw),
                    let token = ProtobufScan.lengthDelimited(field: 5, in: raw)
                else {
                    throw LedgerError(.corruptedData, "a row of rm_records does not decode; run `share-ledger rebuild`")
                }
                return (String(decoding: parent, as: UTF8.self), String(decoding: token, as: UTF8.self))
            }
        }
    }

    func share(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String) throws -> ShareState? {
        try message(ShareState.self, txn, shares, Array(token.utf8))
    }

    func participant(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String, _ participantID: String) throws -> ParticipantState? {
        try message(ParticipantState.self, txn, participants, ReadModels.participantKey(token, participantID))
    }

    /// Every participant of a share (removed ones included), by participant id.
    func participants(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String) throws -> [(id: String, state: ParticipantState)] {
        let prefix = Array(token.utf8)
        return try scan(txn, participants, prefix: prefix).map { entry in
            let id = String(decoding: entry.suffix, as: UTF8.self)
            if let rowCache, case .some(.some(let kept)) = rowCache.row(ParticipantState.self, participants, prefix + entry.suffix) {
                return (id, kept)
            }
            let state = try entry.value.withUnsafeBytes { try ParticipantState.decodeStored($0, database: participants.name) }
            rowCache?.keep(participants, prefix + entry.suffix, row: state)
            return (id, state)
        }
    }

    /// The participant id `user` has (or had) in share `token`.
    func participantID(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, user: String, token: String) throws -> String? {
        try string(txn, sharesByUser, ReadModels.key(container, user, token))
    }

    /// The user's participant entry in the share, if any (any status).
    func participant(_ txn: borrowing some ReadModelStore & ~Copyable, of user: String, in share: ShareState, token: String) throws
        -> (id: String, state: ParticipantState)?
    {
        guard let id = try participantID(txn, share.container, user: user, token: token),
            let state = try participant(txn, token, id)
        else { return nil }
        return (id, state)
    }

    /// The user registered with `email`: by its keyed hash (users registered since crypto-shredding),
    /// else by the plaintext key of users registered before it.
    func userName(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, email: String) throws -> String? {
        if let hashed = hashedLookupKey(container, email: email), let name = try string(txn, userLookup, hashed) { return name }
        return try string(txn, userLookup, ReadModels.lookupKey(container, email: email))
    }

    /// The user registered with `phone` (as ``userName(_:_:email:)``).
    func userName(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, phone: String) throws -> String? {
        if let hashed = hashedLookupKey(container, phone: phone), let name = try string(txn, userLookup, hashed) { return name }
        return try string(txn, userLookup, ReadModels.lookupKey(container, phone: phone))
    }

    /// container ‖ 0 ‖ `E` ‖ HMAC of the normalized email: the lookup key of a user registered with
    /// sealed personal data. Nil without a key store.
    func hashedLookupKey(_ container: String, email: String) -> [UInt8]? {
        lookupHash(container, email: email).map { ReadModels.lookupKey(container, hash: $0, kind: "E") }
    }

    /// container ‖ 0 ‖ `P` ‖ HMAC of the normalized phone (as ``hashedLookupKey(_:email:)``).
    func hashedLookupKey(_ container: String, phone: String) -> [UInt8]? {
        lookupHash(container, phone: phone).map { ReadModels.lookupKey(container, hash: $0, kind: "P") }
    }

    /// The keyed hash of `email` (normalized) under the key store's lookup key; nil without one.
    func lookupHash(_ container: String, email: String) -> [UInt8]? {
        vault?.lookupHash("e", container: container, normalized: ReadModels.normalizeEmail(email))
    }

    /// The keyed hash of `phone` (normalized); nil without a key store.
    func lookupHash(_ container: String, phone: String) -> [UInt8]? {
        vault?.lookupHash("p", container: container, normalized: ReadModels.normalizePhone(phone))
    }

    /// The tokens of the live shares `owner` owns in `container`.
    func shareTokens(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, owner: String) throws -> [String] {
        try scan(txn, sharesByOwner, prefix: ReadModels.key(container, owner) + [0]).map {
            String(decoding: $0.suffix, as: UTF8.self)
        }
    }

    /// (token, participant id) of every share `user` is or was a participant of in `container`.
    func participations(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, user: String) throws
        -> [(token: String, participantID: String)]
    {
        try scan(txn, sharesByUser, prefix: ReadModels.key(container, user) + [0]).map {
            (String(decoding: $0.suffix, as: UTF8.self), String(decoding: $0.value, as: UTF8.self))
        }
    }

    /// The entry of `user` of the given kind in share `token` (a pending access request, or a block).
    func accessEntry(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String, _ kind: AccessKind, user: String) throws
        -> AccessEntryState?
    {
        try message(AccessEntryState.self, txn, access, ReadModels.accessKey(token, kind, user: user))
    }

    /// Every entry of the given kind in share `token`, by user record name, in name order.
    func accessEntries(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String, _ kind: AccessKind) throws
        -> [(user: String, state: AccessEntryState)]
    {
        try scan(txn, access, prefix: Array(token.utf8) + [kind.rawValue]).map { entry in
            let state = try entry.value.withUnsafeBytes { try AccessEntryState.decodeStored($0, database: access.name) }
            return (String(decoding: entry.suffix, as: UTF8.self), state)
        }
    }

    /// The share token and participant id of a one-time URL token whose participant is in the share
    /// (unused, or accepted through it).
    func oneTimeURL(_ txn: borrowing some ReadModelStore & ~Copyable, _ oneTimeToken: String) throws
        -> (token: String, participantID: String)?
    {
        guard ShareToken(oneTimeToken) != nil, let value = try string(txn, oneTimeURLs, Array(oneTimeToken.utf8)),
            value.utf8.count > ShareToken.length
        else { return nil }
        let split = value.utf8.index(value.utf8.startIndex, offsetBy: ShareToken.length)
        return (String(value[..<split]), String(value[split...]))
    }

    /// The residual task `id` of the outbox, if it is not done yet.
    func residualTask(_ txn: borrowing some ReadModelStore & ~Copyable, id: UInt64) throws -> ResidualTaskState? {
        try message(ResidualTaskState.self, txn, outbox, BigEndian.bytes(of: id))
    }

    /// The names of the records whose parent is `parent`.
    func children(_ txn: borrowing some ReadModelStore & ~Copyable, zoneID: UInt64, of parent: String) throws -> [String] {
        let key = ReadModels.recordKey(zoneID: zoneID, parent)
        guard ReadModels.isStorable(key) else { return [] }
        var out: [String] = []
        try key.withUnsafeBytes { k in
            try txn.visitDuplicates(recordChildren, key: k) { out.append(String(decoding: $0, as: UTF8.self)) }
        }
        return out
    }

    /// Parked residual tasks: a walk of `worker_tasks` (tasks that have had an attempt), counted in
    /// place without copying entries.
    func parkedTaskCount(_ txn: borrowing Transaction) throws -> Int {
        try txn.withCursor(workerTasks) { cursor in
            var count = 0
            var entry = try cursor.first()
            while let current = entry {
                if (try? WorkerTaskState(serializedBytes: Array(current.value)))?.parked == true { count += 1 }
                entry = try cursor.next()
            }
            return count
        }
    }

    /// Seconds since the oldest pending residual task was scheduled; 0 when none is pending.
    func oldestTaskAge(_ txn: borrowing Transaction, now: Int64) throws -> Double {
        guard let first = try scan(txn, outbox, prefix: [], limit: 1).first else { return 0 }
        let task = try ResidualTaskState(serializedBytes: first.value)
        return max(0, Double(now - task.scheduledAtMicros) / 1_000_000)
    }

    /// The token of the share that covers a record: the live share of the first record up its
    /// parent chain (from `name`, itself included) that is a share root, else the zone's zone-wide share.
    func coveringShare(_ txn: borrowing some ReadModelStore & ~Copyable, zone: ZoneState, from name: String?) throws -> String? {
        var current = name
        var seen = Set<String>()
        while let next = current, !next.isEmpty, seen.insert(next).inserted {
            guard let link = try recordLink(txn, zoneID: zone.zoneID, next) else { break }
            if !link.shareToken.isEmpty { return link.shareToken }
            current = link.parent
        }
        return zone.zoneShareToken.isEmpty ? nil : zone.zoneShareToken
    }
}

extension ReadModels {
    /// The key suffixes (after `prefix`) of the entries of `db` that follow the suffix `after`, in
    /// key order, at most `limit`.
    func keySuffixes(
        _ txn: borrowing some ReadModelStore & ~Copyable, _ db: Database, prefix: [UInt8], after: [UInt8]?, limit: Int
    ) throws -> [[UInt8]] {
        // The smallest key after `prefix ‖ after` is `prefix ‖ after ‖ 0`.
        let start = prefix + (after.map { $0 + [0] } ?? [])
        guard start.count <= ReadModels.maxKeyBytes else { return [] }
        var out: [[UInt8]] = []
        try start.withUnsafeBytes { from in
            try txn.visit(db, from: from) { key, _ in
                guard out.count < limit, key.count >= prefix.count, key.prefix(prefix.count).elementsEqual(prefix) else { return false }
                out.append(Array(key[prefix.count...]))
                return true
            }
        }
        return out
    }
}

extension ReadModels {
    /// The change tag of the share `token` (read from its stored `ShareState` row without decoding
    /// the rest, in either layout: ``ShareState/storedChangeTag(_:)``), or nil when there is no such share.
    func shareChangeTag(_ txn: borrowing Transaction, token: String) throws -> UInt64? {
        var key = token
        return try key.withUTF8 { bytes in
            try txn.withValue(shares, key: UnsafeRawBufferPointer(bytes)) { ShareState.storedChangeTag($0) } ?? nil
        }
    }
}
