import Foundation
import ShareLedger
import ShareLedgerAudit
import Synchronization
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What a full ledger does: the map reaches `maximumMapSize`, or the file system fills up (ENOSPC).
/// Either way a write fails with the typed `storageFull`, stores nothing, reads and audits keep
/// working, and writing resumes once there is room again (a larger maximum, a larger file system).
@Suite("Full storage")
struct StorageFullTests {
    static let container = "iCloud.com.example.full"
    static let zone = RecordZoneID(zoneName: "Notes")
    static func recordID(_ name: String) -> RecordID { RecordID(recordName: name, zoneID: zone) }

    static func configuration(_ path: String, maximum: Int?, worker: Bool = false, seed: UInt64 = 7) -> ShareLedger.Configuration {
        var configuration = ShareLedger.Configuration(
            path: path, durability: .unsafeNoSync, initialMapSize: 256 << 10, maximumMapSize: maximum)
        // A new seed per opening: the same seed would draw the same share tokens again.
        configuration.randomSource = SeededRandom(seed: seed)
        configuration.residualTaskWorker = worker ? ResidualTaskWorker.Configuration(pollInterval: .milliseconds(50)) : nil
        return configuration
    }

    /// Runs `body(0)`, `body(1)`, … until it throws; the error must be `storageFull` and the failed
    /// call must leave the head where it was. Returns how many calls succeeded first.
    static func untilFull(
        _ ledger: ShareLedger, _ what: String, limit: Int, _ body: (Int) async throws(LedgerError) -> Void
    ) async throws -> Int {
        for index in 0..<limit {
            let before = try ledger.log.head()
            do throws(LedgerError) {
                try await body(index)
            } catch {
                #expect(error.code == .storageFull, "\(what) #\(index) failed with \(error), not storageFull")
                #expect(try ledger.log.head() == before, "\(what) #\(index) failed but moved the head")
                return index
            }
        }
        Issue.record("\(what) never filled the ledger in \(limit) calls")
        return limit
    }

    @Test("past maximumMapSize every sharing call fails with storageFull, stores nothing, reads and audit work; a larger limit resumes")
    func mapLimit() async throws {
        let dir = TemporaryDirectory()
        let path = dir.child("ledger")
        let ledger = try ShareLedger.open(Self.configuration(path, maximum: 2 << 20))
        let alice = ledger.container(Self.container, userRecordName: "_alice")
        try await ledger.registerUser("_alice", in: Self.container)
        _ = try await alice.save(RecordZone(zoneID: Self.zone))
        for index in 0..<60 {
            _ = try await alice.save(Record(recordType: "Note", recordID: Self.recordID("root\(index)")))
        }
        let publicShares = [
            try await alice.share(rootRecord: Self.recordID("root0"), publicPermission: .readOnly),
            try await alice.share(rootRecord: Self.recordID("root1"), publicPermission: .readOnly),
        ]
        let privateShares = [
            try await alice.share(rootRecord: Self.recordID("root2")), try await alice.share(rootRecord: Self.recordID("root3")),
        ]
        for index in 0..<250 { try await ledger.registerUser("_u\(index)", in: Self.container) }
        // Metadata to accept later, fetched while there is room (a fetch is itself a write).
        var metadatas: [Share.Metadata] = []
        for index in 200..<250 {
            let user = ledger.container(Self.container, userRecordName: "_u\(index)")
            metadatas.append(try await user.shareMetadata(for: publicShares[index % 2].url))
        }

        // Fill the map with large records.
        let big = String(repeating: "x", count: 32 << 10)
        let bigRecords = try await Self.untilFull(ledger, "save(large record)", limit: 200) { index throws(LedgerError) in
            _ = try await alice.save(Record(recordType: "Note", recordID: Self.recordID("big\(index)"), fields: ["text": .string(big)]))
        }
        #expect(bigRecords > 10)

        // Then every kind of sharing call, each until it no longer fits.
        var succeeded: [String: Int] = [:]
        succeeded["registerUser"] = try await Self.untilFull(ledger, "registerUser", limit: 300) { index throws(LedgerError) in
            try await ledger.registerUser("_late\(index)", in: Self.container)
        }
        succeeded["save(record)"] = try await Self.untilFull(ledger, "save(record)", limit: 300) { index throws(LedgerError) in
            _ = try await alice.save(Record(recordType: "Note", recordID: Self.recordID("late\(index)")))
        }
        succeeded["share"] = try await Self.untilFull(ledger, "share(rootRecord:)", limit: 56) { index throws(LedgerError) in
            _ = try await alice.share(rootRecord: Self.recordID("root\(4 + index)"))
        }
        succeeded["addParticipant"] = try await Self.untilFull(ledger, "addParticipant", limit: 190) { index throws(LedgerError) in
            _ = try await alice.addParticipant(
                LookupInfo(userRecordID: RecordID(userRecordName: "_u\(index)")), permission: .readWrite,
                to: privateShares[index % 2].url)
        }
        succeeded["shareMetadata"] = try await Self.untilFull(ledger, "shareMetadata", limit: 300) { index throws(LedgerError) in
            _ = try await ledger.container(Self.container, userRecordName: "_u\(index % 190)").shareMetadata(for: publicShares[0].url)
        }
        succeeded["accept"] = try await Self.untilFull(ledger, "accept", limit: 45) { index throws(LedgerError) in
            _ = try await ledger.container(Self.container, userRecordName: "_u\(200 + index)").accept(metadatas[index])
        }
        let acceptedBefore = succeeded["accept"] ?? 0

        // A batch of several accepts is one command: all of it or none of it.
        let head = try ledger.log.head()
        let batch = Array(metadatas[45..<50])
        let batchUser = ledger.container(Self.container, userRecordName: "_u245")
        do throws(LedgerError) {
            _ = try await batchUser.accept(batch)
            // Each metadata is another user's: the batch decides per item (permission or success).
        } catch {
            #expect(error.code == .storageFull)
            #expect(try ledger.log.head() == head)
        }
        // Operations too.
        let operation = AcceptSharesOperation(shareMetadatas: [metadatas[46]])
        let outcome = OperationOutcome()
        operation.acceptSharesResultBlock = { outcome.set($0) }
        ledger.container(Self.container, userRecordName: "_u246").add(operation)
        await operation.waitUntilFinished()
        if case .failure(let error) = outcome.value {
            #expect(error.code == .storageFull || error.partialErrors.values.allSatisfy { $0.code == .storageFull }, "\(error)")
        }

        // Reads, queries and the audit still work, and the read models equal a rebuild.
        let report = try LedgerAudit(ledger).audit(scratchPath: dir.child("scratch"))
        #expect(report.ok, "\(report.problems)")
        #expect(report.projectionsMatch)
        #expect(try ledger.log.verifyChain().isValid)
        #expect(try alice.ownedShares().count == 4 + (succeeded["share"] ?? 0))
        #expect(try alice.record(for: Self.recordID("root0")).recordType == "Note")
        #expect(try ledger.container(Self.container, userRecordName: "_u200").participatingShares(status: [.accepted]).count
            == (acceptedBefore > 0 ? 1 : 0))
        #expect(try !LedgerAudit(ledger).history(of: .share(publicShares[0].url)).isEmpty)
        let statistics = try ledger.statistics()
        #expect(statistics.mapSizeBytes <= 2 << 20)
        // No worker ran: one pending task per accepted participant, none lost to the failures.
        #expect(statistics.pendingResidualTasks == Int(statistics.acceptedParticipants))
        #expect(statistics.acceptedParticipants >= UInt64(acceptedBefore))
        await ledger.close()

        // Reopened with a larger limit, the same calls go through, and the worker drains.
        let reopened = try ShareLedger.open(Self.configuration(path, maximum: 16 << 20, worker: true, seed: 8))
        let alice2 = reopened.container(Self.container, userRecordName: "_alice")
        try await reopened.registerUser("_after", in: Self.container)
        _ = try await alice2.save(Record(recordType: "Note", recordID: Self.recordID("after"), fields: ["text": .string(big)]))
        let late = try await alice2.share(rootRecord: Self.recordID("root59"))
        _ = try await alice2.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_after")), permission: .readOnly, to: late.url)
        let after = reopened.container(Self.container, userRecordName: "_after")
        _ = try await after.accept(try await after.shareMetadata(for: late.url))
        _ = try await reopened.container(Self.container, userRecordName: "_u249").accept(metadatas[49])
        try await reopened.waitForResidualTasks(timeout: .seconds(120))
        let final = try reopened.statistics()
        #expect(final.pendingResidualTasks == 0)
        #expect(final.participantZones == final.acceptedParticipants)
        #expect(try after.sharedDatabaseZones() == [RecordZoneID(zoneName: "Notes", ownerName: "_alice")])
        let finalReport = try LedgerAudit(reopened).audit(scratchPath: dir.child("scratch"))
        #expect(finalReport.ok, "\(finalReport.problems)")
        await reopened.close()
    }

    @Test(
        "a full file system (ENOSPC on a small tmpfs) gives storageFull; nothing acknowledged is lost; a larger file system resumes",
        .enabled("needs root and mount -t tmpfs (not available in this sandbox)") { await Tmpfs.isAvailable() },
        .timeLimit(.minutes(5)))
    func fileSystemFull() async throws {
        let dir = TemporaryDirectory()
        let mountPoint = dir.makeChild("fs")
        try await Tmpfs.mount(at: mountPoint, size: "1m")
        // Unmounted when done, whatever happened (a defer cannot await).
        try await withCleanup {
            let path = mountPoint + "/ledger"
            // No maximum map size: the map (64 MiB) is far larger than the file system, so it is the
            // disk that fills up, not the map. A worker runs meanwhile (its own task, so that it can be
            // stopped before the audit: an audit of a ledger that is being written can see changes
            // between its read transactions, and with the disk full the worker keeps retrying).
            var configuration = ShareLedger.Configuration(path: path, durability: .durable)
            configuration.residualTaskWorker = nil
            let ledger = try ShareLedger.open(configuration)
            let worker = ResidualTaskWorker(ledger: ledger, configuration: ResidualTaskWorker.Configuration(pollInterval: .milliseconds(50)))
            let working = Task { try await worker.run() }
            let owner = ledger.container(Self.container, userRecordName: "_owner")
            try await ledger.registerUser("_owner", in: Self.container)
            _ = try await owner.save(RecordZone(zoneID: Self.zone))

            // Four clients run the sharing mix until the disk is full; each remembers what was acknowledged.
            let text = String(repeating: "y", count: 3_000)
            let results = await withTaskGroup(of: ([String], [URL], LedgerError?).self) { group in
                for client in 0..<4 {
                    group.addTask {
                        var users: [String] = []
                        var shares: [URL] = []
                        for round in 0..<2_000 {
                            let name = "_c\(client)_\(round)"
                            do throws(LedgerError) {
                                let recordID = Self.recordID("r\(client)_\(round)")
                                _ = try await owner.save(Record(recordType: "Note", recordID: recordID, fields: ["text": .string(text)]))
                                let share = try await owner.share(rootRecord: recordID, publicPermission: .readOnly)
                                shares.append(share.url)
                                try await ledger.registerUser(name, in: Self.container)
                                let user = ledger.container(Self.container, userRecordName: name)
                                _ = try await user.accept(try await user.shareMetadata(for: share.url))
                                users.append(name)
                            } catch {
                                return (users, shares, error)
                            }
                        }
                        return (users, shares, nil)
                    }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            for (_, _, error) in results {
                let error = try #require(error, "a client never met a full disk")
                #expect(error.code == .storageFull, "\(error)")
                #expect(error.message.contains("disk is full"), "\(error.message)")
            }
            let accepted = results.flatMap(\.0)
            let shared = results.flatMap(\.1)
            #expect(accepted.count > 10)

            // Still readable: every acknowledged share and accept is there; the chain and read models hold.
            #expect(try ledger.log.verifyChain().isValid)
            let owned = Set(try owner.ownedShares().map(\.url))
            #expect(shared.allSatisfy { owned.contains($0) })
            for name in accepted {
                #expect(try ledger.container(Self.container, userRecordName: name).participatingShares(status: [.accepted]).count == 1)
            }
            working.cancel()
            try? await working.value
            let report = try LedgerAudit(ledger).audit(scratchPath: dir.child("scratch"))
            #expect(report.ok, "\(report.problems)")
            await ledger.close()

            // More room: the ledger takes writes again and the (in-process) worker completes every zone.
            try await Tmpfs.remount(mountPoint, size: "16m")
            configuration.residualTaskWorker = ResidualTaskWorker.Configuration(pollInterval: .milliseconds(50))
            let reopened = try ShareLedger.open(configuration)
            let owner2 = reopened.container(Self.container, userRecordName: "_owner")
            _ = try await owner2.save(Record(recordType: "Note", recordID: Self.recordID("after")))
            try await reopened.registerUser("_after", in: Self.container)
            let share = try await owner2.share(rootRecord: Self.recordID("after"), publicPermission: .readOnly)
            let after = reopened.container(Self.container, userRecordName: "_after")
            _ = try await after.accept(try await after.shareMetadata(for: share.url))
            try await reopened.waitForResidualTasks(timeout: .seconds(120))
            let statistics = try reopened.statistics()
            #expect(statistics.pendingResidualTasks == 0)
            #expect(statistics.parkedResidualTasks == 0)
            #expect(statistics.participantZones == statistics.acceptedParticipants)
            let finalReport = try LedgerAudit(reopened).audit(scratchPath: dir.child("scratch"))
            #expect(finalReport.ok, "\(finalReport.problems)")
            await reopened.close()
        } cleanup: {
            await Tmpfs.unmount(mountPoint)
        }
    }

    /// Fills the file system holding `directory` with a file there, until a write finds no room.
    static func fill(_ directory: String) throws -> String {
        let filler = directory + "/filler"
        #expect(FileManager.default.createFile(atPath: filler, contents: nil))
        let fd = open(filler, O_WRONLY)
        #expect(fd >= 0)
        defer { close(fd) }
        let chunk = [UInt8](repeating: 0x5A, count: 16 << 10)
        while chunk.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) > 0 {}
        // Then byte by byte, for the last partial block.
        var byte: UInt8 = 0x5A
        while write(fd, &byte, 1) == 1 {}
        return filler
    }

    @Test(
        "a ledger without lock.mdb (a restored backup) on a full file system: reading commands and a write exit 1 with storageFull, never 2 'damaged'; with room again they succeed",
        .enabled("needs root and mount -t tmpfs (not available in this sandbox)") { await Tmpfs.isAvailable() },
        .timeLimit(.minutes(5)))
    func fullDiskWithoutLockFile() async throws {
        let dir = TemporaryDirectory()
        let source = dir.child("source")
        var configuration = ShareLedger.Configuration(path: source, durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        try await ledger.registerUser("_alice", in: Self.container, emailAddress: "alice@example.com")
        let alice = ledger.container(Self.container, userRecordName: "_alice")
        _ = try await alice.save(RecordZone(zoneID: Self.zone))
        for index in 0..<20 { _ = try await alice.save(Record(recordType: "Note", recordID: Self.recordID("r\(index)"))) }
        _ = try await alice.share(rootRecord: Self.recordID("r0"), title: "Plans")
        await ledger.close()

        let mountPoint = dir.makeChild("fs")
        try await Tmpfs.mount(at: mountPoint, size: "8m")
        try await withCleanup {
            // The backup: every file but the lock files.
            let path = mountPoint + "/ledger"
            for name in try #require(FileManager.default.subpaths(atPath: source)).sorted() where !name.hasSuffix("lock.mdb") {
                var isDirectory: ObjCBool = false
                _ = FileManager.default.fileExists(atPath: source + "/" + name, isDirectory: &isDirectory)
                if isDirectory.boolValue { continue }
                let target = path + "/" + name
                try FileManager.default.createDirectory(
                    atPath: (target as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                try FileManager.default.copyItem(atPath: source + "/" + name, toPath: target)
            }
            let filler = try Self.fill(mountPoint)
            let reading = [
                ["stats", "--path", path], ["verify", "--path", path], ["audit", "--path", path],
                ["history", "--path", path, "--container", Self.container], ["export", "--path", path],
            ]
            let writing = [["zone", "create", "More", "--path", path, "--as", "_alice", "--container", Self.container]]
            for command in reading + writing {
                let run = try await runCLI(command)
                #expect(run.exited(1), "\(command): \(run.summary)")
                #expect(run.stderr.contains("storageFull") && run.stderr.contains("free space"), "\(command): \(run.summary)")
                #expect(!run.stderr.contains("is damaged") && !run.stderr.contains("from a backup"), "\(command): \(run.summary)")
            }
            let json = try await runCLI(["stats", "--path", path, "--json"])
            #expect(json.exited(1))
            #expect((jsonObject(json.stdout)?["error"] as? [String: Any])?["name"] as? String == "storageFull", "\(json.summary)")

            try FileManager.default.removeItem(atPath: filler)
            for command in reading + writing {
                let run = try await runCLI(command)
                #expect(run.exited(0), "\(command) with room again: \(run.summary)")
            }
        } cleanup: {
            await Tmpfs.unmount(mountPoint)
        }
    }
}


/// The overall result of an operation, set from its completion block.
final class OperationOutcome: Sendable {
    private let box = Mutex<Result<Void, LedgerError>?>(nil)
    func set(_ result: Result<Void, LedgerError>) { box.withLock { $0 = result } }
    var value: Result<Void, LedgerError>? { box.withLock { $0 } }
}

/// Mounting a small tmpfs (needs root and a kernel that lets this process mount).
enum Tmpfs {
    struct Failure: Error, CustomStringConvertible { var description: String }

    /// Whether `mount -t tmpfs` works here: probed with a real mount.
    static func isAvailable() async -> Bool {
        guard getuid() == 0 else { return false }
        let probe = TemporaryDirectory("tmpfs-probe")
        guard (try? await mount(at: probe.path, size: "64k")) != nil else { return false }
        await unmount(probe.path)
        return true
    }

    static func mount(at path: String, size: String) async throws {
        try await run(["-t", "tmpfs", "-o", "size=\(size)", "tmpfs", path])
    }

    static func remount(_ path: String, size: String) async throws {
        try await run(["-o", "remount,size=\(size)", path])
    }

    static func unmount(_ path: String) async {
        _ = try? await runProcess(URL(fileURLWithPath: "/bin/umount"), [path])
    }

    private static func run(_ arguments: [String]) async throws {
        let run = try await runProcess(URL(fileURLWithPath: "/bin/mount"), arguments)
        guard run.exited(0) else {
            throw Failure(description: "mount \(arguments.joined(separator: " ")) exited with \(run.status)")
        }
    }
}
