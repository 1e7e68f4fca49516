import Foundation
import Histogram
import ShareLedger

/// What a simulated call was meant to do: succeed, or fail with one code on purpose (the mistakes
/// real clients make).
enum Intent: CustomStringConvertible {
    case success
    case failure(LedgerError.Code)

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
    /// The first problems, described, for a bug report.
    var problems: [String] = []
    /// A share one of the workload's users can still accept, for trying `fetch` and `accept` by hand.
    var example: SimulationExample?
    /// What the ledger's counters must have grown by, according to the models.
    var expected = ExpectedCounts()

    static let maxProblems = 20
    /// The highest latency recorded: 60 s (longer values are recorded as 60 s).
    static let highestMicros: UInt64 = 60_000_000

    mutating func record(_ kind: String, micros: UInt64) {
        latency[kind, default: Histogram<UInt64>(highestTrackableValue: Self.highestMicros, numberOfSignificantValueDigits: .three)]
            .record(min(max(micros, 1), Self.highestMicros))
    }

    mutating func problem(_ text: String) {
        if problems.count < Self.maxProblems { problems.append(text) }
    }

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
        for problem in other.problems { self.problem(problem) }
        if example == nil { example = other.example }
        expected.add(other.expected)
    }
}

/// What the models say the ledger's counters grew by in a run (the partitions are disjoint, so
/// the clients' counts add up).
struct ExpectedCounts: Sendable, Encodable {
    var users: UInt64 = 0
    var zones: UInt64 = 0
    var records: UInt64 = 0
    var shares: UInt64 = 0
    var participants: UInt64 = 0
    var acceptedParticipants: UInt64 = 0

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

    mutating func add(_ other: ExpectedCounts) {
        users += other.users
        zones += other.zones
        records += other.records
        shares += other.shares
        participants += other.participants
        acceptedParticipants += other.acceptedParticipants
    }

    /// The counters that differ from `before` + self in `after`, described.
    func differences(before: EventLog.Statistics, after: EventLog.Statistics) -> [String] {
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
    var url: String
    var container: String
    var user: String
    var owner: String
}

/// The summary `share-ledger simulate --json` prints.
struct SimulationSummary: Encodable {
    struct Latency: Encodable {
        var count: UInt64
        var p50: UInt64
        var p99: UInt64
        var max: UInt64
    }

    var seed: UInt64
    var clients: Int
    var users: Int
    var containers: [String]
    var durability: String
    var actions: Int
    var seconds: Double
    var actionsPerSecond: Double
    var events: UInt64
    var errorsByCode: [String: Int]
    var intendedErrors: Int
    var unexpectedErrors: Int
    var unexpectedSuccesses: Int
    var mismatches: Int
    var problems: [String]
    var residualTasksCompleted: Int
    var drainSeconds: Double
    var pendingResidualTasks: Int
    var shares: UInt64
    var participants: UInt64
    var acceptedParticipants: UInt64
    var participantZones: UInt64
    var latencyMicros: [String: Latency]
    var example: SimulationExample?

    /// Whether the ledger answered every call as the workload expected and left nothing behind.
    var isClean: Bool {
        unexpectedErrors == 0 && unexpectedSuccesses == 0 && mismatches == 0 && pendingResidualTasks == 0
            && participantZones == acceptedParticipants
    }
}
