import Foundation
import Logging
import ShareLedger
import TestSupport

/// A 3-node JetStream cluster on loopback, started with `scripts/cluster start DIR` in the test's
/// temporary directory and stopped by PID (`scripts/cluster stop DIR`) when the test is done.
final class Cluster: Sendable {
    /// Whether nats-server is installed (the replication tests are skipped without it).
    static let isAvailable: Bool = ["/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"]
        .contains { FileManager.default.isExecutableFile(atPath: $0) }

    static let skipMessage = "nats-server is not installed (scripts/setup installs it); the replication tests are skipped"

    let directory: TemporaryDirectory
    let path: String
    let servers: [String]

    init(_ label: String = #function) async throws {
        directory = TemporaryDirectory(label)
        path = directory.child("cluster")
        try await Cluster.script(["start", path])
        servers = try String(contentsOfFile: "\(path)/urls", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ",").map(String.init)
    }

    deinit {
        // A deinit cannot await: the stop (kills by PID, quick) is the one wait left on the caller's
        // thread. It must end before the directory with the PID files goes.
        if let stop = try? Spawned(packageRoot.appendingPathComponent("scripts/cluster").path, ["stop", path]) {
            _ = stop.wait()
        }
    }

    /// The PID of node `n` (1 to 3).
    func pid(_ n: Int) -> pid_t? {
        (try? String(contentsOfFile: "\(path)/n\(n).pid", encoding: .utf8)).flatMap {
            pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines))
        }
    }

    /// kill -9 node `n`, by its PID.
    func kill9(_ n: Int) {
        if let pid = pid(n) {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            _ = waitpid(pid, &status, WNOHANG)
        }
    }

    /// Starts node `n` again with its data.
    func start(_ n: Int) async throws { try await Cluster.script(["start-node", String(n), path]) }

    /// Node number of a server name (`n1` → 1).
    static func node(named name: String) -> Int? { name.hasPrefix("n") ? Int(name.dropFirst()) : nil }

    /// Runs scripts/cluster. Its output goes nowhere (the URLs are in DIR/urls): a pipe would stay
    /// open in the nats-server processes it starts, and reading it to its end would never end.
    static func script(_ arguments: [String]) async throws {
        let run = try await runProcess(packageRoot.appendingPathComponent("scripts/cluster"), arguments)
        guard run.exited(0) else {
            throw ClusterError(text: "scripts/cluster \(arguments.joined(separator: " ")) exited \(run.status)")
        }
    }
}

struct ClusterError: Error, CustomStringConvertible {
    var text: String
    var description: String { text }
}

/// Ledgers for the tests.
enum Ledgers {
    static let container = "iCloud.com.example.replication"

    static func open(_ path: String, worker: Bool = false) throws -> ShareLedger {
        var configuration = ShareLedger.Configuration(path: path, durability: .unsafeNoSync)
        configuration.residualTaskWorker = worker ? ResidualTaskWorker.Configuration() : nil
        return try ShareLedger.open(configuration)
    }

    /// Some sharing: `shares` owners each share a zone with a new participant, who accepts (one
    /// residual task each, left pending without a worker), plus a raw append each. Returns the
    /// shares' URLs.
    @discardableResult
    static func share(_ ledger: ShareLedger, round: Int, shares: Int = 3) async throws -> [URL] {
        var urls: [URL] = []
        for index in 0..<shares {
            let owner = "_o\(round)x\(index)"
            let guest = "_g\(round)x\(index)"
            try await ledger.registerUser(owner, in: container, emailAddress: "\(owner.dropFirst())@example.com")
            try await ledger.registerUser(guest, in: container, emailAddress: "\(guest.dropFirst())@example.com")
            let alice = ledger.container(container, userRecordName: owner)
            let bob = ledger.container(container, userRecordName: guest)
            let zone = RecordZoneID(zoneName: "Z\(round)x\(index)")
            _ = try await alice.save(RecordZone(zoneID: zone))
            let share = try await alice.share(recordZoneID: zone, title: "Zone \(round)-\(index)")
            _ = try await alice.addParticipant(
                LookupInfo(emailAddress: "\(guest.dropFirst())@example.com"), permission: .readWrite, to: share.url)
            let metadata = try await bob.shareMetadata(for: share.url)
            _ = try await bob.accept(metadata)
            try await ledger.log.append(
                [EventDraft(type: "example.Note", payload: Array("note \(round) \(index)".utf8))], to: "notes/\(round)",
                metadata: CommandMetadata(container: container, actor: owner))
            urls.append(share.url)
        }
        return urls
    }

    /// Raw appends of `count` one-event commands.
    static func append(_ log: EventLog, count: Int, stream: String = "load") async throws {
        for index in 0..<count {
            try await log.append(
                [EventDraft(type: "example.Load", payload: Array("event \(index)".utf8))], to: stream,
                metadata: CommandMetadata(container: container, actor: "_loader"))
        }
    }

    /// The wait for one NATS call in the tests: generous (a safety net), for a loaded machine.
    static let callTimeout: Duration = .seconds(20)

    static func logger(_ label: String) -> Logger {
        var logger = Logger(label: label)
        logger.logLevel = .critical
        return logger
    }
}
