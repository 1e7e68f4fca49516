import EventLog
import Foundation
import ShareLedger
import ShareLedgerBaselines
import SharingDomain

// The surface the nested `Benchmarks/` package measures: thin wrappers around the internal hot
// paths (envelope encoding and decoding, the chain hash, a command step's decide and apply). A
// support product for the benchmarks, outside the library products: it reaches ShareLedger through
// `package` access only (`ShareLedger.rehearse`, the writer probe). Nothing here changes what the
// library does; each wrapper calls the function the writer or a reader calls.
//
//     import ShareLedgerBenchmarkSupport

/// One envelope as the writer encodes it for a domain event: the event's payload serialized, then
/// the envelope's canonical bytes, the chain hash and the stored bytes (``encode()``), exactly as
/// the writer does before its `MDB_APPEND` put.
public struct BenchmarkEnvelope: Sendable {
    let event: DomainEvent
    let stream: String
    let container: String
    let actor: String
    let commandID: UUID
    let previousHash: [UInt8]

    /// A `ShareCreated` event of a hierarchy share with a realistic title, in a realistic container.
    public static func shareCreated() -> BenchmarkEnvelope {
        var e = Shareledger_Events_V1_ShareCreated()
        e.token = "7WQ2K9ZD4MBXR6N3TFHJCPVAYE"
        e.ownerName = "_0b1c5f2e9a7d4c3b8e6f1a2d"
        e.zoneName = "Boards"
        e.shareRecordName = "Share-4F3C2B1A-9E8D-4C7B-A6F5-0E1D2C3B4A59"
        e.rootRecordName = "board-2026-11-22-planning"
        e.title = "Planning board"
        e.ownerParticipantID = "9A8B7C6D-5E4F-4321-8765-43210FEDCBA9"
        return BenchmarkEnvelope(
            event: .shareCreated(e), stream: "share/" + e.token, container: "iCloud.com.example.notes",
            actor: e.ownerName, commandID: UUID(), previousHash: [UInt8](repeating: 0xAB, count: 32))
    }

    /// Serializes the payload and encodes the envelope: the stored bytes (canonical bytes, then the
    /// 34-byte hash field) that the writer appends at `position`.
    public func encode(position: UInt64 = 1_000_000) throws -> [UInt8] {
        let payload = try event.payload()
        return EnvelopeCodec.encode(
            EnvelopeCodec.Fields(
                position: position, recordedAtMicros: 1_795_000_000_000_000, container: container, actor: actor,
                commandID: commandID, correlationID: nil, causationID: nil, schemaVersion: event.schemaVersion,
                stream: stream, streamVersion: 1, streamPreviousPosition: 0, eventType: event.typeName, payload: payload,
                previousHash: previousHash)
        ).stored
    }

    /// Decodes stored bytes as a reader does (``EventLog/event(at:)``): the envelope, with the
    /// hash field's shape checked (not the chain).
    public static func decode(_ stored: [UInt8], position: UInt64 = 1_000_000) throws(LedgerError) -> EventEnvelope {
        do {
            return try stored.withUnsafeBytes { bytes in try EnvelopeCodec.decode(bytes, key: position) }
        } catch let error as LedgerError {
            throw error
        } catch {
            throw LedgerError.wrap(error, while: "decoding an envelope")
        }
    }

    /// The chain hash the writer computes for an entry: SHA-256(previous ‖ canonical).
    public static func chainHash(previous: [UInt8], canonical: [UInt8]) -> [UInt8] {
        previous.withUnsafeBytes { p in canonical.withUnsafeBytes { c in EnvelopeCodec.chainHash(previous: p, canonical: c) } }
    }
}

/// One step of a share command, built ahead of time (with its random inputs drawn) so that a
/// benchmark measures only ``ShareLedger/benchmarkDecideAndApply(_:container:actor:rowCache:)``.
public struct BenchmarkStep: Sendable {
    let action: DomainAction

    /// Share `root` (as `Container.share(rootRecord:)` does).
    public static func createShare(_ ledger: ShareLedger, rootRecord root: RecordID, title: String = "") -> BenchmarkStep {
        BenchmarkStep(
            action: .createShare(
                ShareCreation(
                    zoneID: root.zoneID, rootRecordName: root.recordName, title: title, publicPermission: .none,
                    tokenCandidate: ledger.newToken().text, shareRecordName: "Share-" + ledger.newParticipantID(),
                    ownerParticipantID: ledger.newParticipantID())))
    }

    /// Invite `lookup` to the share at `url` (as `Container.addParticipant(_:permission:role:to:ifChangeTag:)` does).
    public static func addParticipant(
        _ ledger: ShareLedger, _ lookup: LookupInfo, permission: Share.Participant.Permission, to url: URL
    ) throws(LedgerError) -> BenchmarkStep {
        try BenchmarkStep(
            action: .addParticipant(
                token: Container.token(of: url), lookup: lookup, role: .privateUser, permission: permission,
                newParticipantID: ledger.newParticipantID(), ifChangeTag: nil))
    }

    /// Fetch the metadata of the share at `url` (as `Container.shareMetadata(for:)` does).
    public static func fetchMetadata(_ url: URL) -> BenchmarkStep {
        BenchmarkStep(
            action: .fetchMetadata(
                tokenText: ShareURL.token(in: url)?.text ?? String(url.lastPathComponent.prefix(64)),
                shouldFetchRootRecord: false, desiredKeys: nil))
    }

    /// Accept the share `metadata` describes (as `Container.accept(_:)` does).
    public static func accept(_ ledger: ShareLedger, _ metadata: Share.Metadata) -> BenchmarkStep {
        BenchmarkStep(
            action: .accept(
                token: metadata.share.token.text, metadataContainer: metadata.containerIdentifier,
                newParticipantID: ledger.newParticipantID()))
    }
}

extension ShareLedger {
    /// Decides `step` as `actor` against the read models and applies its events to them, as the
    /// writer does inside a group commit, in a write transaction that is then aborted: the ledger is
    /// left as it was, so the same step can be measured again. Not the log append, not the commit
    /// (see ``BenchmarkEnvelope``).
    ///
    /// With `rowCache` (the default), reads go through a row cache as the writer's do, empty at the
    /// start of each step: each row is decoded at most once per step, as on a writer that holds none
    /// of the step's rows yet. Without it, every read decodes its row, as a rebuild's replay does.
    ///
    /// Call it only while nothing else writes to the ledger (LMDB serializes write transactions: a
    /// concurrent command would wait). Returns the number of events the step produced; throws the
    /// step's ``LedgerError`` when it is refused.
    @discardableResult
    public func benchmarkDecideAndApply(_ step: BenchmarkStep, container: String, actor: String, rowCache: Bool = true) throws -> Int {
        try rehearse(step.action, container: container, actor: actor, rowCache: rowCache)
    }
}

extension EventLog.Configuration {
    /// Whether the writer records the size (in events) of every group commit; see
    /// ``EventLog/benchmarkCommitSizes()``. Setting it installs a recorder as the writer probe.
    public var benchmarkRecordsCommitSizes: Bool {
        get { writerProbe is CommitSizeRecorder }
        set { writerProbe = newValue ? CommitSizeRecorder() : nil }
    }
}

extension EventLog {
    /// The size (in events) of every group commit so far, when the configuration asked for them.
    public func benchmarkCommitSizes() -> [Int] { commitSizes() }
}
