import Foundation
import SharingDomain
import SwiftProtobuf

/// Work an acceptance or a removal leaves behind (CloudKit's "residual work"): the owner's zone
/// appearing in, or leaving, a participant's shared database. The ledger writes a task in the same
/// commit as the acceptance (an outbox); the ``ResidualTaskWorker`` completes it.
public struct ResidualTask: Sendable, Hashable, Identifiable, Codable {
    /// What the task does.
    public enum Kind: String, Sendable, Hashable, Codable {
        /// Create the zone in the participant's shared database (after an accept).
        case createZone
        /// Remove the zone from the participant's shared database (after a removal, leaving, a
        /// public-permission change that drops the user, or deletion of the share).
        case removeZone
    }

    /// The task's id: `position << 12 | index` of the event that scheduled it, so ids sort in
    /// scheduling order.
    public var id: UInt64
    /// What the task does.
    public var kind: Kind
    /// The container of the share.
    public var containerIdentifier: String
    /// The participant whose shared database changes.
    public var userRecordName: String
    /// The owner's zone the participant gains or loses.
    public var zoneID: RecordZoneID
    /// The token of the share that caused the task.
    public var shareToken: String
    /// When it was scheduled.
    public var scheduledAt: Date
    /// Attempts so far (an attempt is counted before it runs, so a crash during one counts).
    public var attempts: Int
    /// When it may run next.
    public var dueAt: Date
    /// The error of the last failed attempt.
    public var lastError: String?
    /// Whether it is parked: it failed ``ResidualTaskWorker/Configuration/maxAttempts`` times and
    /// waits for an operator (`share-ledger tasks retry`).
    public var isParked: Bool
}

/// Carries out residual tasks. The ledger records the effect itself (the completion event updates
/// the shared-database read model); an executor is where an application does what must happen
/// outside the ledger first (notify devices, warm a cache). It must be idempotent: a task may run
/// again after a crash.
public protocol ResidualTaskExecutor: Sendable {
    /// Does the task's outside work. Throwing fails this attempt; the worker retries with backoff.
    func execute(_ task: ResidualTask) async throws
}

/// The default executor: nothing to do outside the ledger.
public struct LedgerOnlyExecutor: ResidualTaskExecutor {
    /// Makes the executor.
    public init() {}
    /// Does nothing: the completion event is the whole effect.
    public func execute(_ task: ResidualTask) async throws {}
}

extension EventEnvelope {
    /// For a `ParticipantZoneCreated` event: the participant whose shared database gained the zone.
    package var participantZoneCreatedUser: String? {
        guard eventType == Shareledger_Events_V1_ParticipantZoneCreated.protoMessageName else { return nil }
        return (try? Shareledger_Events_V1_ParticipantZoneCreated(serializedBytes: payload))?.userRecordName
    }
}

extension ResidualTask {
    init(id: UInt64, _ task: ResidualTaskState, _ state: WorkerTaskState?) {
        self.init(
            id: id, kind: task.kind == .createZone ? .createZone : .removeZone, containerIdentifier: task.container,
            userRecordName: task.userRecordName,
            zoneID: RecordZoneID(zoneName: task.zoneName, ownerName: task.ownerName), shareToken: task.token,
            scheduledAt: Presenter.date(task.scheduledAtMicros), attempts: Int(state?.attempts ?? 0),
            dueAt: Presenter.date(max(task.dueAtMicros, state?.dueAtMicros ?? 0)),
            lastError: (state?.lastError).flatMap { $0.isEmpty ? nil : $0 }, isParked: state?.parked ?? false)
    }
}
