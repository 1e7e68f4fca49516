import ByteKeys
import EventLog
import Foundation
import SwiftProtobuf

/// Typed reads of the read models, shared by the decider (inside the writer's transaction) and the
/// query API (inside short read transactions).
extension ReadModels {
    package func user(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, _ name: String) throws -> UserState? {
        try message(UserState.self, txn, users, ReadModels.userKey(container, name))
    }

    /// Whether `name` is a registered user of `container` (forgotten ones included), without
    /// decoding the row: most decisions check only that the caller or a named user exists, and a
    /// replay has no row cache to answer that from (decoding the row was 6 % of a rebuild's samples).
    package func userExists(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, _ name: String) throws -> Bool {
        // The key of ``userKey(_:_:)``: in the row cache's buffer, or on the stack for the store.
        let count = container.utf8.count + 1 + name.utf8.count
        guard count <= ReadModels.maxKeyBytes else { return false }
        if let rowCache, let known = rowCache.knows(users, container, name) { return known }
        return try ReadModels.withKey(count: count) { key in
            key.append(container)
            key.append(0)
            key.append(name)
        } _: { key in
            try txn.withValue(users, key: key) { _ in true }
        } ?? false
    }

    package func zone(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, owner: String, zone: String) throws -> ZoneState? {
        try message(ZoneState.self, txn, zones, ReadModels.zoneKey(container, owner: owner, zone: zone))
    }

    package func record(_ txn: borrowing some ReadModelStore & ~Copyable, zoneID: UInt64, _ name: String) throws -> RecordState? {
        try message(RecordState.self, txn, records, ReadModels.recordKey(zoneID: zoneID, name))
    }

    /// A record's parent and the token of the live share rooted at it (empty when none), read from
    /// its stored bytes without decoding its fields: for walks up and down a hierarchy, which need
    /// nothing else of each record they pass.
    package func recordLink(_ txn: borrowing some ReadModelStore & ~Copyable, zoneID: UInt64, _ name: String) throws
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

    /// The zone id of share `token` (nil when there is no such share), read from its stored row
    /// without decoding the rest where its layout allows: for walks over a user's participations,
    /// which need nothing else of most shares they pass.
    package func shareZoneID(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String) throws -> UInt64? {
        let key = Array(token.utf8)
        guard ReadModels.isStorable(key) else { return nil }
        let stored = try key.withUnsafeBytes { k in
            try txn.withValue(shares, key: k) { raw -> UInt64? in ShareState.storedZoneID(raw) }
        }
        switch stored {
        case .none: return nil  // no row
        case .some(.some(let zoneID)): return zoneID
        case .some(.none): return try share(txn, token)?.zoneID  // an earlier release's layout
        }
    }

    package func share(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String) throws -> ShareState? {
        try message(ShareState.self, txn, shares, text: token)
    }

    package func participant(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String, _ participantID: String) throws -> ParticipantState? {
        try message(ParticipantState.self, txn, participants, ReadModels.participantKey(token, participantID))
    }

    /// Every participant of a share (removed ones included), by participant id.
    package func participants(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String) throws -> [(id: String, state: ParticipantState)] {
        var out: [(id: String, state: ParticipantState)] = []
        try visitParticipants(txn, token) { id, state in
            out.append((id(), state))
            return true
        }
        return out
    }

    /// The first participant of share `token` (removed ones included, by participant id) for which
    /// `test` holds, stopping at the match; `test` must hold only for a row naming an invitation
    /// address (a keyed hash, or a plaintext email address or phone number, not forgotten), as
    /// ``AddressMatch/matches(_:)`` does: the rows that name none are passed over without being
    /// decoded (``ParticipantState/storedMayNameAddress(_:)``).
    package func firstParticipant(
        _ txn: borrowing some ReadModelStore & ~Copyable, _ token: String, namingAnAddress test: (ParticipantState) -> Bool
    ) throws -> (id: String, state: ParticipantState)? {
        var found: (id: String, state: ParticipantState)?
        try visitParticipants(txn, token, passingOver: { !ParticipantState.storedMayNameAddress($0) }) { id, state in
            guard test(state) else { return true }
            found = (id(), state)
            return false
        }
        return found
    }

    /// Visits the participants of share `token` in participant-id order while `body` returns true:
    /// each row from the row cache, or decoded (and kept), with its id made on demand; a row whose
    /// stored bytes `passingOver` accepts is not visited.
    private func visitParticipants(
        _ txn: borrowing some ReadModelStore & ~Copyable, _ token: String,
        passingOver: (UnsafeRawBufferPointer) -> Bool = { _ in false },
        _ body: (_ id: () -> String, _ state: ParticipantState) throws -> Bool
    ) throws {
        let prefix = Array(token.utf8)
        try visit(txn, participants, prefix: prefix) { key, value in
            if passingOver(value) { return true }
            let rowKey = Array(key)
            let state: ParticipantState
            if let rowCache, case .some(.some(let kept)) = rowCache.row(ParticipantState.self, participants, rowKey) {
                state = kept
            } else {
                state = try ParticipantState.decodeStored(value, database: participants.name)
                rowCache?.keep(participants, rowKey, row: state)
            }
            return try body({ String(decoding: key[prefix.count...], as: UTF8.self) }, state)
        }
    }

    /// The participant id `user` has (or had) in share `token`.
    package func participantID(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, user: String, token: String) throws -> String? {
        // The key of ``key(_:_:_:)``, built on the stack.
        try ReadModels.withKey(count: container.utf8.count + user.utf8.count + token.utf8.count + 2) { key in
            key.append(container)
            key.append(0)
            key.append(user)
            key.append(0)
            key.append(token)
        } _: { key in
            try txn.withValue(sharesByUser, key: key) { String(decoding: $0, as: UTF8.self) }
        }
    }

    /// The user's participant entry in the share, if any (any status). The owner's is the share's
    /// owner participant (no event gives the owner another), taken without the user index when its
    /// row says it is the owner's; otherwise (a row that does not, in a log written elsewhere) the
    /// index decides, as for anyone else.
    package func participant(_ txn: borrowing some ReadModelStore & ~Copyable, of user: String, in share: ShareState, token: String) throws
        -> (id: String, state: ParticipantState)?
    {
        if user == share.ownerName, !share.ownerParticipantID.isEmpty,
            let state = try participant(txn, token, share.ownerParticipantID), state.role == .owner, state.userRecordName == user
        {
            return (share.ownerParticipantID, state)
        }
        guard let id = try participantID(txn, share.container, user: user, token: token),
            let state = try participant(txn, token, id)
        else { return nil }
        return (id, state)
    }

    /// The user registered with `email`: by its keyed hash (users registered since crypto-shredding),
    /// else by the plaintext key of users registered before it.
    package func userName(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, email: String) throws -> String? {
        if let hashed = hashedLookupKey(container, email: email), let name = try string(txn, userLookup, hashed) { return name }
        return try string(txn, userLookup, ReadModels.lookupKey(container, email: email))
    }

    /// The user registered with `phone` (as ``userName(_:_:email:)``).
    package func userName(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, phone: String) throws -> String? {
        if let hashed = hashedLookupKey(container, phone: phone), let name = try string(txn, userLookup, hashed) { return name }
        return try string(txn, userLookup, ReadModels.lookupKey(container, phone: phone))
    }

    /// container ‖ 0 ‖ `E` ‖ HMAC of the normalized email: the lookup key of a user registered with
    /// sealed personal data. Nil without a key store.
    package func hashedLookupKey(_ container: String, email: String) -> [UInt8]? {
        lookupHash(container, email: email).map { ReadModels.lookupKey(container, hash: $0, kind: "E") }
    }

    /// container ‖ 0 ‖ `P` ‖ HMAC of the normalized phone (as ``hashedLookupKey(_:email:)``).
    package func hashedLookupKey(_ container: String, phone: String) -> [UInt8]? {
        lookupHash(container, phone: phone).map { ReadModels.lookupKey(container, hash: $0, kind: "P") }
    }

    /// The keyed hash of `email` (normalized) under the key store's lookup key; nil without one.
    package func lookupHash(_ container: String, email: String) -> [UInt8]? {
        personalData?.lookupHash("e", container: container, normalized: ReadModels.normalizeEmail(email))
    }

    /// The keyed hash of `phone` (normalized); nil without a key store.
    package func lookupHash(_ container: String, phone: String) -> [UInt8]? {
        personalData?.lookupHash("p", container: container, normalized: ReadModels.normalizePhone(phone))
    }

    /// The tokens of the live shares `owner` owns in `container`.
    package func shareTokens(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, owner: String) throws -> [String] {
        try scan(txn, sharesByOwner, prefix: ReadModels.key(container, owner) + [0]).map {
            String(decoding: $0.suffix, as: UTF8.self)
        }
    }

    /// (token, participant id) of every share `user` is or was a participant of in `container`.
    package func participations(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, user: String) throws
        -> [(token: String, participantID: String)]
    {
        try scan(txn, sharesByUser, prefix: ReadModels.key(container, user) + [0]).map {
            (String(decoding: $0.suffix, as: UTF8.self), String(decoding: $0.value, as: UTF8.self))
        }
    }

    /// The entry of `user` of the given kind in share `token` (a pending access request, or a block).
    package func hasAccessEntry(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String, _ kind: AccessKind, user: String) throws
        -> Bool
    {
        // The key of ``accessKey(_:_:user:)``, built on the stack.
        try ReadModels.withKey(count: token.utf8.count + 1 + user.utf8.count) { key in
            key.append(token)
            key.append(kind.rawValue)
            key.append(user)
        } _: { key in
            try txn.withValue(access, key: key) { _ in true }
        } ?? false
    }

    /// The pending access requests and the blocked identities of share `token`, each by user record
    /// name, in name order: one scan of the share's entries (a share token has a fixed length, so no
    /// other share's key starts with this one's).
    package func accessEntries(_ txn: borrowing some ReadModelStore & ~Copyable, _ token: String) throws
        -> (requests: [(user: String, state: AccessEntryState)], blocked: [(user: String, state: AccessEntryState)])
    {
        var requests: [(user: String, state: AccessEntryState)] = []
        var blocked: [(user: String, state: AccessEntryState)] = []
        let prefixCount = token.utf8.count
        try visit(txn, access, prefix: Array(token.utf8)) { key, value in
            guard key.count > prefixCount, let kind = AccessKind(rawValue: key[prefixCount]) else { return true }
            let entry = (
                user: String(decoding: UnsafeRawBufferPointer(rebasing: key[(prefixCount + 1)...]), as: UTF8.self),
                state: try AccessEntryState.decodeStored(value, database: access.name)
            )
            switch kind {
            case .request: requests.append(entry)
            case .blocked: blocked.append(entry)
            }
            return true
        }
        return (requests, blocked)
    }

    /// The share token and participant id of a one-time URL token whose participant is in the share
    /// (unused, or accepted through it).
    package func oneTimeURL(_ txn: borrowing some ReadModelStore & ~Copyable, _ oneTimeToken: String) throws
        -> (token: String, participantID: String)?
    {
        guard ShareToken(oneTimeToken) != nil, let value = try string(txn, oneTimeURLs, text: oneTimeToken),
            value.utf8.count > ShareToken.length
        else { return nil }
        let split = value.utf8.index(value.utf8.startIndex, offsetBy: ShareToken.length)
        return (String(value[..<split]), String(value[split...]))
    }

    /// The residual task `id` of the outbox, if it is not done yet.
    package func residualTask(_ txn: borrowing some ReadModelStore & ~Copyable, id: UInt64) throws -> ResidualTaskState? {
        try message(ResidualTaskState.self, txn, outbox, BigEndian.bytes(of: id))
    }

    /// The names of the records whose parent is `parent`.
    package func children(_ txn: borrowing some ReadModelStore & ~Copyable, zoneID: UInt64, of parent: String) throws -> [String] {
        let key = ReadModels.recordKey(zoneID: zoneID, parent)
        guard ReadModels.isStorable(key) else { return [] }
        var out: [String] = []
        try key.withUnsafeBytes { k in
            try txn.visitDuplicates(recordChildren, key: k) { out.append(String(decoding: $0, as: UTF8.self)) }
        }
        return out
    }

    /// The token of the share that covers a record: the live share of the first record up its
    /// parent chain (from `name`, itself included) that is a share root, else the zone's zone-wide share.
    package func coveringShare(_ txn: borrowing some ReadModelStore & ~Copyable, zone: ZoneState, from name: String?) throws -> String? {
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
    package func keySuffixes(
        _ txn: borrowing some ReadModelStore & ~Copyable, _ db: ReadModelTable, prefix: [UInt8], after: [UInt8]?, limit: Int
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
