import Foundation
import ShareLedger
import Synchronization
import TestSupport

/// A seeded, thread-safe random source (SplitMix64) so tokens and ids repeat from run to run.
final class SeededRandom: LedgerRandomSource, @unchecked Sendable {
    // @unchecked: `state` is only touched under `lock` (an NSLock rather than a `Mutex`, whose
    // contended wait ThreadSanitizer cannot see on Linux: scripts/tsan reported a false race here).
    private let lock = NSLock()
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    func next() -> UInt64 {
        lock.withLock {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }
}

/// A ledger in a temporary directory with users alice (owner), bob, carol registered in one container.
struct SharingFixture {
    static let container = "iCloud.com.example.notes"
    let dir: TemporaryDirectory
    let ledger: ShareLedger

    init(
        _ label: String = #function, seed: UInt64 = 42, clock: any LedgerClock = SteppingClock(),
        worker: ResidualTaskWorker.Configuration? = nil
    ) async throws {
        dir = TemporaryDirectory(label)
        var configuration = ShareLedger.Configuration(path: dir.child("ledger"), durability: .unsafeNoSync, clock: clock)
        configuration.randomSource = SeededRandom(seed: seed)
        configuration.residualTaskWorker = worker
        // Open: tests that need several commands in one batch close it (`log.setWriterPaused`).
        configuration.writerProbe = WriterGate()
        ledger = try ShareLedger.open(configuration)
        try await ledger.registerUser("_alice", in: Self.container, emailAddress: "alice@example.com")
        try await ledger.registerUser("_bob", in: Self.container, emailAddress: "bob@example.com", phoneNumber: "+1 555 0100")
        try await ledger.registerUser("_carol", in: Self.container, emailAddress: "carol@example.com")
    }

    func as_(_ user: String?) -> Container { ledger.container(Self.container, userRecordName: user) }
    var alice: Container { as_("_alice") }
    var bob: Container { as_("_bob") }
    var carol: Container { as_("_carol") }

    static let zone = RecordZoneID(zoneName: "Notes")
    static func recordID(_ name: String) -> RecordID { RecordID(recordName: name, zoneID: zone) }

    /// A fixture with Alice's hierarchy shared (``makeHierarchy(title:)``) and, when given, `invitee`
    /// invited to it with `permission`: the fixture and the share as created.
    static func withShare(
        _ label: String = #function, inviting invitee: LookupInfo? = nil, permission: Share.Participant.Permission = .readOnly
    ) async throws -> (SharingFixture, Share) {
        let f = try await SharingFixture(label)
        let share = try await f.makeHierarchy()
        if let invitee { _ = try await f.alice.addParticipant(invitee, permission: permission, to: share.url) }
        return (f, share)
    }

    /// Alice's zone "Notes" with a root record "list" and a child "item".
    @discardableResult
    func makeHierarchy(title: String = "Groceries") async throws -> Share {
        _ = try await alice.save(RecordZone(zoneID: Self.zone))
        _ = try await alice.save(Record(recordType: "List", recordID: Self.recordID("list"), fields: ["title": .string(title)]))
        _ = try await alice.save(
            Record(recordType: "Item", recordID: Self.recordID("item"), fields: ["name": .string("milk")], parent: Self.recordID("list")))
        return try await alice.share(rootRecord: Self.recordID("list"), title: title)
    }
}

/// A small but busy ledger (the audit and checkpoint tests' fixture): a share with an accepted
/// participant, a fetch by someone else, the tasks done, a title change.
func busyLedger(_ label: String = #function) async throws -> (SharingFixture, Share) {
    let f = try await SharingFixture(label)
    let share = try await f.makeHierarchy()
    _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readWrite, to: share.url)
    _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
    _ = try await f.carol.shareMetadatas(for: [share.url])
    try await f.ledger.completeResidualTasks()
    _ = try await f.alice.setTitle("Shopping", for: share.url)
    return (f, share)
}

/// The error code a throwing call ends with, or nil when it succeeds.
/// A non-LedgerError maps to a code no call returns, so the expectation fails.
func errorCode<T>(_ body: () async throws -> T) async -> LedgerError.Code? {
    do {
        _ = try await body()
        return nil
    } catch let error as LedgerError {
        return error.code
    } catch {
        return LedgerError.Code(rawValue: -1)
    }
}

extension Result where Failure == LedgerError {
    /// The error's code, or nil on success.
    var errorCode: LedgerError.Code? {
        if case .failure(let error) = self { return error.code }
        return nil
    }
}

/// Fixed sequences for a property's body, from seeds 1...`count` (SplitMix64): the deterministic
/// part of a property test. The random part (swift-property-based's `propertyCheck`, whose seeds
/// change every run) explores beyond it; assertions about what the sequences reached (coverage) rest
/// on the fixed part alone, so they pass or fail the same way on every run.
func fixedSequences(count: Int, length: ClosedRange<Int>, values: ClosedRange<Int> = 0...1_000_000) -> [[Int]] {
    (1...count).map { seed in
        var generator = SplitMix64(state: UInt64(seed) &* 0x9E37_79B9_7F4A_7C15)
        func next() -> UInt64 { generator.next() }
        let size = length.lowerBound + Int(next() % UInt64(length.count))
        return (0..<size).map { _ in values.lowerBound + Int(next() % UInt64(values.count)) }
    }
}

/// The identity of account `user`, as a share's requesters and blocked identities name it.
func identityValue(_ user: String) -> UserIdentity {
    UserIdentity(
        userRecordID: RecordID(userRecordName: user), lookupInfo: LookupInfo(userRecordID: RecordID(userRecordName: user)),
        nameComponents: nil, hasiCloudAccount: true)
}

/// A requester value for account `user` (as if taken from a share's requesters).
func requesterValue(_ user: String) -> Share.AccessRequester {
    Share.AccessRequester(userIdentity: identityValue(user), participantLookupInfo: LookupInfo(userRecordID: RecordID(userRecordName: user)))
}
