import Foundation
import ShareLedger

#if canImport(Glibc)
import Glibc
#endif

/// An executor that takes a little time, so that kills land inside attempts too.
struct SlowExecutor: ResidualTaskExecutor {
    func execute(_ task: ResidualTask) async throws {
        try await Task.sleep(for: .microseconds(Int.random(in: 0...1_500)))
    }
}

/// The `--sharing` mode of the crash child: see main.swift.
func runSharingChild(_ arguments: [String]) async {
    let (ledgerPath, ackFD, clients) = clientArguments(arguments, defaultClients: 8)
    let container = crashContainer
    var configuration = ShareLedger.Configuration(path: ledgerPath, durability: .durable)
    configuration.residualTaskWorker = ResidualTaskWorker.Configuration(batchSize: 64, leaseDuration: .milliseconds(500))
    do {
        // The executor is the slow one: run the worker ourselves, in process.
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        let worker = ResidualTaskWorker(
            ledger: ledger, configuration: ResidualTaskWorker.Configuration(batchSize: 64, leaseDuration: .milliseconds(500)),
            executor: SlowExecutor())
        let owner = ledger.container(container, userRecordName: "_owner")
        let zone = RecordZoneID(zoneName: "Board")
        if (try? await ledger.registerUser("_owner", in: container)) != nil {
            _ = try await owner.save(RecordZone(zoneID: zone))
        }
        let run = getpid()
        /// A new public share (a share holds at most 100 participants, so each client moves on to a
        /// fresh one every 90 accepts).
        @Sendable func newShare(_ name: String) async throws -> URL {
            _ = try await owner.save(Record(recordType: "Board", recordID: RecordID(recordName: name, zoneID: zone)))
            return try await owner.share(rootRecord: RecordID(recordName: name, zoneID: zone), publicPermission: .readOnly).url
        }
        FileHandle.standardOutput.write(Data("ready\n".utf8))
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await worker.run() }
            for client in 0..<clients {
                group.addTask {
                    var index = 0
                    var url: URL?
                    while true {
                        index += 1
                        let name = "_u\(run)_\(client)_\(index)"
                        do {
                            if index % 90 == 1 { url = try await newShare("board_\(run)_\(client)_\(index)") }
                            guard let url else { exit(72) }
                            try await ledger.registerUser(name, in: container)
                            let user = ledger.container(container, userRecordName: name)
                            _ = try await user.accept(try await user.shareMetadata(for: url))
                            acknowledge("\(name)\n", to: ackFD)
                        } catch {
                            fail("sharing child failed: \(error)", status: 71)
                        }
                    }
                }
            }
        }
    } catch {
        fail("sharing child failed: \(error)", status: 70)
    }
}
