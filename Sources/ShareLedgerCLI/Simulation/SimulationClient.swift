import Foundation
import Logging
import ShareLedger
import Synchronization

/// Actions done so far by all clients, for the progress line.
final class SimulationProgress: Sendable {
    private let done = Mutex(0)

    /// Counts one action.
    func add() { done.withLock { $0 += 1 } }

    /// Actions done so far.
    var value: Int { done.withLock { $0 } }

    private let stopReason = Mutex<String?>(nil)

    /// Stops every client at its next call (the first reason is kept).
    func stop(_ reason: String) { stopReason.withLock { if $0 == nil { $0 = reason } } }

    /// Why the run stopped early, if it did.
    var stopped: String? { stopReason.withLock { $0 } }
}

/// A thread-safe box for what an operation's blocks report.
final class Collected<Value: Sendable>: Sendable {
    private let value: Mutex<Value>
    /// A box holding `initial`.
    init(_ initial: Value) { value = Mutex(initial) }
    /// Changes the value under the lock.
    func update(_ change: (inout Value) -> Void) { value.withLock { change(&$0) } }
    /// The value now.
    var current: Value { value.withLock { $0 } }
}

/// One simulated client: a task acting for the users of its own partition, one call at a time, each
/// with an intended outcome that its ``PartitionModel`` predicts.
struct SimulationClient {
    /// The client's number (its partition, its seed, its container).
    let index: Int
    /// The ledger all clients share.
    let ledger: ShareLedger
    /// Where every client counts its actions.
    let progress: SimulationProgress
    /// The container the partition lives in, and another one some of its users also belong to.
    let home: String
    /// A second container some of the partition's users also belong to.
    let other: String
    /// A prefix that makes this run's names unique in the ledger.
    let tag: String
    /// Users in the partition.
    let userCount: Int
    private(set) var remaining: Int
    /// The source of every choice of this client.
    var rng: SeededGenerator
    /// What the client expects the ledger to hold for its partition.
    var model = PartitionModel()
    /// What happened so far.
    var tally = SimulationTally()
    /// Calls in a row that failed with `storageFull`.
    private var storageFullRun = 0
    /// After this many calls in a row fail with `storageFull`, the run stops.
    static let storageFullRunLimit = 20
    /// Users registered (in either container).
    var registrations = 0

    /// A client for partition `index`, with its share of the users and of the actions.
    init(
        index: Int, ledger: ShareLedger, progress: SimulationProgress, containers: [String], tag: String, users: Int,
        actions: Int, seed: UInt64
    ) {
        self.index = index
        self.ledger = ledger
        self.progress = progress
        home = containers[index % containers.count]
        other = containers[(index + 1) % containers.count]
        self.tag = tag
        userCount = users
        remaining = actions
        // Each client's sequence depends on the seed and its index only, never on timing.
        var mixer = SeededGenerator(seed: seed ^ (UInt64(index + 1) &* 0xD1B5_4A32_D192_ED03))
        rng = SeededGenerator(seed: mixer.next())
    }

    // MARK: - Running

    /// Registers the partition's users, then runs scenarios until the action budget is spent.
    mutating func run() async -> SimulationTally {
        await registerUsers()
        var misses = 0
        while remaining > 0 && progress.stopped == nil {
            let scenario = misses >= 8 ? Scenario.fallback(model) : Scenario.pick(using: &rng)
            if scenario.cost > remaining {
                await fillLast()
                continue
            }
            if await perform(scenario) {
                misses = 0
            } else {
                misses += 1
            }
        }
        tally.example = example()
        tally.expected = ExpectedCounts(model, users: registrations)
        return tally
    }

    private mutating func registerUsers() async {
        let givenNames = ["Ada", "Ben", "Chloé", "Dev", "Elif", "Farah", "Gus", "Hana", "Ivo", "Jun", "Kofi", "Lena"]
        for user in 0..<userCount where remaining > 0 && progress.stopped == nil {
            let name = "_\(tag)c\(index)u\(user)"
            let local = "\(tag)c\(index)u\(user)"
            let email = rng.chance(0.7) ? "\(local)@example.com" : nil
            let phone = rng.chance(0.35) ? "+1 555 \(String(format: "%03d", index)) \(String(format: "%05d", user)) \(tag.filter(\.isNumber))" : nil
            var person = SimPerson(
                name: name, container: home, email: email, phone: phone, alias: "\(local).work@unclaimed.example",
                otherContainer: nil)
            var names = PersonNameComponents()
            names.givenName = givenNames[user % givenNames.count]
            let home = self.home
            let ledger = self.ledger
            if await call("registerUser", .success, "register \(name)", { () async throws(LedgerError) in
                try await ledger.registerUser(name, in: home, emailAddress: email, phoneNumber: phone, nameComponents: names)
            }) != nil {
                registrations += 1
            }
            // Some users have an account in a second container too.
            if user % 5 == 1 && remaining > 0 && other != home {
                let other = self.other
                if await call("registerUser", .success, "register \(name) in \(other)", { () async throws(LedgerError) in
                    try await ledger.registerUser(name, in: other)
                }) != nil {
                    person.otherContainer = other
                    registrations += 1
                }
            }
            model.people.append(person)
        }
    }

    /// The last action or two of the budget: a fetch of an unknown URL, which always costs one call.
    private mutating func fillLast() async {
        guard let person = model.people.indices.randomElement(using: &rng) else { return }
        let url = unknownURL()
        let handle = as_(person)
        _ = await call("shareMetadata", .failure(.unknownItem), "fetch an unknown URL") { () async throws(LedgerError) in
            try await handle.shareMetadata(for: url)
        }
    }

    // MARK: - Calls

    /// Makes one call: counts it, times it, and compares its outcome with the intent. Returns the
    /// value when the call succeeded as intended.
    mutating func call<T>(
        _ kind: String, _ intent: Intent, _ what: String,
        _ body: () async throws(LedgerError) -> T
    ) async -> T? {
        precondition(remaining > 0, "a scenario made more calls than it declared")
        remaining -= 1
        tally.actions += 1
        progress.add()
        let started = ContinuousClock.now
        let result: Result<T, LedgerError>
        do throws(LedgerError) {
            result = .success(try await body())
        } catch {
            result = .failure(error)
        }
        let elapsed = ContinuousClock.now - started
        tally.record(kind, micros: UInt64(max(0, elapsed.seconds * 1_000_000)))
        return judge(kind, intent, result, what)
    }

    /// Makes several calls at once (they land in the same group commits), then judges each like
    /// ``call(_:_:_:_:)``. The calls must not depend on each other's order. Returns which succeeded
    /// as intended.
    mutating func callConcurrently(
        _ calls: [(kind: String, intent: Intent, what: String, body: @Sendable () async -> Result<Void, LedgerError>)]
    ) async -> [Bool] {
        precondition(remaining >= calls.count, "a scenario made more calls than it declared")
        remaining -= calls.count
        tally.actions += calls.count
        let outcomes = await withTaskGroup(of: (Int, Result<Void, LedgerError>, Duration).self) { group in
            for (index, call) in calls.enumerated() {
                let body = call.body
                let progress = self.progress
                group.addTask {
                    let started = ContinuousClock.now
                    let result = await body()
                    progress.add()
                    return (index, result, ContinuousClock.now - started)
                }
            }
            var outcomes: [(Int, Result<Void, LedgerError>, Duration)] = []
            for await outcome in group { outcomes.append(outcome) }
            return outcomes.sorted { $0.0 < $1.0 }
        }
        return outcomes.map { index, result, elapsed in
            let call = calls[index]
            tally.record(call.kind, micros: UInt64(max(0, elapsed.seconds * 1_000_000)))
            return judge(call.kind, call.intent, result, call.what) != nil
        }
    }

    /// `text` with the fragment of every URL in it cut off: a share URL ends with `#` and its title,
    /// which a person typed and which stays out of the log and the report (docs/operations.md).
    static func withoutTitles(_ text: String) -> String {
        text.split(separator: " ", omittingEmptySubsequences: false).map { word in
            guard word.hasPrefix("http"), let hash = word.firstIndex(of: "#") else { return String(word) }
            return String(word[..<hash])
        }.joined(separator: " ")
    }

    /// Compares one outcome with its intent and counts it.
    mutating func judge<T>(_ kind: String, _ intent: Intent, _ result: Result<T, LedgerError>, _ what: String) -> T? {
        let what = Self.withoutTitles(what)
        // A full ledger fails every call that writes: stop after a run of them instead of failing
        // through every remaining action.
        if case .failure(let error) = result, error.code == .storageFull {
            storageFullRun += 1
            if storageFullRun >= SimulationClient.storageFullRunLimit {
                progress.stop(
                    "\(SimulationClient.storageFullRunLimit) calls in a row failed with storageFull: the ledger's storage is "
                        + "full. Free disk space (or raise the map limit) and run again")
            }
        } else {
            storageFullRun = 0
        }
        // With --verbose, every failed call and its error (intended or not). Like every log line, it
        // carries no personal data: `what` and the ledger's messages name people by user record name.
        if case .failure(let error) = result {
            ledger.configuration.log.logger.debug(
                "call failed", metadata: ["client": "\(index)", "call": "\(kind)", "what": "\(what)", "error": "\(error)"])
        }
        switch (intent, result) {
        case (.success, .success(let value)):
            return value
        case (.success, .failure(let error)):
            tally.errorsByCode[error.code.name, default: 0] += 1
            tally.unexpectedErrors += 1
            tally.problem("unexpected error \(error.code.name)", "client \(index), \(kind): \(what): expected success, got \(error)")
        case (.failure(let code), .failure(let error)):
            tally.errorsByCode[error.code.name, default: 0] += 1
            if error.code == code {
                tally.intendedErrors += 1
            } else {
                tally.unexpectedErrors += 1
                tally.problem(
                    "unexpected error \(error.code.name)", "client \(index), \(kind): \(what): expected \(code.name), got \(error)")
            }
        case (.failure(let code), .success):
            tally.unexpectedSuccesses += 1
            tally.problem("unexpected success", "client \(index), \(kind): \(what): expected \(code.name), but it succeeded")
        }
        return nil
    }

    /// Counts a successful answer that disagrees with the model.
    mutating func mismatch(_ text: String) {
        tally.mismatches += 1
        tally.problem("mismatch", "client \(index): \(Self.withoutTitles(text))")
    }

    // MARK: - Helpers

    /// A handle acting as `person` in the partition's container.
    func as_(_ person: Int) -> Container { ledger.container(home, userRecordName: model.people[person].name) }

    /// `person`'s user record name.
    func name(_ person: Int) -> String { model.people[person].name }

    /// The id of `record` in zone `zone`, as other users name it (with the owner).
    func recordID(_ record: String, zone: Int) -> RecordID {
        RecordID(recordName: record, zoneID: RecordZoneID(zoneName: model.zones[zone].name, ownerName: name(model.zones[zone].owner)))
    }

    /// A well-formed share URL that no share has.
    mutating func unknownURL() -> URL {
        ShareURL.make(host: "share.localhost", token: ShareToken.generate(using: &rng))!
    }

    /// A random live share satisfying `condition`, trying a few.
    mutating func pickShare(_ condition: (SimShare) -> Bool) -> Int? {
        let candidates = model.liveShares.filter { condition(model.shares[$0]) }
        return candidates.randomElement(using: &rng)
    }

    /// A share and a person of one of its entries meeting `condition`, chosen at random among the
    /// live shares meeting `share`.
    mutating func pickEntry(
        inShares share: (SimShare) -> Bool = { _ in true }, _ condition: (SimEntry) -> Bool
    ) -> (share: Int, person: Int)? {
        var candidates: [(share: Int, person: Int)] = []
        for shareIndex in model.liveShares where share(model.shares[shareIndex]) {
            for entry in model.shares[shareIndex].entries where condition(entry) {
                candidates.append((shareIndex, entry.person))
            }
        }
        return candidates.randomElement(using: &rng)
    }

    /// The manager who will change a share's participants: the owner, or sometimes an accepted administrator.
    mutating func manager(of shareIndex: Int) -> Int {
        let share = model.shares[shareIndex]
        let admins = share.entries.filter { $0.claimed && $0.status == .accepted && $0.role == .administrator }.map(\.person)
        if !admins.isEmpty && rng.chance(0.3) { return admins.randomElement(using: &rng)! }
        return share.owner
    }

    /// A share's participant entry for `person`, found in a share value the ledger returned.
    func participant(in share: Share, for person: Int, kind: LookupKind) -> Share.Participant? {
        let user = model.people[person]
        if kind == .alias {
            return share.participants.first {
                $0.userIdentity.userRecordID == nil && $0.userIdentity.lookupInfo?.emailAddress?.lowercased() == user.alias
            }
        }
        return share.participants.first { $0.userIdentity.userRecordID?.recordName == user.name }
    }

    private func example() -> SimulationExample? {
        for shareIndex in model.liveShares.reversed() {
            let share = model.shares[shareIndex]
            if let entry = share.entries.first(where: { $0.claimed && $0.status == .pending }) {
                return SimulationExample(
                    url: Self.withoutTitles(share.url.absoluteString), container: home, user: name(entry.person), owner: name(share.owner))
            }
        }
        return nil
    }
}

