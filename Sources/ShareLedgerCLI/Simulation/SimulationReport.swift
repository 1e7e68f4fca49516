import Foundation
import Histogram
import ShareLedger

/// What a simulated call was meant to do: succeed, or fail with one code on purpose (the mistakes
/// real clients make).
enum Intent: CustomStringConvertible {
    /// The call succeeds.
    case success
    /// The call fails with this code.
    case failure(LedgerError.Code)

    /// The intent, for messages.
    var description: String {
        switch self {
        case .success: return "success"
        case .failure(let code): return code.name
        }
    }
}

/// The tally of one client (and, merged, of the whole run).
struct SimulationTally: Sendable {
    /// API calls made.
    var actions = 0
    /// Latency of each kind of call, in microseconds.
    var latency: [String: Histogram<UInt64>] = [:]
    /// Every error the ledger answered (per item for batch calls), by code name.
    var errorsByCode: [String: Int] = [:]
    /// Errors the workload provoked on purpose and got.
    var intendedErrors = 0
    /// Errors the workload did not intend (a failed call meant to succeed, or the wrong code).
    var unexpectedErrors = 0
    /// Calls meant to fail that succeeded.
    var unexpectedSuccesses = 0
    /// Successful answers that disagree with the workload's model (a wrong status, a missing participant, ...).
    var mismatches = 0
    /// Problems by kind (`unexpected error <code>`, `unexpected success`, `mismatch`), counted.
    var problemsByKind: [String: Int] = [:]
    /// The first problems of each kind, described, for a bug report: no kind is hidden by another's
    /// many (one unexpected success among thousands of storage errors is shown).
    var problemExamples: [String: [String]] = [:]
    /// A share one of the workload's users can still accept, for trying `fetch` and `accept` by hand.
    var example: SimulationExample?
    /// What the ledger's counters must have grown by, according to the models.
    var expected = ExpectedCounts()

    /// Problems kept for the report, per kind (the first ones).
    static let maxProblemsPerKind = 5
    /// The highest latency recorded: 60 s (longer values are recorded as 60 s).
    static let highestMicros: UInt64 = 60_000_000

    /// Records one call's latency.
    mutating func record(_ kind: String, micros: UInt64) {
        latency[kind, default: Histogram<UInt64>(highestTrackableValue: Self.highestMicros, numberOfSignificantValueDigits: .three)]
            .record(min(max(micros, 1), Self.highestMicros))
    }

    /// Counts a problem of `kind` and keeps its description, up to ``maxProblemsPerKind`` per kind.
    mutating func problem(_ kind: String, _ text: String) {
        problemsByKind[kind, default: 0] += 1
        if problemExamples[kind, default: []].count < Self.maxProblemsPerKind { problemExamples[kind, default: []].append(text) }
    }

    /// The kept problems, unexpected successes first, then by kind.
    var problems: [String] {
        let first = "unexpected success"
        return (problemExamples[first] ?? []) + problemExamples.filter { $0.key != first }.sorted { $0.key < $1.key }.flatMap(\.value)
    }

    /// Adds another client's tally to this one.
    mutating func merge(_ other: SimulationTally) {
        actions += other.actions
        for (kind, histogram) in other.latency {
            if latency[kind] == nil {
                latency[kind] = histogram
            } else {
                latency[kind]!.add(histogram)
            }
        }
        for (code, count) in other.errorsByCode { errorsByCode[code, default: 0] += count }
        intendedErrors += other.intendedErrors
        unexpectedErrors += other.unexpectedErrors
        unexpectedSuccesses += other.unexpectedSuccesses
        mismatches += other.mismatches
        for (kind, count) in other.problemsByKind { problemsByKind[kind, default: 0] += count }
        for (kind, examples) in other.problemExamples {
            problemExamples[kind, default: []] += examples.prefix(Self.maxProblemsPerKind - problemExamples[kind, default: []].count)
        }
        if example == nil { example = other.example }
        expected.add(other.expected)
    }
}

/// What the models say the ledger's counters grew by in a run (the partitions are disjoint, so
/// the clients' counts add up).
struct ExpectedCounts: Sendable, Encodable {
    /// Users registered (an account in a second container counts again).
    var users: UInt64 = 0
    /// Zones not deleted.
    var zones: UInt64 = 0
    /// Records not deleted.
    var records: UInt64 = 0
    /// Live shares.
    var shares: UInt64 = 0
    /// Participants not removed, owners not counted.
    var participants: UInt64 = 0
    /// Accepted participants, owners not counted.
    var acceptedParticipants: UInt64 = 0

    /// All zero.
    init() {}

    /// The counts of one partition's model.
    init(_ model: PartitionModel, users: Int) {
        self.users = UInt64(users)
        for zone in model.zones where zone.live {
            zones += 1
            records += UInt64(zone.records.count)
        }
        for share in model.shares where share.live {
            shares += 1
            participants += UInt64(share.entries.filter { $0.status != .removed }.count)
            acceptedParticipants += UInt64(share.entries.filter { $0.status == .accepted }.count)
        }
    }

    /// Adds another partition's counts.
    mutating func add(_ other: ExpectedCounts) {
        users += other.users
        zones += other.zones
        records += other.records
        shares += other.shares
        participants += other.participants
        acceptedParticipants += other.acceptedParticipants
    }

    /// The counters that differ from `before` + self in `after`, described.
    func differences(before: ShareLedger.Statistics, after: ShareLedger.Statistics) -> [String] {
        let pairs: [(String, UInt64, UInt64, UInt64)] = [
            ("users", users, before.users, after.users),
            ("zones", zones, before.zones, after.zones),
            ("records", records, before.records, after.records),
            ("shares", shares, before.shares, after.shares),
            ("participants", participants, before.participants, after.participants),
            ("acceptedParticipants", acceptedParticipants, before.acceptedParticipants, after.acceptedParticipants),
        ]
        return pairs.compactMap { name, expected, before, after in
            after == before + expected
                ? nil : "the ledger counts \(after) \(name), expected \(before) + \(expected) from the workload's model"
        }
    }
}

/// A share a user of the run may accept: the arguments of `share-ledger fetch` and `accept`.
struct SimulationExample: Sendable, Encodable {
    /// The share URL.
    var url: String
    /// The container to act in.
    var container: String
    /// A user with a pending invitation to it.
    var user: String
    /// The share's owner.
    var owner: String
}

/// The summary `share-ledger simulate --json` prints.
struct SimulationSummary: Encodable {
    /// Latency figures of one kind of call, in microseconds.
    struct Latency: Encodable {
        /// Calls of that kind.
        var count: UInt64
        /// The median.
        var p50: UInt64
        /// The 99th percentile.
        var p99: UInt64
        /// The slowest.
        var max: UInt64
    }

    /// The seed of the workload.
    var seed: UInt64
    /// Concurrent clients.
    var clients: Int
    /// Users of the workload.
    var users: Int
    /// The containers the clients acted in.
    var containers: [String]
    /// The durability the ledger was opened with.
    var durability: String
    /// API calls made.
    var actions: Int
    /// Seconds the clients took (the final drain not included).
    var seconds: Double
    /// Calls per second.
    var actionsPerSecond: Double
    /// Events the run appended.
    var events: UInt64
    /// Errors the ledger answered, by code name (per item for batches).
    var errorsByCode: [String: Int]
    /// Errors provoked on purpose.
    var intendedErrors: Int
    /// Errors not intended, or with another code than intended.
    var unexpectedErrors: Int
    /// Calls meant to fail that succeeded.
    var unexpectedSuccesses: Int
    /// Answers or counters that disagree with the workload's model.
    var mismatches: Int
    /// Problems by kind, counted.
    var problemsByKind: [String: Int]
    /// The first problems of each kind, described (unexpected successes first).
    var problems: [String]
    /// Why the run stopped before its last action (a run of `storageFull`), if it did.
    var stoppedEarly: String?
    /// Residual tasks the final drain completed.
    var residualTasksCompleted: Int
    /// Seconds the final drain took.
    var drainSeconds: Double
    /// Residual tasks left (must be 0).
    var pendingResidualTasks: Int
    /// Live shares in the ledger.
    var shares: UInt64
    /// Participants in the ledger (not removed, owners not counted).
    var participants: UInt64
    /// Accepted participants in the ledger.
    var acceptedParticipants: UInt64
    /// Zones in participants' shared databases (one per accepted participant).
    var participantZones: UInt64
    /// Latency per kind of call.
    var latencyMicros: [String: Latency]
    /// A share to try `fetch` and `accept` with.
    var example: SimulationExample?
    /// With `--replication replicated`: the position the shard's stream acknowledged at the end.
    var replicatedThrough: UInt64? = nil

    /// Whether the ledger answered every call as the workload expected and left nothing behind.
    var isClean: Bool {
        stoppedEarly == nil && unexpectedErrors == 0 && unexpectedSuccesses == 0 && mismatches == 0 && pendingResidualTasks == 0
            && participantZones == acceptedParticipants
    }
}
