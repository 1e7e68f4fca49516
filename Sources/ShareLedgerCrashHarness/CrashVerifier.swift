import Foundation
import ShareLedger
import ShareLedgerAudit

/// Checks a ledger after the crash child was killed: the promises of `docs/reliability.md`.
///
/// 1. It reopens (no in-process worker) and audits: the hash chain verifies, every payload decodes,
///    the stream and command records agree with the log, every read model equals a rebuild.
/// 2. Every acknowledged command is there exactly once: its entity exists (user, zone, record,
///    share, participant, accepted participation) and the events it appends occur once in the
///    entity's stream. Commands that were committed but not acknowledged (the kill came between the
///    commit and the side-file write) may be there, but at most once.
/// 3. The residual tasks drain: a worker here takes over once the killed child's lease expires; no
///    task is parked; every accepted participant ends with exactly one zone and one
///    `ParticipantZoneCreated`; there are as many zone completions as accepts.
public enum CrashVerifier {
    /// What one verification found.
    public struct Result: Sendable {
        /// Acknowledged commands checked.
        public var acknowledged = 0
        /// Acknowledged commands whose effect is missing.
        public var lost: [String] = []
        /// Commands whose events occur more than once.
        public var duplicated: [String] = []
        /// Everything else that is wrong (audit, residual tasks, the child).
        public var problems: [String] = []
        /// Events in the log after the drain.
        public var events: UInt64 = 0
        /// Residual tasks this verification completed (left behind by the kill).
        public var tasksDrained = 0

        public var isClean: Bool { lost.isEmpty && duplicated.isEmpty && problems.isEmpty }
    }

    static let eventPrefix = "shareledger.events.v1."

    /// Event counts by stream and by event name (without the package prefix).
    struct Counts {
        var byStream: [String: [String: Int]] = [:]
        var total: [String: Int] = [:]

        func count(_ name: String, in stream: String) -> Int { byStream[stream]?[name] ?? 0 }

        init(_ log: EventLog) throws {
            var after = LogPosition.start
            while true {
                let chunk = try log.events(after: after, limit: 4_096)
                guard let last = chunk.last else { break }
                for event in chunk {
                    let name =
                        event.eventType.hasPrefix(CrashVerifier.eventPrefix)
                        ? String(event.eventType.dropFirst(CrashVerifier.eventPrefix.count)) : event.eventType
                    byStream[event.stream, default: [:]][name, default: 0] += 1
                    total[name, default: 0] += 1
                }
                after = last.position
            }
        }
    }

    /// The token of a share URL as the child wrote it.
    static func token(_ url: String) -> String { URL(string: url)?.lastPathComponent ?? url }

    /// Verifies the ledger at `ledgerPath` against every acknowledgement written for it so far.
    /// `scratchPath` is where the audit rebuilds the read models (created and removed).
    public static func verify(ledgerPath: String, acks: [Ack], scratchPath: String, auditAfterDrain: Bool = false) async
        -> Result
    {
        var result = Result()
        var configuration = ShareLedger.Configuration(path: ledgerPath, createIfMissing: false, durability: .durable)
        configuration.residualTaskWorker = nil
        let ledger: ShareLedger
        do {
            ledger = try ShareLedger.open(configuration)
        } catch {
            result.problems.append("the ledger does not open after the kill: \(error)")
            return result
        }
        do {
            try await check(ledger, acks: acks, scratchPath: scratchPath, auditAfterDrain: auditAfterDrain, into: &result)
        } catch {
            result.problems.append("verification failed: \(error)")
        }
        await ledger.close()
        return result
    }

    private static func check(
        _ ledger: ShareLedger, acks: [Ack], scratchPath: String, auditAfterDrain: Bool, into result: inout Result
    ) async throws {
        // 1. The audit: chain, payloads, stream/command records, read models against a rebuild.
        let report = try LedgerAudit(ledger).audit(scratchPath: scratchPath)
        if !report.ok { result.problems.append(contentsOf: report.problems.map { "audit after the kill: \($0)" }) }

        // 2. Every acknowledged command exactly once; every command at most once.
        let counts = try Counts(ledger.log)
        let accepted = try checkAcknowledged(ledger, acks: acks, counts: counts, into: &result)
        let statistics = try checkAtMostOnce(ledger, counts: counts, into: &result)

        // 3. The residual tasks: the killed worker's lease expires, a worker here completes the rest.
        try await drainResidualTasks(ledger, into: &result)
        result.tasksDrained = statistics.pendingResidualTasks
        try checkAfterDrain(ledger, accepted: accepted, into: &result)
        if auditAfterDrain {
            let report = try LedgerAudit(ledger).audit(scratchPath: scratchPath)
            if !report.ok { result.problems.append(contentsOf: report.problems.map { "audit after the drain: \($0)" }) }
        }
    }

    /// The shares acknowledged (by URL, their owners) and the acceptances acknowledged, for the
    /// checks after the drain.
    private struct Accepted {
        var ownerOfShare: [String: String] = [:]
        var acceptedBy: [(url: String, user: String)] = []
    }

    /// Every acknowledged command is in the ledger exactly once, with its effect visible.
    private static func checkAcknowledged(
        _ ledger: ShareLedger, acks: [Ack], counts: Counts, into result: inout Result
    ) throws -> Accepted {
        func once(_ name: String, in stream: String, for ack: Ack) {
            let n = counts.count(name, in: stream)
            if n == 0 { result.lost.append("\(ack): no \(name) in \(stream)") }
            if n > 1 { result.duplicated.append("\(ack): \(n) × \(name) in \(stream)") }
        }
        var ownerOfShare: [String: String] = [:]
        var acceptedBy: [(url: String, user: String)] = []
        for ack in acks {
            result.acknowledged += 1
            switch ack {
            case .register(let user):
                once("UserRegistered", in: "user/\(user)", for: ack)
            case .zone(let owner):
                once("ZoneCreated", in: "zone/\(owner)/\(CrashWorkload.zoneName)", for: ack)
            case .record(let owner, let record):
                let id = RecordID(recordName: record, zoneID: RecordZoneID(zoneName: CrashWorkload.zoneName))
                do {
                    let saved = try ledger.container(CrashWorkload.container, userRecordName: owner).record(for: id)
                    if saved.recordChangeTag != "1" {
                        result.duplicated.append("\(ack): the record's change tag is \(saved.recordChangeTag ?? "nil"), not 1")
                    }
                } catch {
                    result.lost.append("\(ack): \(error)")
                }
            case .share(let owner, let record, let url):
                ownerOfShare[url] = owner
                once("ShareCreated", in: "share/\(token(url))", for: ack)
                do {
                    let share = try ledger.container(CrashWorkload.container, userRecordName: owner).share(for: URL(string: url)!)
                    if share.hierarchicalRootRecordID?.recordName != record {
                        result.problems.append("\(ack): the share's root is \(share.hierarchicalRootRecordID?.description ?? "nil")")
                    }
                } catch {
                    result.lost.append("\(ack): \(error)")
                }
            case .invite(let url, let user):
                once("ParticipantAdded", in: "share/\(token(url))", for: ack)
                if let owner = ownerOfShare[url] {
                    let share = try? ledger.container(CrashWorkload.container, userRecordName: owner).share(for: URL(string: url)!)
                    if share?.participants.contains(where: { $0.userIdentity.userRecordID?.recordName == user }) != true {
                        result.lost.append("\(ack): \(user) is not a participant")
                    }
                } else {
                    result.problems.append("\(ack): acknowledged before its share was")
                }
            case .fetch(_, let user):
                once("ShareMetadataFetched", in: "user/\(user)", for: ack)
            case .accept(let url, let user):
                once("ShareAccepted", in: "share/\(token(url))", for: ack)
                let shares = (try? ledger.container(CrashWorkload.container, userRecordName: user).participatingShares(
                    status: [.accepted])) ?? []
                if !shares.contains(where: { $0.url.absoluteString == url }) {
                    result.lost.append("\(ack): \(user) has not accepted the share")
                }
                acceptedBy.append((url, user))
            }
        }
        return Accepted(ownerOfShare: ownerOfShare, acceptedBy: acceptedBy)
    }

    /// Every command at most once, acknowledged or not; returns the ledger's statistics.
    private static func checkAtMostOnce(
        _ ledger: ShareLedger, counts: Counts, into result: inout Result
    ) throws -> ShareLedger.Statistics {
        // At most once for everything, acknowledged or not: each of these happens once per entity.
        let oncePerStream = [
            "UserRegistered", "ZoneCreated", "ShareCreated", "ParticipantAdded", "ShareAccepted", "ShareMetadataFetched",
            "ParticipantZoneCreated",
        ]
        for (stream, names) in counts.byStream {
            for name in oncePerStream where (names[name] ?? 0) > 1 {
                result.duplicated.append("\(names[name]!) × \(name) in \(stream)")
            }
        }
        let statistics = try ledger.statistics()
        if UInt64(counts.total["RecordSaved"] ?? 0) != statistics.records {
            result.duplicated.append("\(counts.total["RecordSaved"] ?? 0) RecordSaved events for \(statistics.records) records")
        }
        return statistics
    }

    /// Waits until no residual task is pending (at most 20 s), naming parked or still pending ones.
    private static func drainResidualTasks(_ ledger: ShareLedger, into result: inout Result) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while true {
            try await ledger.waitForResidualTasks(timeout: .seconds(20))
            let now = try ledger.statistics()
            if now.parkedResidualTasks > 0 {
                result.problems.append("\(now.parkedResidualTasks) residual tasks were parked")
                break
            }
            // Tasks waiting for a retry (an attempt the kill cut) are not due yet: wait for them too.
            if now.pendingResidualTasks == 0 { break }
            guard ContinuousClock.now < deadline else {
                result.problems.append("\(now.pendingResidualTasks) residual tasks still pending after 20 s")
                break
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// After the drain: one zone completion per accept, and each acceptor's shared zones.
    private static func checkAfterDrain(_ ledger: ShareLedger, accepted: Accepted, into result: inout Result) throws {
        let drained = try Counts(ledger.log)
        let after = try ledger.statistics()
        result.events = after.events
        if after.participantZones != after.acceptedParticipants {
            result.problems.append(
                "\(after.acceptedParticipants) accepted participants but \(after.participantZones) participant zones")
        }
        let accepts = drained.total["ShareAccepted"] ?? 0
        let zones = drained.total["ParticipantZoneCreated"] ?? 0
        if zones > accepts { result.duplicated.append("\(zones) zone completions for \(accepts) accepts") }
        if zones < accepts { result.lost.append("\(zones) zone completions for \(accepts) accepts: residual tasks lost") }
        for (stream, names) in drained.byStream where (names["ParticipantZoneCreated"] ?? 0) > 1 {
            result.duplicated.append("\(names["ParticipantZoneCreated"]!) × ParticipantZoneCreated in \(stream)")
        }
        for (url, user) in accepted.acceptedBy {
            let n = drained.count("ParticipantZoneCreated", in: "user/\(user)")
            if n != 1 { result.problems.append("accept \(url) \(user): \(n) zone completions after the drain") }
            let zones = (try? ledger.container(CrashWorkload.container, userRecordName: user).sharedDatabaseZones()) ?? []
            let expected = accepted.ownerOfShare[url].map { [RecordZoneID(zoneName: CrashWorkload.zoneName, ownerName: $0)] }
            if zones != expected {
                result.problems.append("accept \(url) \(user): shared zones \(zones), expected \(expected ?? [])")
            }
        }
    }
}
