import EventLog
import Foundation
import LMDB
import SharingDomain
import Synchronization

/// Share metadata already presented to a viewer, reused while the share is unchanged
/// (``Container/shareMetadataWithoutLogging(for:)``).
///
/// The validator is the share's change tag, read from its row in the same read transaction as the
/// answer. Every event that changes a share or one of its participants (a participant added,
/// changed, removed, verified or accepted, a title or public-permission change) adds 1 to it, a
/// deleted share has no row, and a new share's tag starts at the position of its `ShareCreated`
/// event, above every tag an earlier share at the same URL reached (each of its changes was an
/// event before that position). So a tag never repeats for a URL, and an entry is used only when
/// the read models it was built from are, for this share, the ones the transaction sees. What else
/// goes into the metadata cannot change under a fixed tag: user records are written once, at
/// registration; the share URL's host is fixed per open ledger.
final class MetadataCache: @unchecked Sendable {
    // @unchecked: `entries` is only touched under `lock`; the values are immutable `Sendable` structs.
    private let lock = NSLock()
    private var entries: [Key: Entry] = [:]
    let capacity: Int

    struct Key: Hashable, Sendable {
        var token: String
        var container: String
        var viewer: String
    }

    struct Entry: Sendable {
        /// The share's change tag when the metadata was built.
        var validator: UInt64
        /// ``ShareTagTracker/generation`` before the metadata was read.
        var generation: UInt64 = 0
        var metadata: Share.Metadata
    }

    init(capacity: Int) { self.capacity = capacity }

    func entry(_ key: Key) -> Entry? { lock.withLock { entries[key] } }

    func store(_ key: Key, _ entry: Entry) {
        lock.withLock {
            // Bounded: when full, start over (cheaper than tracking recency; a miss only costs a rebuild).
            if entries.count >= capacity, entries[key] == nil { entries.removeAll(keepingCapacity: true) }
            entries[key] = entry
        }
    }

    var count: Int { lock.withLock { entries.count } }

    /// Forgets every kept answer.
    func removeAll() { lock.withLock { entries.removeAll() } }
}

/// Share change tags kept in memory, so that a kept metadata answer can be validated without a read
/// transaction or a B-tree lookup (``Container/shareMetadataWithoutLogging(for:)``).
///
/// A tag is only ever given out while no transaction has been committed since the last one this
/// process's writer committed (checked against LMDB's last committed transaction id, which covers
/// other processes and any other writer): then the tags known are exactly what the read models say.
///
/// - Readers add a tag they read from the share's row, and only when their read transaction saw the
///   snapshot of that last commit (an older snapshot may hold an older tag).
/// - The writer, after each commit and before it answers the commit's callers, forgets the tags of
///   every share its events were about (a superset of the shares whose row changed). After a commit
///   that holds maintenance work (an import, a rebuild, worker bookkeeping), or when transactions
///   were committed by anyone else since its previous commit, it forgets every tag.
///
/// Between a commit and the writer's call, the last committed id is ahead of the writer's, so every
/// reader takes the read-transaction path: a tag given out is never older than a commit a caller was
/// told about.
///
/// Lock order: `lock` is never held while the environment's resize lock is requested (LMDB's last
/// committed id is read before taking it), because ``remember(_:tag:snapshot:)`` runs inside a read
/// transaction, which holds the resize lock shared; asking for it again there, or waiting for it under
/// `lock`, would deadlock against a map resize or `close()` waiting for the exclusive side.
final class ShareTagTracker: @unchecked Sendable {
    // @unchecked: `state` is only touched under `lock`. An NSLock (a pthread mutex), not a `Mutex`:
    // ThreadSanitizer sees a pthread mutex's ordering, but not that of a contended `Mutex` on Linux
    // (its futex wait is in the uninstrumented runtime), so `scripts/tsan` would report false races.
    private struct State {
        /// The id of the last transaction this process's writer committed (at first: the last one
        /// committed before the ledger was opened).
        var lastCommitted: UInt64
        var tags: [String: UInt64] = [:]
        /// Moved on by every commit that held maintenance work: the rebuild's swap can repair rows
        /// without changing their tags, so an answer kept from before it must not be used after it.
        var generation: UInt64 = 0
    }

    private let lock = NSLock()
    @exclusivity(unchecked) private var state: State  // (no access overlaps another: see `lock`)
    private let environment: Environment
    private let capacity: Int
    /// Tags given out (for tests: kept answers validated without a read transaction).
    let hits = Atomic<Int>(0)

    init(environment: Environment, capacity: Int) {
        self.environment = environment
        self.capacity = max(1, capacity)
        state = State(lastCommitted: environment.lastCommittedTransactionID() ?? 0)
    }

    /// The change tag of `token`'s share when it is known to be current; nil when the caller must
    /// read it.
    /// Call it outside any transaction. Also returns the current ``generation``.
    func currentTag(_ token: String) -> (tag: UInt64, generation: UInt64)? {
        // Read first, then compare under the lock: a commit after this read is newer than this call.
        guard let committed = environment.lastCommittedTransactionID() else { return nil }
        let found = lock.withLock { () -> (tag: UInt64, generation: UInt64)? in
            guard let tag = state.tags[token], committed == state.lastCommitted else { return nil }
            return (tag, state.generation)
        }
        if found != nil { hits.add(1, ordering: .relaxed) }
        return found
    }

    /// The generation kept answers must have been built in (see `State.generation`).
    var generation: UInt64 { lock.withLock { state.generation } }

    /// Keeps `tag`, read from `token`'s row in a read transaction that saw the snapshot of
    /// transaction `snapshot`, when that is the writer's last commit. (Commits after it are covered:
    /// this writer's forget the tags they change, and anyone else's fail ``currentTag(_:)``'s check
    /// until this writer's next commit forgets every tag.) Called inside the read transaction: it
    /// must not touch the environment.
    func remember(_ token: String, tag: UInt64, snapshot: UInt64) {
        lock.withLock {
            guard snapshot == state.lastCommitted else { return }
            // Bounded: when full, start over (a missing tag only costs a read transaction).
            if state.tags.count >= capacity, state.tags[token] == nil { state.tags.removeAll(keepingCapacity: true) }
            state.tags[token] = tag
        }
    }

    /// The writer's transaction `id` committed. `appended`: it appended events (so it was a real
    /// commit, with that id), which were about the shares `tokens`. `everything`: it held work whose
    /// effect on shares is not known (and which may have written nothing, in which case LMDB commits
    /// no transaction and `id` is not used).
    func committed(_ id: UInt64, appended: Bool, tokens: [String], everything: Bool) {
        // Read before taking the lock (see the lock order above); a commit by someone else after
        // this read only makes the ids differ, which sends readers to their transactions.
        let now = everything ? environment.lastCommittedTransactionID() ?? 0 : 0
        lock.withLock {
            if everything {
                // Forget every tag and start from what was committed then: a tag is only ever added
                // from a snapshot of exactly that transaction, so it is right whoever wrote it.
                state.tags.removeAll(keepingCapacity: true)
                state.generation &+= 1
                state.lastCommitted = now
                return
            }
            // Nothing written: LMDB committed no transaction.
            guard appended else { return }
            if id != state.lastCommitted &+ 1 {
                // Someone else committed since this writer's last commit: any tag may be old.
                state.tags.removeAll(keepingCapacity: true)
            } else {
                for token in tokens { state.tags.removeValue(forKey: token) }
            }
            state.lastCommitted = id
        }
    }

    /// How many tags are kept (for tests).
    var count: Int { lock.withLock { state.tags.count } }
}

extension ShareTagTracker: CommitObserver {
    /// The log's writer committed: the keys its steps invalidated are share tokens.
    func committed(_ notice: CommitNotice) {
        committed(
            notice.transactionID, appended: notice.appended, tokens: notice.invalidatedKeys,
            everything: notice.invalidatedEverything)
    }
}

/// The serial the key store's record in the log's `meta` was last seen to hold
/// (``SharingCommitObserver/willCommit(_:)``). Read and written by the log's writer thread only; an
/// atomic so that the observer, a value, can share it.
final class RecordedWitnessSerial: Sendable {
    let value = Atomic<UInt64>(0)
}

/// What the sharing layer keeps in memory about commits, told about each by the log's writer (on its
/// thread, after the commit, before any caller resumes): the share tags of the metadata cache, and
/// the writer's decoded rows.
struct SharingCommitObserver: CommitObserver {
    let tags: ShareTagTracker
    let rows: RowCache
    /// Keys made during the transaction are synced once, before it commits.
    let vault: PersonalDataVault?
    /// The log's `meta`, where the commit records how many keys its events need.
    let meta: Database
    /// Told of each commit that wrote the log's file, so readers skip looking at the key store for it.
    let keyStore: KeyStoreWatch
    /// A serial the record in `meta` was seen to hold in a committed state (0: none seen yet).
    let recordedAtLeast = RecordedWitnessSerial()

    func willCommit() throws {
        try vault?.syncIfDirty()
    }

    /// Syncs the keys made during the transaction, then records in `meta` the key store's serial
    /// when it moved past the one recorded: a key store later cut back past a key committed events
    /// use is then told from a record torn by a crash (``PersonalDataVault/Witness``). (Compared with
    /// what the transaction reads, not with what an earlier attempt wrote: an attempt the environment
    /// retries starts over.) Nothing is recorded while the store holds no person's key.
    ///
    /// The recorded serial never goes down (every writer of the record writes at least the serial it
    /// read), so a serial read from it is a lower bound for every later transaction: while the key
    /// store's serial is not above the last one read, nothing is read. Only serials read are
    /// remembered, never one this transaction writes (its commit may still fail); a read in this
    /// transaction, before its own write, sees a committed record.
    func willCommit(_ txn: borrowing Transaction) throws {
        guard let vault, vault.writable, let serial = try vault.syncIfDirty() else { return }
        guard serial > recordedAtLeast.value.load(ordering: .relaxed) else { return }
        let recorded = try txn.get(meta, key: PersonalDataVault.Witness.metaKey).flatMap(PersonalDataVault.Witness.init)
        if let recorded { recordedAtLeast.value.store(recorded.serial, ordering: .relaxed) }
        guard serial > recorded?.serial ?? 0 else { return }
        try txn.put(
            meta, key: PersonalDataVault.Witness.metaKey,
            value: PersonalDataVault.Witness(serial: serial, destroyed: recorded?.destroyed ?? 0).bytes)
    }

    func committed(_ notice: CommitNotice) {
        rows.committed(notice)
        tags.committed(notice)
        if let own = notice.ownTransactionID { keyStore.writerCommitted(own) }
    }
}
