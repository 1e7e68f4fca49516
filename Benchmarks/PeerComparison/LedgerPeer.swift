import Foundation
import ShareLedger
import ShareLedgerBenchmarkSupport

/// The workload through ShareLedger's public API, on a durable ledger (fsync per group commit)
/// unless `--durability` says otherwise.
/// The in-process residual-task worker is off, so the log holds exactly the workload's events
/// (the SQLite side writes the accept's outbox row too, and runs no worker either).
struct LedgerPeer: PeerStore {
    let ledger: ShareLedger

    init(path: String, durability: Durability) throws {
        try? FileManager.default.removeItem(atPath: path)
        var configuration = ShareLedger.Configuration(path: path, durability: durability, initialMapSize: 1 << 30)
        configuration.residualTaskWorker = nil
        configuration.benchmarkRecordsCommitSizes = true
        ledger = try ShareLedger.open(configuration)
    }

    private func user(_ name: String) -> Container { ledger.container(Workload.container, userRecordName: name) }

    func setUp(_ workload: Workload) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for caller in 0..<workload.callers {
                group.addTask {
                    let owner = Workload.owner(caller)
                    try await ledger.registerUser(owner, in: Workload.container)
                    for index in 0..<workload.invitees {
                        try await ledger.registerUser(
                            Workload.invitee(caller, index), in: Workload.container,
                            emailAddress: Workload.email(caller, index))
                    }
                    let zone = RecordZoneID(zoneName: Workload.zoneName)
                    _ = try await user(owner).save(RecordZone(zoneID: zone))
                    for lifecycle in 0..<workload.lifecycles {
                        _ = try await user(owner).save(
                            Record(recordType: "Board", recordID: RecordID(recordName: Workload.record(lifecycle), zoneID: zone)))
                    }
                }
            }
            try await group.waitForAll()
        }
    }

    func createShare(caller: Int, lifecycle: Int) async throws -> URL {
        let root = RecordID(recordName: Workload.record(lifecycle), zoneID: RecordZoneID(zoneName: Workload.zoneName))
        return try await user(Workload.owner(caller)).share(rootRecord: root, title: "Board \(lifecycle)").url
    }

    func invite(caller: Int, invitee: Int, to share: URL) async throws {
        _ = try await user(Workload.owner(caller)).addParticipant(
            LookupInfo(emailAddress: Workload.email(caller, invitee)), permission: .readWrite, to: share)
    }

    func fetchMetadata(caller: Int, invitee: Int, of share: URL) async throws -> Share.Metadata {
        try await user(Workload.invitee(caller, invitee)).shareMetadata(for: share)
    }

    func accept(caller: Int, invitee: Int, _ metadata: Share.Metadata) async throws {
        _ = try await user(Workload.invitee(caller, invitee)).accept(metadata)
    }

    /// Events per group commit (one event per action in this workload) from `from` on.
    func commitSizes(from: Int) -> [Int] { Array(ledger.log.benchmarkCommitSizes().dropFirst(from)) }
    var commitCount: Int { ledger.log.benchmarkCommitSizes().count }

    /// The log's head position: the number of events appended so far.
    func eventCount() throws -> UInt64 { try ledger.log.head().position.rawValue }

    func close() async { await ledger.close() }
}
