import EventLog
import LMDB
import ShareLedger
import SharingDomain

/// The tools that read or rewrite a ledger's whole history, beside its sharing API: audit,
/// read-model rebuild, history and as-of views, signed checkpoints, NDJSON export and import, and
/// re-sealing personal data into a new ledger.
///
/// ```swift
/// let tools = LedgerAudit(ledger)
/// let report = try await tools.audit(scratchPath: scratch)
/// ```
///
/// It holds nothing but the open ledger, so make one wherever it is needed.
public struct LedgerAudit: Sendable {
    /// The open ledger these tools work on.
    public let ledger: ShareLedger

    /// The tools for `ledger` (open; the tools do not close it).
    public init(_ ledger: ShareLedger) {
        self.ledger = ledger
    }

    // The parts of the ledger the tools use.
    var log: EventLog { ledger.log }
    var configuration: ShareLedger.Configuration { ledger.configuration }
    var models: ReadModels { ledger.models }
    var snapshots: ReadModelSnapshotStore { ledger.snapshots }

    /// ``ShareLedger/read(_:_:)``: a short read transaction.
    func read<R>(_ doing: @autoclosure () -> String, _ body: (borrowing Transaction) throws -> R) throws(LedgerError) -> R {
        try ledger.read(doing(), body)
    }

    /// ``ShareLedger/maintain(alone:replicating:_:)``: bookkeeping in the writer's next transaction.
    func maintain<Result: Sendable>(
        alone: Bool = false, replicating: Bool = false, _ work: @escaping MaintenanceWork<Result>
    ) async throws(LedgerError) -> Result {
        try await ledger.maintain(alone: alone, replicating: replicating, work)
    }

    /// ``ShareLedger/finishForgets(among:)``.
    func finishForgets(among events: some Sequence<DomainEvent?>) throws(LedgerError) {
        try ledger.finishForgets(among: events)
    }
}
