import ByteKeys
import Synchronization

/// User identities already presented, by account, reused while the account's row and the key
/// store are unchanged (``Presenter/identity(_:_:user:withAddress:)``).
///
/// A share's answer names every participant it shows, and each name is the participant's user row
/// decoded and its sealed fields opened: for a share with many accepted participants, that was most
/// of the cost of answering an accept. An entry holds the exact bytes of the row it was built from
/// and the key store's generation (``PersonalDataVault/generation``, moved on whenever keys go)
/// read before building it; it is used only when the row the caller's transaction reads has the
/// same bytes and the generation has not moved. The identity is a function of the account (the key),
/// its row and the keys that open it, so a kept entry is never stale: a changed row (a forget marks
/// it) or destroyed keys make it a miss, and it is built again. Every entry goes when the ledger
/// drops its kept answers (``LedgerStore/dropKeptAnswers()``).
///
/// Plaintext names in this process's memory only, as the key store's own cache of opened boxes.
/// Bounded: past ``capacity`` entries it starts over.
final class IdentityCache: Sendable {
    /// A kept identity with the row bytes and generation it was built at; a class, so that a
    /// lookup under the lock copies one reference, not the identity's strings.
    final class Entry: Sendable {
        let row: [UInt8]
        let generation: UInt64
        let identity: UserIdentity

        init(row: [UInt8], generation: UInt64, identity: UserIdentity) {
            self.row = row
            self.generation = generation
            self.identity = identity
        }
    }

    /// The account's row key (container and user), then 1 when the identity carries the registered
    /// address as its lookup info, else 0.
    struct Key: Hashable, Sendable {
        var bytes: [UInt8]

        /// The bytes in one call (an array's own hash feeds the hasher one byte at a time).
        func hash(into hasher: inout Hasher) { bytes.withUnsafeBytes { hasher.combine(bytes: $0) } }
    }

    /// One lock per shard of the keys: every caller presenting a share looks up each participant,
    /// and one lock for all of them was contended on two cores.
    private final class Shard: Sendable {
        let entries = Mutex<[Key: Entry]>([:])
    }

    /// Entries kept, in all shards together, before a shard starts over.
    let capacity: Int
    private let shards: [Shard]

    init(capacity: Int = 16_384, shards: Int = 16) {
        self.capacity = capacity
        self.shards = (0..<max(1, shards)).map { _ in Shard() }
    }

    private func shard(_ key: Key) -> Shard {
        var hasher = Hasher()
        key.hash(into: &hasher)
        return shards[Int(UInt(bitPattern: hasher.finalize()) % UInt(shards.count))]
    }

    /// The kept identity for `key`, when it was built from a row with exactly the bytes of `row`
    /// at key store generation `generation`.
    func identity(_ key: Key, row: UnsafeRawBufferPointer, generation: UInt64) -> UserIdentity? {
        guard let entry = shard(key).entries.withLock({ $0[key] }), entry.generation == generation,
            KeyOrder.compare(entry.row, row) == 0
        else { return nil }
        return entry.identity
    }

    /// Keeps `identity`, built from `row` at key store generation `generation`, for `key`.
    func keep(_ key: Key, row: UnsafeRawBufferPointer, generation: UInt64, _ identity: UserIdentity) {
        let entry = Entry(row: Array(row.bindMemory(to: UInt8.self)), generation: generation, identity: identity)
        let limit = max(1, capacity / shards.count)
        shard(key).entries.withLock { entries in
            if entries.count >= limit, entries[key] == nil { entries.removeAll(keepingCapacity: true) }
            entries[key] = entry
        }
    }

    /// The number of kept identities.
    var count: Int { shards.reduce(0) { total, shard in total + shard.entries.withLock { $0.count } } }

    /// Forgets every kept identity.
    func removeAll() { for shard in shards { shard.entries.withLock { $0.removeAll() } } }
}
