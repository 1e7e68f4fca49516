import Foundation

/// The workload both stores run: `callers` concurrent tasks, each the owner of one zone, each going
/// through `lifecycles` share lifecycles one action at a time (awaiting each):
///
/// 1. the owner shares a record (create share),
/// 2. invites `invitees` participants by email (invite participant, one action each),
/// 3. each invitee fetches the share's metadata (logged as an event),
/// 4. each invitee accepts.
///
/// With 3 invitees that is 10 actions per lifecycle: 10% create, 30% invite, 30% fetch, 30% accept,
/// and one event per action on both sides.
struct Workload: Sendable {
    var callers: Int
    var lifecycles: Int
    var invitees = 3

    var actionsPerLifecycle: Int { 1 + 3 * invitees }
    var totalActions: Int { callers * lifecycles * actionsPerLifecycle }

    static let container = "iCloud.com.example.peer"
    static let zoneName = "Boards"
    static func owner(_ caller: Int) -> String { "_owner\(caller)" }
    static func invitee(_ caller: Int, _ index: Int) -> String { "_member\(caller)x\(index)" }
    static func email(_ caller: Int, _ index: Int) -> String { "member\(caller)x\(index)@example.com" }
    static func record(_ lifecycle: Int) -> String { "board\(lifecycle)" }
}

/// A store the workload runs against: ShareLedger, or SQLite through GRDB.
protocol PeerStore: Sendable {
    associatedtype ShareRef: Sendable
    associatedtype MetadataRef: Sendable

    /// Users, zones and records the lifecycles need (not measured).
    func setUp(_ workload: Workload) async throws
    func createShare(caller: Int, lifecycle: Int) async throws -> ShareRef
    func invite(caller: Int, invitee: Int, to share: ShareRef) async throws
    func fetchMetadata(caller: Int, invitee: Int, of share: ShareRef) async throws -> MetadataRef
    func accept(caller: Int, invitee: Int, _ metadata: MetadataRef) async throws
}

extension PeerStore {
    /// Runs lifecycles `range` of every caller (callers concurrently) and returns the seconds it took.
    func run(_ workload: Workload, lifecycles range: Range<Int>) async throws -> Double {
        let started = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for caller in 0..<workload.callers {
                group.addTask {
                    for lifecycle in range {
                        let share = try await createShare(caller: caller, lifecycle: lifecycle)
                        for invitee in 0..<workload.invitees {
                            try await invite(caller: caller, invitee: invitee, to: share)
                        }
                        var metadatas: [MetadataRef] = []
                        for invitee in 0..<workload.invitees {
                            metadatas.append(try await fetchMetadata(caller: caller, invitee: invitee, of: share))
                        }
                        for (invitee, metadata) in metadatas.enumerated() {
                            try await accept(caller: caller, invitee: invitee, metadata)
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        return (ContinuousClock.now - started).seconds
    }
}

extension Duration {
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
