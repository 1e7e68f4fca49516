import EventLog
import Foundation
import LMDB
import SharingDomain
import Synchronization

/// The store and writer glue of a ledger: the log and its read models, and the three ways in — a
/// sharing command's commit step on the log's writer, maintenance work in the writer's transaction,
/// and short reads — each after bringing what is kept of personal data up to the key store.
/// ``ShareLedger`` holds one and forwards to it; the residual-task worker is given one instead of
/// the whole ledger.
package final class LedgerStore: Sendable {
    /// The event log underneath.
    package let log: EventLog
    /// The read models' databases, in the log's environment.
    package let models: ReadModels
    /// ``models`` with the writer's ``RowCache``: for the commit steps of sharing commands only (on
    /// the writer's thread).
    let writerModels: ReadModels
    /// Share change tags known in memory; told about every commit by the log's writer.
    let shareTags: ShareTagTracker
    /// Presented metadata, reused while its share is unchanged (nil when the configuration turns it off).
    let metadataCache: MetadataCache?
    /// Presented user identities, reused while their rows are unchanged.
    let identities = IdentityCache()
    /// Presented participant rows, reused while unchanged, with each share's URL.
    let participantRows = ParticipantRowCache()
    /// The row cache of rehearsed actions (the hot-path benchmarks), apart from the writer's.
    let rehearsalRows: RehearsalRows
    /// Whether the ledger was opened read-only (nothing is submitted to the writer).
    let readOnly: Bool
    /// The ledger's directory (for errors).
    let path: String
    /// The host of the share URLs the ledger presents.
    let shareURLHost: String
    /// How far ``noticeKeyStoreChanges()`` has seen the log's file and the key store.
    private let keyStoreWatch: KeyStoreWatch
    /// Accounts found registered, with the ``ShareTagTracker/generation`` they were found in.
    private let registeredUsers = Mutex<(generation: UInt64, users: Set<RegisteredUser>)>((0, []))
    /// The most accounts ``registeredUsers`` keeps before it starts over.
    static let registeredUsersCapacity = 65_536

    /// An account of a container.
    private struct RegisteredUser: Hashable {
        var container: String
        var user: String
    }

    /// The glue of `log`, opened with the ledger's configuration: its read models (sealing new events or not),
    /// the row cache and tag tracker the log's writer tells about every commit, the metadata cache.
    init(
        log: EventLog, sealsPersonalData: Bool, metadataCacheCapacity capacity: Int, readOnly: Bool, path: String,
        shareURLHost: String
    ) {
        self.log = log
        models = sealsPersonalData ? log.store.models : log.store.models.notSealingNewEvents()
        shareTags = ShareTagTracker(environment: log.store.environment, capacity: max(1, capacity))
        let rows = RowCache()
        writerModels = models.keepingRows(in: rows)
        rehearsalRows = RehearsalRows(models)
        let watch = KeyStoreWatch(
            committed: log.store.environment.lastCommittedOwnTransactionID() ?? 0, generation: models.vault?.generation ?? 0)
        keyStoreWatch = watch
        log.writer.setCommitObserver(
            SharingCommitObserver(tags: shareTags, rows: rows, vault: models.vault, meta: log.store.meta, keyStore: watch))
        metadataCache = capacity > 0 ? MetadataCache(capacity: capacity) : nil
        self.readOnly = readOnly
        self.path = path
        self.shareURLHost = shareURLHost
    }

    /// Runs bookkeeping in the writer's next transaction and returns its result. It may write
    /// anything (the read models are told to forget what they keep in memory); an error it throws
    /// aborts the transaction, and only it fails. With `alone`, in a transaction of its own
    /// (``LogWriter/submit(bytes:alone:_:)``): for work that must see every event committed before it
    /// and that later steps must not write after (a rebuild's last step). With `replicating`, the
    /// work applies another ledger's events and is exempt from the directory's role check.
    package func maintain<Result: Sendable>(
        alone: Bool = false, replicating: Bool = false, _ work: @escaping MaintenanceWork<Result>
    ) async throws(LedgerError) -> Result {
        guard !readOnly else {
            throw LedgerError(.readOnly, "the ledger at \(path) was opened read-only")
        }
        return try await log.writer.submit(bytes: 256, alone: alone, replicating: replicating) { txn, _, scope in
            scope.invalidateEverything()
            let count = try work(txn)
            // Maintenance may move the head (an import writes events): later steps of the batch
            // append after what it wrote.
            try scope.reloadHead(txn)
            return count
        }.get()
    }

    /// Submits `command` to the log's writer and returns its outcome once committed, without the
    /// caller-side checks of ``ShareLedger/submit(_:)`` (the worker completes its tasks even while
    /// cancelled).
    func commit(_ command: DomainCommand) async throws(LedgerError) -> DomainOutcome {
        // Its answers may open boxes: not with keys another process destroyed.
        try noticeKeyStoreChanges()
        do {
            // The rules and projections reach the read models only through `ReadModelStore`, on the
            // writer's transaction.
            return try await log.writer.submit(
                bytes: command.bytes, command.commitStep(models: writerModels))
                .get().get()
        } catch {
            throw log.namingTheFile(error)
        }
    }

    /// Runs `body` in a short read transaction, mapping errors to ``LedgerError``, after
    /// ``noticeKeyStoreChanges()``.
    package func read<R>(_ doing: @autoclosure () -> String, _ body: (borrowing Transaction) throws -> R) throws(LedgerError) -> R {
        try noticeKeyStoreChanges()
        var result: R?
        try log.readWithoutResult(doing()) { txn in result = try body(txn) }
        guard let result else { throw LedgerError(.storageFailure, "a read transaction ended without running its body; report this") }
        return result
    }

    /// Brings what this ledger keeps of personal data up to the key store: when a transaction was
    /// committed in the log's file since the last look by another process or another ledger (a
    /// forget commits one after destroying keys), the key file is read again if it changed, and
    /// when keys went (there, or through another ledger of this process), every kept answer is
    /// dropped. So a forget anywhere is seen by the next read here. The commits of this ledger's own
    /// writer need no look: the keys it destroys are gone from memory before it commits
    /// (``KeyStoreWatch``). Costs two atomic reads and a look at LMDB's meta page when nothing else
    /// happened.
    func noticeKeyStoreChanges() throws(LedgerError) {
        guard let vault = models.vault else { return }
        let committed = log.store.environment.lastCommittedOwnTransactionID() ?? 0
        let seen = keyStoreWatch.seen
        if committed <= seen.committed, vault.generation == seen.generation { return }
        if committed > seen.committed { try vault.reloadIfChanged() }
        let generation = vault.generation
        if generation != seen.generation { dropKeptAnswers() }
        keyStoreWatch.looked(through: committed, generation: generation)
    }

    /// Whether `user` is a registered account of `container`: known in memory once found, else read
    /// (and kept when found). Users are never deleted, so an account found once stays; what is kept
    /// is dropped all the same with every new generation of kept answers (maintenance work, such as
    /// a rebuild's swap, may have written any row), read before the transaction.
    func isRegistered(_ user: String, in container: String) throws(LedgerError) -> Bool {
        let key = RegisteredUser(container: container, user: user)
        let generation = shareTags.generation
        if registeredUsers.withLock({ $0.generation == generation && $0.users.contains(key) }) { return true }
        let models = self.models
        let found = try read("checking the signed-in user") { txn in try models.userExists(txn, container, user) }
        guard found else { return false }
        registeredUsers.withLock { kept in
            if kept.generation != generation {
                // Kept in an older generation (or this lookup's is older): start over in this one.
                guard generation > kept.generation else { return }
                kept = (generation, [])
            }
            if kept.users.count >= LedgerStore.registeredUsersCapacity { kept.users.removeAll(keepingCapacity: true) }
            kept.users.insert(key)
        }
        return true
    }

    /// How many accounts ``isRegistered(_:in:)`` knows in memory (for tests).
    package var registeredUsersKept: Int { registeredUsers.withLock { $0.users.count } }

    /// Kept metadata answers may name a forgotten person: rows changed without any share's tag
    /// changing, so every kept answer is dropped (as after maintenance work: a new generation).
    func dropKeptAnswers() {
        shareTags.committed(0, appended: false, tokens: [], everything: true)
        metadataCache?.removeAll()
        identities.removeAll()
        participantRows.removeAll()
    }

    /// What turns the domain's answers into public values, for this ledger's read models and host.
    var presenter: Presenter {
        Presenter(
            models: models, urlHost: shareURLHost, identities: identities, participantRows: participantRows,
            keyGeneration: models.vault?.generation ?? 0)
    }

    /// A presenter that keeps and reuses nothing: every answer built from the rows alone (for tests
    /// that hold kept answers to fresh ones).
    var presenterKeepingNothing: Presenter { Presenter(models: models, urlHost: shareURLHost) }

    /// ``presenter`` for a read transaction that begins after `generation` was read from
    /// ``shareTags``: it also reuses and keeps participants beside their rows
    /// (``Presenter/answersGeneration``).
    func presenter(answersGeneration generation: UInt64) -> Presenter {
        var presenter = self.presenter
        presenter.answersGeneration = generation
        return presenter
    }
}

/// Bookkeeping the writer runs in its transaction (see ``LedgerStore/maintain(alone:replicating:_:)``).
package typealias MaintenanceWork<Result> = @Sendable (borrowing Transaction) throws -> Result

/// How far ``LedgerStore/noticeKeyStoreChanges()`` has seen: every transaction of the log's own
/// file up to ``seen``'s `committed` was either looked past (the key file read again if it changed)
/// or committed by the ledger's own writer, and the vault's generation of the last look.
///
/// A transaction of the ledger's own writer needs no look: a forget destroys keys through the
/// vault in memory (moving its generation) before its commit. The writer's commit advances what was
/// seen only when its id directly follows it, so no other process's commit (which may be a forget
/// that destroyed keys in the file) lies between. LMDB gives each commit that writes the file the
/// next id, under a writer lock all processes share.
final class KeyStoreWatch: Sendable {
    private let state: Mutex<(committed: UInt64, generation: UInt64)>

    init(committed: UInt64, generation: UInt64) {
        state = Mutex((committed, generation))
    }

    /// What was seen (see the type).
    var seen: (committed: UInt64, generation: UInt64) { state.withLock { $0 } }

    /// The ledger's own writer committed transaction `id` of the log's own file.
    func writerCommitted(_ id: UInt64) {
        state.withLock { seen in
            if id == seen.committed &+ 1 { seen.committed = id }
        }
    }

    /// A look read the key file (if it changed) after the file's last commit was `committed`, and
    /// found the vault at `generation`.
    func looked(through committed: UInt64, generation: UInt64) {
        state.withLock { seen in
            seen.committed = max(seen.committed, committed)
            seen.generation = generation
        }
    }
}
