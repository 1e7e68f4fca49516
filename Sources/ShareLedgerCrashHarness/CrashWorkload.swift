import Foundation
import ShareLedger
import ShareLedgerAudit

#if canImport(Glibc)
import Glibc
#endif

/// The writing workload the crash child runs until it is killed: concurrent clients doing a mix of
/// share actions through the sharing API, with the in-process residual-task worker on.
///
/// Each client owns a zone (`_o<run>_<client>`, zone ``zoneName``) and loops over rounds. A round
/// registers a new participant, saves a new record, shares it (private on even rounds, public
/// read-only on odd ones, alternating between clients), invites the participant to a private share,
/// and has the participant fetch the metadata and accept. Every call is one command; after its
/// `await` returns the client appends an ``Ack`` to the side file. Each share has exactly one
/// participant besides its owner, and each participant fetches and accepts exactly once, which is
/// what lets the verifier count every command's events exactly.
public enum CrashWorkload {
    public static let container = "iCloud.com.example.crash"
    public static let zoneName = "Boards"

    /// The worker settings of the child: a short lease so that the verifier's worker can take over
    /// soon after a kill.
    public static let workerConfiguration = ResidualTaskWorker.Configuration(
        batchSize: 64, leaseDuration: .milliseconds(300), pollInterval: .milliseconds(100))

    /// Runs the workload forever (until SIGKILL). Any unexpected error exits with status 71 after
    /// printing it: the driver reports a child that exits by itself as a failure. `run` makes this
    /// run's names unique in the ledger (the driver passes the kill number; default: the pid). With
    /// `rebuilding`, one more task rebuilds the read models over and over, rewriting them into their
    /// second copies and switching them in, while the clients write.
    public static func run(
        ledgerPath: String, ackPath: String, clients: Int, durability: Durability, run: String? = nil,
        rebuilding: Bool = false
    ) async -> Never {
        let acks: AckLog.Writer
        let ledger: ShareLedger
        do {
            acks = try AckLog.Writer(path: ackPath)
            var configuration = ShareLedger.Configuration(path: ledgerPath, durability: durability)
            configuration.residualTaskWorker = workerConfiguration
            ledger = try ShareLedger.open(configuration)
        } catch {
            fail("cannot open: \(error)")
        }
        FileHandle.standardOutput.write(Data("ready\n".utf8))
        let run = run ?? String(getpid())
        await withTaskGroup(of: Void.self) { group in
            for client in 0..<max(1, clients) {
                group.addTask {
                    do {
                        try await runClient(ledger: ledger, acks: acks, run: run, client: client)
                    } catch {
                        fail("client \(client): \(error)")
                    }
                }
            }
            if rebuilding {
                group.addTask {
                    do {
                        while true { _ = try await LedgerAudit(ledger).rebuildReadModels(rewritingEverything: true) }
                    } catch {
                        fail("rebuild: \(error)")
                    }
                }
            }
        }
        fail("the clients returned")
    }

    private static func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data("crash child failed: \(message)\n".utf8))
        exit(71)
    }

    private static func runClient(ledger: ShareLedger, acks: AckLog.Writer, run: String, client: Int) async throws {
        let ownerName = "_o\(run)_\(client)"
        try await ledger.registerUser(ownerName, in: container)
        acks.append(.register(user: ownerName))
        let owner = ledger.container(container, userRecordName: ownerName)
        let zone = RecordZoneID(zoneName: zoneName)
        _ = try await owner.save(RecordZone(zoneID: zone))
        acks.append(.zone(owner: ownerName))
        var round = 0
        while true {
            round += 1
            let suffix = "\(run)_\(client)_\(round)"
            let participantName = "_p\(suffix)"
            try await ledger.registerUser(participantName, in: container)
            acks.append(.register(user: participantName))

            let recordName = "r\(suffix)"
            let recordID = RecordID(recordName: recordName, zoneID: zone)
            _ = try await owner.save(Record(recordType: "Board", recordID: recordID, fields: ["round": .int64(Int64(round))]))
            acks.append(.record(owner: ownerName, record: recordName))

            let isPrivate = (round + client) % 2 == 0
            let share = try await owner.share(rootRecord: recordID, publicPermission: isPrivate ? .none : .readOnly)
            let url = share.url.absoluteString
            acks.append(.share(owner: ownerName, record: recordName, url: url))

            if isPrivate {
                _ = try await owner.addParticipant(
                    LookupInfo(userRecordID: RecordID(userRecordName: participantName)), permission: .readWrite, to: share.url)
                acks.append(.invite(url: url, user: participantName))
            }

            let participant = ledger.container(container, userRecordName: participantName)
            let metadata = try await participant.shareMetadata(for: share.url)
            acks.append(.fetch(url: url, user: participantName))

            _ = try await participant.accept(metadata)
            acks.append(.accept(url: url, user: participantName))
        }
    }
}
