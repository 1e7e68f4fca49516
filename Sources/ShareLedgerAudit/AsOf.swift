import EventLog
import Foundation
import LMDB
import Logging
import ShareLedger
import SharingDomain

/// Who could access a share at a past point, and how (``LedgerAudit/access(to:at:)``).
public struct ShareAccess: Sendable, Hashable, Codable {
    /// One participant as they stood then.
    public struct Entry: Sendable, Hashable, Codable {
        /// The participant's id.
        public var participantID: String
        /// Their account; `nil` for an invitation no account had claimed.
        public var userRecordName: String?
        /// Their role then.
        public var role: Share.Participant.Role
        /// Their permission then.
        public var permission: Share.Participant.Permission
        /// Their status then; only `accepted` participants (and the owner) had access.
        public var acceptanceStatus: Share.Participant.AcceptanceStatus
        /// Whether they could reach the shared records then (the owner, or accepted).
        public var hadAccess: Bool
        /// Whether their invitation then approved their access request (`Share.Participant.isApprovedRequester`).
        public var isApprovedRequester: Bool = false
    }

    /// The last position the answer includes.
    public var position: UInt64
    /// The recorded time of that position's event.
    public var recordedAt: Date
    /// Whether the share existed then (created and not deleted).
    public var existed: Bool
    /// Its public permission then (anyone signed in could join with it).
    public var publicPermission: Share.Participant.Permission
    /// Every participant it had by then, removed ones included, in the order they were added.
    public var participants: [Entry]
    /// Whether it allowed access requests then (`Share.allowsAccessRequests`).
    public var allowsAccessRequests = false
    /// The user record names of its pending access requests then, in name order.
    public var requesters: [String] = []
    /// The user record names blocked from it then, in name order: they could not request, fetch or join.
    public var blockedIdentities: [String] = []
}

extension LedgerAudit {
    /// The last position at or before `bound` (a position, or the last event recorded at or before a time).
    public func position(atOrBefore bound: HistoryBound) throws(LedgerError) -> LogPosition {
        let head = try log.head().position
        switch bound {
        case .position(let position): return min(position, head)
        case .time(let date):
            // Recorded times never go backwards: binary search over positions.
            var low: UInt64 = 0
            var high = head.rawValue
            while low < high {
                let middle = low + (high - low + 1) / 2
                guard let event = try log.event(at: LogPosition(middle)) else { break }
                if event.recordedAt <= date { low = middle } else { high = middle - 1 }
            }
            return LogPosition(low)
        }
    }

    /// Who could access the share at `url` right after `bound`, with which permission: answered from
    /// the share's history index, replaying only that share's events (fast at any ledger size).
    public func access(to url: URL, at bound: HistoryBound) throws(LedgerError) -> ShareAccess {
        let last = try position(atOrBefore: bound)
        var existed = false
        var publicPermission = Share.Participant.Permission.none
        var order: [String] = []
        var entries: [String: ShareAccess.Entry] = [:]
        var allowsRequests = false
        var requesters = Set<String>()
        var blocked = Set<String>()
        func update(_ id: String, _ change: (inout ShareAccess.Entry) -> Void) {
            if var entry = entries[id] {
                change(&entry)
                entry.hadAccess = entry.role == .owner || entry.acceptanceStatus == .accepted
                entries[id] = entry
            }
        }
        for item in try history(of: .share(url), until: .position(last), limit: .max) {
            guard
                let event = try DomainEvent.decode(
                    type: item.envelope.eventType, schemaVersion: item.envelope.schemaVersion, payload: item.envelope.payload,
                    position: item.envelope.position.rawValue)
            else { continue }
            switch event {
            case .shareCreated(let e):
                existed = true
                (allowsRequests, requesters, blocked) = (false, [], [])
                publicPermission = e.publicPermission.permission
                order = [e.ownerParticipantID]
                entries = [
                    e.ownerParticipantID: ShareAccess.Entry(
                        participantID: e.ownerParticipantID, userRecordName: e.ownerName, role: .owner, permission: .readWrite,
                        acceptanceStatus: .accepted, hadAccess: true)
                ]
            case .shareDeleted:
                existed = false
            case .publicPermissionChanged(let e):
                publicPermission = e.newPermission.permission
            case .participantAdded(let e):
                if entries[e.participantID] == nil { order.append(e.participantID) }
                entries[e.participantID] = ShareAccess.Entry(
                    participantID: e.participantID, userRecordName: e.userRecordName.isEmpty ? nil : e.userRecordName,
                    role: e.role.role, permission: e.permission.permission, acceptanceStatus: .pending, hadAccess: false,
                    isApprovedRequester: e.approvedRequester)
                requesters.remove(e.userRecordName)
            case .participantUpdated(let e):
                update(e.participantID) {
                    $0.role = e.role.role
                    $0.permission = e.permission.permission
                }
            case .participantRemoved(let e):
                update(e.participantID) { $0.acceptanceStatus = .removed }
            case .participantVerified(let e):
                update(e.participantID) { $0.userRecordName = e.userRecordName }
                requesters.remove(e.userRecordName)
            case .accessRequestsAllowedChanged(let e):
                allowsRequests = e.allowed
            case .accessRequested(let e):
                requesters.insert(e.userRecordName)
            case .accessRequestDenied(let e):
                requesters.remove(e.userRecordName)
            case .identityBlocked(let e):
                requesters.remove(e.userRecordName)
                blocked.insert(e.userRecordName)
            case .identityUnblocked(let e):
                blocked.remove(e.userRecordName)
            case .shareAccepted(let e):
                update(e.participantID) {
                    $0.acceptanceStatus = .accepted
                    $0.userRecordName = e.userRecordName
                }
            default:
                break
            }
        }
        let at = try log.event(at: last)?.recordedAt ?? Date(timeIntervalSince1970: 0)
        return ShareAccess(
            position: last.rawValue, recordedAt: at, existed: existed, publicPermission: publicPermission,
            participants: existed ? order.compactMap { entries[$0] } : [], allowsAccessRequests: existed && allowsRequests,
            requesters: existed ? requesters.sorted() : [], blockedIdentities: existed ? blocked.sorted() : [])
    }

    /// Opens a read-only view of every read model as it stood right after `bound`, at a new
    /// directory `path`, answering the same queries as the live ledger (`Container` queries:
    /// shares, participants, records, shared zones). Close it when done; the directory is the
    /// caller's to remove.
    ///
    /// It starts from the newest saved read-model snapshot at or before `bound` whose event is still
    /// in the log with the same hash (`saveReadModelSnapshot()`; a file copy) and replays the log
    /// from there to `bound`; without one, it replays from the start. So its cost is the replay of at
    /// most the events since the last snapshot (`docs/benchmarks.md` has the rates).
    public func snapshot(at bound: HistoryBound, path: String) throws(LedgerError) -> ShareLedger {
        let last = try position(atOrBefore: bound).rawValue
        do {
            if FileManager.default.fileExists(atPath: path),
                !((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).isEmpty
            {
                throw LedgerError(.invalidArguments, "the snapshot directory \(path) is not empty; choose a new one")
            }
            var start: UInt64 = 0
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            if let saved = try snapshots.usable(atOrBefore: last) {
                let copy = (path as NSString).appendingPathComponent("data.mdb")
                do {
                    try FileManager.default.copyItem(
                        atPath: (saved.path as NSString).appendingPathComponent("data.mdb"), toPath: copy)
                    start = saved.position
                } catch {
                    // Deleted meanwhile (pruned by a worker): replay from the start instead.
                    try? FileManager.default.removeItem(atPath: copy)
                    configuration.logger.warning(
                        "read-model snapshot \(saved.path) could not be copied; replaying from the start",
                        metadata: ["error": "\(error)"])
                }
            }
            let target = try LogStore.openLedger(
                EventLog.Configuration(path: path, durability: .unsafeNoSync, logger: configuration.logger))
            try LogReplay.replay(from: log.store, into: target, after: start, through: last)
            try target.environment.sync()
            target.environment.close()
        } catch {
            throw LedgerError.wrap(error, while: "replaying the log into the snapshot at \(path)")
        }
        // The view answers with this ledger's key store (not a copy of it).
        if let vault = models.vault { PersonalDataVault.register(vault, at: path) }
        var view = ShareLedger.Configuration(path: path, createIfMissing: false, readOnly: true, logger: configuration.logger)
        view.residualTaskWorker = nil
        view.shareURLHost = configuration.shareURLHost
        return try ShareLedger.open(view)
    }
}
