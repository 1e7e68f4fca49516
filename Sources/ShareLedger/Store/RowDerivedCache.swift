import Foundation
import ByteKeys
import Synchronization

/// What an answer derives from a read-model row (a user's identity, a participant's row decoded
/// with its address opened), kept by the row's key and reused while the row the caller's
/// transaction reads has the same bytes and the key store's generation has not moved.
///
/// A share's answer shows its participants, each a participant row decoded, its sealed address
/// opened and its user's row decoded and opened; for a share with many participants that was most
/// of the cost of answering an accept, and the next answer about the same share decoded them all
/// again. An entry holds the exact bytes of the row it was derived from and the key store's
/// generation (``PersonalDataVault/generation``, moved on whenever keys go) read before deriving it.
/// What it holds is a function of the key, the row and the keys that open it, so a kept entry is
/// never stale: a changed row, or destroyed keys, make it a miss, and it is derived again. Every
/// entry goes when the ledger drops its kept answers (``LedgerStore/dropKeptAnswers()``).
///
/// Plaintext names and addresses in this process's memory only, as the key store's own cache of
/// opened boxes. Bounded: past ``capacity`` entries (spread over the shards) a shard starts over.
final class RowDerivedCache<Value: Sendable>: Sendable {
    /// A kept value with the row bytes and generation it was derived at; a class, so that a
    /// lookup under the lock copies one reference, not the value's strings.
    final class Entry: Sendable {
        let row: [UInt8]
        let generation: UInt64
        let value: Value

        init(row: [UInt8], generation: UInt64, value: Value) {
            self.row = row
            self.generation = generation
            self.value = value
        }
    }

    /// The row's key, with whatever else the value depends on appended.
    struct Key: Hashable, Sendable {
        var bytes: [UInt8]

        /// The bytes in one call (an array's own hash feeds the hasher one byte at a time).
        func hash(into hasher: inout Hasher) { bytes.withUnsafeBytes { hasher.combine(bytes: $0) } }
    }

    /// One lock per shard of the keys: every caller presenting a share looks up each participant,
    /// and one lock for all of them was contended on two cores.
    private let entries: ShardedEntries<Key, Entry>

    /// Entries kept, in all shards together, before a shard starts over.
    var capacity: Int { entries.capacity }

    init(capacity: Int = 16_384, shards: Int = 16) {
        entries = ShardedEntries(capacity: capacity, shards: shards)
    }

    /// The shard of `key`, from its last eight bytes: a key ends with what tells rows of one table
    /// apart (a participant id, a user name, a flag after it), and the dictionary hashes the whole
    /// key again anyway.
    private func shard(_ key: Key) -> UInt64 { ShardedEntries<Key, Entry>.spread(key.bytes.suffix(8)) }

    /// The kept value for `key`, when it was derived from a row with exactly the bytes of `row` at
    /// key store generation `generation`.
    func value(_ key: Key, row: UnsafeRawBufferPointer, generation: UInt64) -> Value? {
        guard let entry = entries.entry(key, shard: shard(key)), entry.generation == generation,
            KeyOrder.compare(entry.row, row) == 0
        else { return nil }
        return entry.value
    }

    /// Keeps `value`, derived from `row` at key store generation `generation`, for `key`.
    func keep(_ key: Key, row: UnsafeRawBufferPointer, generation: UInt64, _ value: Value) {
        entries.keep(key, shard: shard(key), Entry(row: Array(row.bindMemory(to: UInt8.self)), generation: generation, value: value))
    }

    /// The number of kept values.
    var count: Int { entries.count }

    /// Forgets every kept value.
    func removeAll() { entries.removeAll() }
}

/// Entries kept by key, in shards with a lock each; past `capacity` entries (spread over the
/// shards) a shard starts over (cheaper than tracking recency; a miss only costs presenting again).
/// The caller picks the shard from a few bytes of the key (``spread(_:)``).
final class ShardedEntries<Key: Hashable & Sendable, Entry: Sendable>: Sendable {
    private final class Shard: Sendable {
        let entries = Mutex<[Key: Entry]>([:])
    }

    let capacity: Int
    private let shards: [Shard]

    init(capacity: Int, shards: Int) {
        self.capacity = capacity
        self.shards = (0..<max(1, shards)).map { _ in Shard() }
    }

    /// FNV-1a of `bytes`: which shard a key goes to, from the bytes of it that differ most.
    static func spread(_ bytes: some Sequence<UInt8>) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return hash
    }

    private func shard(_ spread: UInt64) -> Shard { shards[Int(spread % UInt64(shards.count))] }

    /// The entry of `key`, in the shard `spread` picks.
    func entry(_ key: Key, shard spread: UInt64) -> Entry? { shard(spread).entries.withLock { $0[key] } }

    /// Keeps `entry` for `key`, in the shard `spread` picks.
    func keep(_ key: Key, shard spread: UInt64, _ entry: Entry) {
        let limit = max(1, capacity / shards.count)
        shard(spread).entries.withLock { entries in
            if entries.count >= limit, entries[key] == nil { entries.removeAll(keepingCapacity: true) }
            entries[key] = entry
        }
    }

    /// The number of kept entries.
    var count: Int { shards.reduce(0) { total, shard in total + shard.entries.withLock { $0.count } } }

    /// Forgets every kept entry.
    func removeAll() { for shard in shards { shard.entries.withLock { $0.removeAll() } } }
}

/// User identities already presented, by the user row's key and whether the identity carries the
/// registered address (``Presenter/identity(_:_:user:withAddress:)``).
typealias IdentityCache = RowDerivedCache<UserIdentity>

/// A participant row as an answer shows it: decoded, with its address opened (erased once its key
/// is gone), by the row's key (``Presenter/share(_:token:state:viewer:)``). A class: an answer
/// passes each row around several times, and a copy of the decoded row was a copy of every field
/// (under callgrind, about 400 instructions through the runtime's generic tuple copy); a reference
/// is one retain.
final class PresentedParticipantRow: Sendable {
    /// The share's container, whose keys opened the address.
    let container: String
    let state: ParticipantState
    let lookupInfo: LookupInfo?
    let erased: Bool
    /// The participant as answers show it (``Presenter/participant(_:_:id:_:)``), with the
    /// generation of kept answers (``ShareTagTracker/generation``) it was built in; nil when it was
    /// not kept. Beyond the row and the keys, a participant shows its user's identity, from the
    /// user's row; that row is written once, at registration (a row that names a user whose account
    /// was not found keeps no participant), and rewritten only when the user is forgotten, which
    /// destroys keys (moving the key store's generation, which the row's entry is checked against)
    /// and drops every kept answer (moving the generation of kept answers); maintenance work (a
    /// rebuild's swap, a replica's applied events) moves the latter too.
    let participant: (value: Share.Participant, answersGeneration: UInt64)?

    init(
        container: String, state: ParticipantState, lookupInfo: LookupInfo?, erased: Bool,
        participant: (value: Share.Participant, answersGeneration: UInt64)? = nil
    ) {
        self.container = container
        self.state = state
        self.lookupInfo = lookupInfo
        self.erased = erased
        self.participant = participant
    }

    /// This row with `participant` kept beside it.
    func keeping(_ participant: Share.Participant, answersGeneration: UInt64) -> PresentedParticipantRow {
        PresentedParticipantRow(
            container: container, state: state, lookupInfo: lookupInfo, erased: erased,
            participant: (participant, answersGeneration))
    }

    /// The kept participant, when it was built in generation `answersGeneration` of kept answers.
    func participant(answersGeneration: UInt64?) -> Share.Participant? {
        guard keepsParticipant(answersGeneration: answersGeneration) else { return nil }
        return participant?.value
    }

    /// Whether a participant built in generation `answersGeneration` of kept answers is kept (asked
    /// without copying it: a participant is a large value of resilient Foundation types).
    func keepsParticipant(answersGeneration: UInt64?) -> Bool {
        guard let answersGeneration, let kept = participant?.answersGeneration else { return false }
        return kept == answersGeneration
    }
}

/// The participant rows of shares as answers presented them, by the share's token, each with the
/// exact bytes it was presented from (``Presenter/share(_:token:state:viewer:)``).
///
/// An answer about a share walks all of its participant rows, in key order. Kept per share as the
/// walk saw them, the next walk reuses each row whose id and bytes are the ones kept, by comparing
/// them in step with the rows it reads: no key is built, hashed or looked up per row, and no id
/// string made again. A share of 90 participants did that 90 times for every accept's answer, and
/// an accept changes one row. The key store's generation is checked for the share's rows as a
/// whole (``PresentedParticipantRow``'s opened addresses depend on it). Entries are never changed
/// once made; a new walk keeps a new one. Bounded: past ``capacity`` shares (spread over the
/// shards) a shard starts over. Every entry goes when the ledger drops its kept answers.
final class ParticipantRowCache: Sendable {
    /// One participant row as presented: its id, the bytes it was presented from, and what they
    /// presented. A class: a walk and an answer pass each row on several times.
    final class Row: Sendable {
        let id: String
        let idBytes: [UInt8]
        let bytes: [UInt8]
        let presented: PresentedParticipantRow

        init(id: String, idBytes: [UInt8], bytes: [UInt8], presented: PresentedParticipantRow) {
            self.id = id
            self.idBytes = idBytes
            self.bytes = bytes
            self.presented = presented
        }
    }

    /// A share's URL as an answer made it, with the title it holds: making one parses its text into
    /// a `URL`, thousands of instructions, and every answer about a share shows its URL.
    typealias KeptURL = (title: String, url: URL)

    /// A share's rows as one walk presented them, in key order, at a key store generation, with the
    /// share's URL once an answer made it (a URL holds the title, sealed at rest like the addresses
    /// the rows open: it goes with them).
    final class Entry: Sendable {
        let generation: UInt64
        let rows: [Row]
        let url: KeptURL?

        init(generation: UInt64, rows: [Row], url: KeptURL?) {
            self.generation = generation
            self.rows = rows
            self.url = url
        }
    }

    private let entries: ShardedEntries<String, Entry>

    /// Shares kept, in all shards together, before a shard starts over.
    var capacity: Int { entries.capacity }

    init(capacity: Int = 4_096, shards: Int = 16) {
        entries = ShardedEntries(capacity: capacity, shards: shards)
    }

    /// The shard of `token`, from its last bytes (tokens are random).
    private func shard(_ token: String) -> UInt64 { ShardedEntries<String, Entry>.spread(token.utf8.suffix(4)) }

    /// The rows of share `token` as the last walk presented them, and its URL, when they were kept at
    /// key store generation `generation`; nil otherwise.
    func entry(of token: String, generation: UInt64) -> Entry? {
        guard let entry = entries.entry(token, shard: shard(token)), entry.generation == generation else { return nil }
        return entry
    }

    /// Keeps `rows` and `url` as share `token`'s, presented at key store generation `generation`.
    func keep(_ token: String, generation: UInt64, _ rows: [Row], url: KeptURL?) {
        entries.keep(token, shard: shard(token), Entry(generation: generation, rows: rows, url: url))
    }

    /// The number of shares kept.
    var count: Int { entries.count }

    /// Forgets every kept share.
    func removeAll() { entries.removeAll() }
}

