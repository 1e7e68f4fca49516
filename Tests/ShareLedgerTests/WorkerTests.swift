import ByteKeys
import Foundation
import LMDB
import ServiceLifecycle
import ServiceLifecycleTestKit
@testable import ShareLedger
@testable import ShareLedgerAudit
import SwiftProtobuf
import Synchronization
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A clock the test moves by hand.
final class ManualClock: LedgerClock {
    private let now: Mutex<Int64>
    init(_ start: Int64 = 1_700_000_000_000_000) { now = Mutex(start) }
    func nowMicros() -> Int64 { now.withLock { $0 } }
    func advance(by duration: Duration) { now.withLock { $0 += duration.microseconds } }
}

/// An executor that fails on demand.
final class FlakyExecutor: ResidualTaskExecutor {
    private let failuresLeft: Mutex<Int>
    let attempts = Counter()
    init(failures: Int) { failuresLeft = Mutex(failures) }
    func setFailures(_ n: Int) { failuresLeft.withLock { $0 = n } }
    func execute(_ task: ResidualTask) async throws {
        attempts.increment()
        let fail = failuresLeft.withLock { left -> Bool in
            guard left > 0 else { return false }
            left -= 1
            return true
        }
        if fail { throw LedgerError(.storageFailure, "the zone service is down (test)") }
    }
}

extension SharingFixture {
    /// Bob invited to Alice's hierarchy and accepted.
    func bobAccepts(_ share: Share) async throws {
        _ = try await alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly, to: share.url)
        _ = try await bob.accept(try await bob.shareMetadata(for: share.url))
    }

    var bobID: String {
        get throws { try #require(try alice.share(for: try alice.ownedShares()[0].url).participants.first { $0.userIdentity.userRecordID?.recordName == "_bob" }?.participantID) }
    }
}

@Suite("Residual-task worker")
struct WorkerTests {
    @Test("happy path: the in-process worker creates the zone soon after the accept, woken by the commit")
    func happyPath() async throws {
        // The worker's timers (the poll, and the lease renewal at a third of the lease) are an hour
        // away, so the only thing that can run the task inside the wait below is the commit's wake-up.
        // No elapsed time is measured: the outcome does not depend on how busy the machine is.
        let f = try await SharingFixture(
            worker: ResidualTaskWorker.Configuration(leaseDuration: .seconds(3 * 3600), pollInterval: .seconds(3600)))
        let share = try await f.makeHierarchy()
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly, to: share.url)
        let metadata = try await f.bob.shareMetadata(for: share.url)
        // Wait (by state, not by time) until the worker has finished its passes and sleeps on the
        // head as it is now: from here the accept's commit is the only thing that can wake it.
        let worker = try #require(f.ledger.inProcessWorker)
        let head = f.ledger.log.writer.notifier.currentHead
        let idle = ContinuousClock.now + .seconds(60)
        while worker.idleAfterHead.withLock({ $0 }) != head {
            guard ContinuousClock.now < idle else { Issue.record("the worker never went idle"); return }
            try await Task.sleep(for: .milliseconds(1))
        }
        _ = try await f.bob.accept(metadata)
        try await f.ledger.waitForResidualTasks(timeout: .seconds(120))
        #expect(try f.bob.sharedDatabaseZones() == [RecordZoneID(zoneName: "Notes", ownerName: "_alice")])
        let stats = try f.ledger.statistics()
        #expect(stats.pendingResidualTasks == 0)
        #expect(stats.participantZones == stats.acceptedParticipants)
        await f.ledger.close()
    }

    @Test("more tasks than one read chunk (1,024): listed in order across chunks, all due, all completed")
    func moreThanOneChunk() async throws {
        let f = try await SharingFixture()
        _ = try await f.alice.save(RecordZone(zoneID: SharingFixture.zone))
        var urls: [URL] = []
        for index in 0..<12 {
            let root = SharingFixture.recordID("board\(index)")
            _ = try await f.alice.save(Record(recordType: "Board", recordID: root))
            urls.append(try await f.alice.share(rootRecord: root, publicPermission: .readOnly).url)
        }
        let total = 1_100
        let ledger = f.ledger
        let shareURLs = urls
        try await withThrowingTaskGroup(of: Void.self) { group in
            for slice in 0..<8 {
                group.addTask {
                    for index in stride(from: slice, to: total, by: 8) {
                        let name = "_u\(index)"
                        try await ledger.registerUser(name, in: SharingFixture.container)
                        let user = ledger.container(SharingFixture.container, userRecordName: name)
                        _ = try await user.accept(try await user.shareMetadata(for: shareURLs[index / 95]))
                    }
                }
            }
            try await group.waitForAll()
        }
        let tasks = try f.ledger.residualTasks()
        #expect(tasks.count == total)
        #expect(tasks.map(\.id) == tasks.map(\.id).sorted())
        #expect(Set(tasks.map(\.id)).count == total)
        let due = try ResidualTaskWorker(ledger: f.ledger).dueTasks(now: .max, limit: .max)
        #expect(due.due.count == total)
        #expect(try f.ledger.hasDueResidualTasks())
        #expect(try await f.ledger.completeResidualTasks() == total)
        let stats = try f.ledger.statistics()
        #expect(stats.pendingResidualTasks == 0 && stats.participantZones == total)
        #expect(try f.ledger.residualTasks().isEmpty)
        await f.ledger.close()
    }

    @Test("accept → remove → accept again for one participant ends with the zone, each task in order")
    func ordering() async throws {
        let (f, share) = try await SharingFixture.withShare()
        try await f.bobAccepts(share)
        _ = try await f.alice.removeParticipant(try f.bobID, from: share.url)
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly, to: share.url)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        let tasks = try f.ledger.residualTasks()
        #expect(tasks.map(\.kind) == [.createZone, .removeZone, .createZone])
        #expect(try await f.ledger.completeResidualTasks() == 3)
        #expect(try f.bob.sharedDatabaseZones().count == 1)
        // Removed for good: the zone goes.
        _ = try await f.alice.removeParticipant(try f.bobID, from: share.url)
        #expect(try await f.ledger.completeResidualTasks() == 1)
        #expect(try f.bob.sharedDatabaseZones().isEmpty)
        #expect(try LedgerAudit(f.ledger).verifyReadModels(scratchPath: f.dir.child("rebuilt")).matches)
        await f.ledger.close()
    }

    @Test("removed from one of two accepted shares in the same zone: the zone is kept; removed from the other too: it goes; the rebuild's rules agree")
    func zoneKeptByAnotherShare() async throws {
        let (f, first) = try await SharingFixture.withShare()
        try await f.bobAccepts(first)
        _ = try await f.alice.save(Record(recordType: "List", recordID: SharingFixture.recordID("second")))
        let second = try await f.alice.share(rootRecord: SharingFixture.recordID("second"), title: "Second")
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly, to: second.url)
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: second.url))
        #expect(try await f.ledger.completeResidualTasks() == 2)
        #expect(try f.bob.sharedDatabaseZones().count == 1)
        func bobsID(in share: Share) throws -> String {
            try #require(try f.alice.share(for: share.url).participants.first { $0.userIdentity.userRecordID?.recordName == "_bob" }?.participantID)
        }
        _ = try await f.alice.removeParticipant(try bobsID(in: first), from: first.url)
        #expect(try await f.ledger.completeResidualTasks() == 1)
        #expect(try f.bob.sharedDatabaseZones().count == 1, "the second share keeps the zone")
        _ = try await f.alice.removeParticipant(try bobsID(in: second), from: second.url)
        #expect(try await f.ledger.completeResidualTasks() == 1)
        #expect(try f.bob.sharedDatabaseZones().isEmpty)
        #expect(try LedgerAudit(f.ledger).verifyReadModels(scratchPath: f.dir.child("rebuilt")).matches)
        await f.ledger.close()
    }

    @Test("a later task of the same participant and zone waits behind a failing earlier one")
    func orderKeptBehindFailure() async throws {
        let clock = ManualClock()
        let f = try await SharingFixture(clock: clock)
        let share = try await f.makeHierarchy()
        try await f.bobAccepts(share)
        _ = try await f.alice.removeParticipant(try f.bobID, from: share.url)
        let executor = FlakyExecutor(failures: 1)
        let worker = ResidualTaskWorker(ledger: f.ledger, executor: executor)
        let first = try await worker.runPass(limit: 10)
        // Only the create ran (and failed); the remove waits behind it.
        #expect(first.failed == 1 && first.completed == 0)
        #expect(executor.attempts.value == 1)
        clock.advance(by: .seconds(1))
        // One task per participant and zone per pass: the create, then the remove.
        #expect(try await worker.runPass(limit: 10).completed == 1)
        #expect(try f.bob.sharedDatabaseZones().count == 1)
        #expect(try await worker.drain() == 1)
        #expect(try f.bob.sharedDatabaseZones().isEmpty)
        await f.ledger.close()
    }

    @Test("failed attempts retry with exponential backoff on a virtual clock, then park; a parked task can be retried")
    func retriesAndParking() async throws {
        let clock = ManualClock()
        let f = try await SharingFixture(clock: clock)
        let share = try await f.makeHierarchy()
        try await f.bobAccepts(share)
        let executor = FlakyExecutor(failures: 100)
        let worker = ResidualTaskWorker(
            ledger: f.ledger,
            configuration: ResidualTaskWorker.Configuration(maxAttempts: 3, initialBackoff: .milliseconds(100), maxBackoff: .seconds(10)),
            executor: executor)

        var report = try await worker.runPass(limit: 10)
        #expect(report.failed == 1)
        var task = try #require(try f.ledger.residualTasks().first)
        #expect(task.attempts == 1)
        #expect(task.lastError?.contains("zone service is down") == true)
        // Backoff 100 ms × jitter [0.5, 1): not due at once, due after 100 ms.
        let firstDelay = task.dueAt.timeIntervalSince(Presenter.date(clock.nowMicros()))
        #expect(firstDelay >= 0.05 && firstDelay < 0.1)
        report = try await worker.runPass(limit: 10)
        #expect(report.failed == 0 && report.completed == 0)
        #expect(report.nextDueAt == task.dueAt)

        clock.advance(by: .milliseconds(100))
        report = try await worker.runPass(limit: 10)
        #expect(report.failed == 1)
        task = try #require(try f.ledger.residualTasks().first)
        let secondDelay = task.dueAt.timeIntervalSince(Presenter.date(clock.nowMicros()))
        #expect(secondDelay >= 0.1 && secondDelay < 0.2)

        clock.advance(by: .milliseconds(200))
        report = try await worker.runPass(limit: 10)
        #expect(report.parked == 1)
        let parked = try f.ledger.residualTasks(parkedOnly: true)
        #expect(parked.count == 1)
        #expect(parked[0].attempts == 3)
        #expect(try f.ledger.statistics().parkedResidualTasks == 1)
        // Parked: never due, whatever the time.
        clock.advance(by: .seconds(3600))
        report = try await worker.runPass(limit: 10)
        #expect(report.failed == 0 && report.completed == 0 && report.nextDueAt == nil)
        #expect(executor.attempts.value == 3)

        // An operator retries it; the zone service is back.
        executor.setFailures(0)
        #expect(await errorCode { try await f.ledger.retryParkedTasks(ids: [42]) } == .unknownItem)
        #expect(try await f.ledger.retryParkedTasks() == 1)
        report = try await worker.runPass(limit: 10)
        #expect(report.completed == 1)
        #expect(try f.ledger.residualTasks().isEmpty)
        #expect(try f.bob.sharedDatabaseZones().count == 1)
        #expect(try LedgerAudit(f.ledger).verifyReadModels(scratchPath: f.dir.child("rebuilt")).matches)
        await f.ledger.close()
    }

    @Test("a task scheduled while the worker holds its lease runs at once; a failed first attempt is recorded")
    func freshTaskFirstAttempt() async throws {
        let f = try await SharingFixture(clock: ManualClock())
        let share = try await f.makeHierarchy()
        let executor = FlakyExecutor(failures: 1)
        let worker = ResidualTaskWorker(ledger: f.ledger, configuration: ResidualTaskWorker.Configuration(maxAttempts: 2), executor: executor)
        #expect(try await worker.runPass(limit: 10).holdsLease)
        try await f.bobAccepts(share)
        let first = try await worker.runPass(limit: 10)
        #expect(first.failed == 1)
        let task = try #require(try f.ledger.residualTasks().first)
        #expect(task.attempts == 1)
        #expect(task.lastError?.contains("zone service is down") == true)
        await f.ledger.close()
    }

    @Test("an attempt that never finished (a crash) counts: a poison task parks instead of looping")
    func crashCountsAsAttempt() async throws {
        let (f, share) = try await SharingFixture.withShare()
        try await f.bobAccepts(share)
        let worker = ResidualTaskWorker(ledger: f.ledger, configuration: ResidualTaskWorker.Configuration(maxAttempts: 2))
        let task = try #require(try f.ledger.residualTasks().first)
        // Two attempts recorded as started that never reported back, as after two crashes.
        for _ in 0..<2 {
            _ = try await f.ledger.maintain { [models = f.ledger.models] txn in
                var state = try models.message(WorkerTaskState.self, txn, models.workerTasks, BigEndian.bytes(of: task.id)) ?? WorkerTaskState()
                state.attempts += 1
                try models.put(txn, models.workerTasks, BigEndian.bytes(of: task.id), state)
                return 1
            }
        }
        let report = try await worker.runPass(limit: 10)
        #expect(report.parked == 1)
        #expect(report.completed == 0)
        #expect(try f.ledger.residualTasks(parkedOnly: true).first?.lastError?.contains("crash") == true)
        await f.ledger.close()
    }

    @Test("graceful shutdown stops the worker service; it releases its lease")
    func gracefulShutdown() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let worker = ResidualTaskWorker(ledger: f.ledger, configuration: ResidualTaskWorker.Configuration(pollInterval: .seconds(30)))
        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await worker.run() }
                try await f.bobAccepts(share)
                try await f.ledger.waitForResidualTasks(timeout: .seconds(120))
                trigger.triggerGracefulShutdown()
                try await group.waitForAll()
            }
        }
        #expect(try f.bob.sharedDatabaseZones().count == 1)
        // The lease is free: another worker takes tasks at once.
        let other = ResidualTaskWorker(ledger: f.ledger)
        #expect(try await other.runPass(limit: 1).holdsLease)
        await f.ledger.close()
    }

    @Test("two workers on one ledger: one works; the other takes over when the first stops")
    func twoWorkers() async throws {
        let (f, share) = try await SharingFixture.withShare()
        // A lease far longer than the test: a stall of the first worker on a busy machine must not let
        // the second take over by expiry. The hand-over below is by release, on the first's way out.
        let config = ResidualTaskWorker.Configuration(leaseDuration: .seconds(120), pollInterval: .milliseconds(20))
        let firstExecutor = FlakyExecutor(failures: 0)
        let secondExecutor = FlakyExecutor(failures: 0)
        let first = ResidualTaskWorker(ledger: f.ledger, configuration: config, executor: firstExecutor)
        let second = ResidualTaskWorker(ledger: f.ledger, configuration: config, executor: secondExecutor)
        #expect(try await first.runPass(limit: 1).holdsLease)
        #expect(try await second.runPass(limit: 1).holdsLease == false)

        func waitUntilNoTasks() async throws {
            let deadline = ContinuousClock.now + .seconds(60)
            while try !f.ledger.residualTasks().isEmpty {
                guard ContinuousClock.now < deadline else { throw LedgerError(.timedOut, "tasks left") }
                try await Task.sleep(for: .milliseconds(5))
            }
        }
        let firstRun = Task { try await first.run() }
        let secondRun = Task { try await second.run() }
        try await f.bobAccepts(share)
        try await waitUntilNoTasks()
        #expect(firstExecutor.attempts.value == 1)
        #expect(secondExecutor.attempts.value == 0)
        firstRun.cancel()
        try await firstRun.value
        // The first released its lease on the way out; the second does the next task.
        _ = try await f.alice.removeParticipant(try f.bobID, from: share.url)
        try await waitUntilNoTasks()
        #expect(try f.bob.sharedDatabaseZones().isEmpty)
        #expect(firstExecutor.attempts.value == 1)
        #expect(secondExecutor.attempts.value == 1)
        secondRun.cancel()
        try await secondRun.value
        await f.ledger.close()
    }

    @Test("SIGKILL between accepts and their zones: after a restart every task completes exactly once", .timeLimit(.minutes(5)))
    func killedBetweenAcceptAndZone() async throws {
        let dir = TemporaryDirectory()
        let ledgerPath = dir.child("ledger")
        let acks = dir.child("acks")
        var random = SplitMix64(state: 0xACCE97)
        for _ in 0..<3 {
            let child = try await startCrashChild(["--sharing", ledgerPath, acks, "6"], in: dir)
            // The kill lands at a seeded moment of the run: the one sleep that is the point of the test.
            try await Task.sleep(for: .milliseconds(Int.random(in: 150...400, using: &random)))
            child.send(SIGKILL)
            let ended = await child.exit()
            #expect(ended.signaled, "\(ended.summary)")
        }
        let accepted = try String(contentsOfFile: acks, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(accepted.count > 10, "the child acknowledged \(accepted.count) accepts")

        var configuration = ShareLedger.Configuration(path: ledgerPath, createIfMissing: false, durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        #expect(try ledger.log.verifyChain().isValid)
        // The killed worker's lease (500 ms) must expire before another worker may take its tasks.
        try await ledger.waitForResidualTasks(timeout: .seconds(120))
        let stats = try ledger.statistics()
        #expect(stats.pendingResidualTasks == 0)
        #expect(stats.participantZones == stats.acceptedParticipants)
        #expect(stats.acceptedParticipants >= UInt64(accepted.count))
        for name in accepted {
            let user = ledger.container("iCloud.com.example.crash", userRecordName: name)
            #expect(try user.participatingShares(status: [.accepted]).count == 1, "\(name) acknowledged an accept")
            #expect(try user.sharedDatabaseZones().count == 1)
        }
        // Exactly once: one completion event per task.
        var completions: [UInt64: Int] = [:]
        var after = LogPosition.start
        while true {
            let chunk = try ledger.log.events(after: after, limit: 4096)
            guard let last = chunk.last else { break }
            for event in chunk where event.eventType == "shareledger.events.v1.ParticipantZoneCreated" {
                let payload = try Shareledger_Events_V1_ParticipantZoneCreated(serializedBytes: event.payload)
                completions[payload.taskID, default: 0] += 1
            }
            after = last.position
        }
        #expect(completions.values.allSatisfy { $0 == 1 })
        #expect(UInt64(completions.count) == stats.acceptedParticipants)
        #expect(try LedgerAudit(ledger).verifyReadModels(scratchPath: dir.child("rebuilt")).matches)
        await ledger.close()
    }
}
