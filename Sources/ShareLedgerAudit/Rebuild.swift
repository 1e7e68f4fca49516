import EventLog
import Foundation
import LMDB
import Logging
import ShareLedger
import SharingDomain
import Synchronization

extension LedgerAudit {
    /// Rebuilds every read model, and the stream and command records, from the log: the log is
    /// replayed into a scratch environment next to the ledger (`.rebuild-*`, in chunks, no fsync).
    /// Then, on the writer thread, the events committed meanwhile are replayed into the scratch copy
    /// and the live read models are made equal to it:
    /// - When they differ in a few entries (up to about 8,000 in all), in place, in one transaction.
    /// - Otherwise, the second copy each read model has (its twin, `derived/`) is filled from the
    ///   scratch copy in transactions of about 8 MiB each while writes go on; one last transaction
    ///   replays the events committed meanwhile, makes the second copy equal, and switches it in
    ///   (one key). So the memory of a rebuild stays bounded however large the read models are.
    ///   (A ledger that keeps its read models with the log, not in `derived/`, has no second copy:
    ///   those read models are cleared and copied whole in the one transaction.)
    /// In either last transaction the stream and command records are made equal to the scratch
    /// copy's, which the replay derives from the log as the writer does: damaged, missing or extra
    /// records are repaired.
    ///
    /// A crash or an error before the last transaction commits leaves the old read models (a
    /// partly filled second copy is not in use, and is emptied by the next rebuild), a finished
    /// rebuild the new ones, never a mix. Readers never wait; other writes wait only for each of
    /// those transactions. Returns the events replayed.
    ///
    /// Each sharing event is checked against the rules (`EventValidator`) as it is replayed: at
    /// the first the rules could not have produced, the rebuild stops with
    /// `LedgerError.Code.corruptedData` naming it, and the read models stay as they were.
    @discardableResult
    public func rebuildReadModels(progress: (@Sendable (UInt64, UInt64) -> Void)? = nil) async throws(LedgerError) -> UInt64 {
        try await rebuildReadModels(rewritingEverything: false, progress: progress).events
    }

    /// What a rebuild did: the events it replayed and what its last transaction wrote.
    package struct RebuildOutcome: Sendable, Hashable {
        /// Events replayed.
        package var events: UInt64
        /// Entries put or deleted in read models changed in place.
        package var changedEntries: Int
        /// Read models cleared and rewritten whole (in their unused copies when `switchedCopies`).
        package var rewrittenDatabases: [String]
        /// Whether the read models were rewritten into their unused copies (twins) in bounded
        /// transactions and switched in, rather than changed in place.
        package var switchedCopies = false
    }

    /// ``rebuildReadModels(progress:)``, reporting what it wrote; with `rewritingEverything`, every
    /// read model is rewritten whole even where nothing differs (the costliest case, which `bench`
    /// measures beside the usual one): into the second copies, switched in, when there are.
    package func rebuildReadModels(
        rewritingEverything: Bool, progress: (@Sendable (UInt64, UInt64) -> Void)? = nil
    ) async throws(LedgerError) -> RebuildOutcome {
        guard !configuration.readOnly else {
            throw LedgerError(.readOnly, "the ledger at \(configuration.path) was opened read-only")
        }
        let head = try log.head().position.rawValue
        let scratchPath = (configuration.path as NSString).appendingPathComponent(".rebuild-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(atPath: scratchPath) }
        // Scratch folders a crashed rebuild left go first.
        ReadModelSnapshotStore.removeAbandonedFolders(in: configuration.path, prefix: ".rebuild-")
        let rebuild = try ScratchRebuild(of: log.store, at: scratchPath, logger: configuration.logger) { progress?($0, head) }
        defer { rebuild.scratch.environment.close() }
        // Few differences: changed in place, in one transaction (without twins, also the databases
        // that differ more, rewritten whole there).
        if !(rebuild.store.hasTwins && rewritingEverything), let inPlace = try await rebuildInPlace(rebuild, rewritingEverything) {
            return inPlace
        }
        return try await rebuildBySwitchingCopies(rebuild)
    }

    /// The last step of a rebuild when few entries differ: in one transaction of its own, the events
    /// committed meanwhile are replayed into the scratch copy and the live read models changed in
    /// place to equal it (without twins, the databases that differ more are rewritten whole there).
    /// Nil, having changed nothing, when a database differs too much and has a twin.
    private func rebuildInPlace(_ rebuild: ScratchRebuild, _ rewritingEverything: Bool) async throws(LedgerError) -> RebuildOutcome? {
        let (store, scratch) = (rebuild.store, rebuild.scratch)
        let twins = store.hasTwins
        return try await maintain(alone: true) { txn in
            let last = try rebuild.catchUp()
            let swap = try scratch.environment.read { built -> (ReadModelRebuild.SwapOutcome, Int)? in
                guard
                    let swap = try ReadModelRebuild.swap(
                        into: store.models, in: txn, from: scratch.models, in: built, rewriteAll: rewritingEverything,
                        rewriteBeyondLimit: !twins)
                else { return nil }
                let repaired = try ReadModelRebuild.repairRecords(store, in: txn, from: scratch, in: built)
                return (swap, repaired)
            }
            return swap.map {
                RebuildOutcome(events: last, changedEntries: $0.0.changedEntries + $0.1, rewrittenDatabases: $0.0.rewrittenDatabases)
            }
        }
    }

    /// The last steps of a rebuild when many entries differ: the unused copies are filled in bounded
    /// transactions while writes go on, then made equal to the rebuilt read models (the events
    /// committed meanwhile included) and switched in. Writes faster than a fill could keep the copies
    /// from ever catching up: the last round rewrites whole, in the last transaction, the databases
    /// still too far apart.
    private func rebuildBySwitchingCopies(_ rebuild: ScratchRebuild) async throws(LedgerError) -> RebuildOutcome {
        let (store, scratch) = (rebuild.store, rebuild.scratch)
        let rounds = 4
        var round = 0
        while true {
            round += 1
            var point: ReadModelRebuild.FillPoint? = nil
            repeat {
                let from = point
                point = try await maintain { txn in
                    try scratch.environment.read { built in
                        try ReadModelRebuild.fillUnused(store.models, in: txn, from: scratch.models, in: built, resume: from)
                    }
                }
            } while point != nil
            let force = round >= rounds
            let finished: RebuildOutcome? = try await maintain(alone: true) { txn in
                let last = try rebuild.catchUp()
                let swap = try scratch.environment.read { built -> (ReadModelRebuild.SwapOutcome, Int)? in
                    guard let swap = try ReadModelRebuild.finishFill(store, in: txn, from: scratch.models, in: built, force: force)
                    else { return nil }
                    let repaired = try ReadModelRebuild.repairRecords(store, in: txn, from: scratch, in: built)
                    return (swap, repaired)
                }
                return swap.map {
                    RebuildOutcome(
                        events: last, changedEntries: $0.0.changedEntries + $0.1, rewrittenDatabases: store.models.all.map(\.name),
                        switchedCopies: true)
                }
            }
            if let finished { return finished }
        }
    }
}

/// The scratch copy a rebuild replays the log into, and the log position it reflects.
struct ScratchRebuild: Sendable {
    /// The live ledger's store.
    let store: LogStore
    /// The scratch environment the log is replayed into (no fsync).
    let scratch: LogStore
    private let mark: ReplayMark

    /// Creates the scratch environment at `path` and replays the whole log of `store` into it, each
    /// event checked against the rules (the first the rules could not have produced throws, as
    /// `LedgerError.Code.corruptedData`), with its stream and command records.
    init(of store: LogStore, at path: String, logger: Logger, progress: @escaping (UInt64) -> Void) throws(LedgerError) {
        self.store = store
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            scratch = try LogStore.openLedger(EventLog.Configuration.scratch(at: path, logger: logger))
            mark = ReplayMark(try LogReplay.replay(from: store, into: scratch, validate: true, records: true, progress: progress))
        } catch let inadmissible as LogReplay.InadmissibleEvent {
            throw inadmissible.error
        } catch {
            throw LedgerError.wrap(error, while: "replaying the log into \(path)")
        }
    }

    /// Replays the events committed since into the scratch copy; returns the position it reflects.
    /// The position moves only once a replay is done (a write retried after the map grew runs its
    /// closure again, and must not replay twice).
    func catchUp() throws -> UInt64 {
        do {
            let last = try LogReplay.replay(from: store, into: scratch, after: mark.position, validate: true, records: true)
            mark.position = last
            return last
        } catch let inadmissible as LogReplay.InadmissibleEvent {
            throw inadmissible.error
        }
    }
}

/// The log position a rebuild's scratch copy reflects.
private final class ReplayMark: Sendable {
    private let value: Mutex<UInt64>
    init(_ position: UInt64) { value = Mutex(position) }
    var position: UInt64 {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }
}
