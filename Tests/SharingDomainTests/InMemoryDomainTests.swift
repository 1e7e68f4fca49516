import ByteKeys
import EventLog
import Foundation
import SharingDomain
import Testing

/// The sharing rules and projections alone, on ``InMemorySharingDomain`` (no LMDB, no log). The
/// ledger's `InMemoryDomainTests` hold the LMDB path to the same decisions and bytes.
@Suite("The sharing domain in memory")
struct InMemoryDomainTests {
    static let container = "iCloud.com.example.pure"
    static let now: Int64 = 1_800_000_000_000_000

    @Test("the rules alone: a share's life on the in-memory state, with CloudKit's errors")
    func rulesWithoutLMDB() throws {
        let domain = InMemorySharingDomain()
        func run(_ actor: String, _ step: DomainAction) throws -> Result<StepAnswer, LedgerError> {
            let command = DomainCommand(
                metadata: CommandMetadata(container: Self.container, actor: actor), signedIn: true, steps: [step], bytes: 256)
            return try #require(try domain.run(command, recordedAt: Self.now).first)
        }
        for (user, email) in [("_alice", "alice@example.com"), ("_bob", "bob@example.com")] {
            _ = try run(user, .registerUser(name: user, email: email, phone: nil, names: nil)).get()
        }
        let zone = RecordZoneID(zoneName: "Lists")
        _ = try run("_alice", .saveZone(zone, capabilities: 7)).get()
        _ = try run("_alice", .saveRecord(Record(recordType: "List", recordID: RecordID(recordName: "groceries", zoneID: zone)))).get()
        let token = "0FGla26YtxqPeVFDDjx2Ds3DAb"
        let created = try run("_alice", .createShare(ShareCreation(
            zoneID: zone, rootRecordName: "groceries", title: "Groceries", publicPermission: .none, tokenCandidate: token,
            shareRecordName: "share-1", ownerParticipantID: "00000000-0000-4000-8000-000000000001"))).get()
        guard case .share(let shared) = created else { Issue.record("not a share: \(created)"); return }
        #expect(shared == token)
        // Sharing the same root again: alreadyShared.
        let again = try run("_alice", .createShare(ShareCreation(
            zoneID: zone, rootRecordName: "groceries", title: "", publicPermission: .none, tokenCandidate: "1FGla26YtxqPeVFDDjx2Ds3DAb",
            shareRecordName: "share-2", ownerParticipantID: "00000000-0000-4000-8000-000000000002")))
        #expect(again.failure?.code == .alreadyShared)
        // Bob is not invited: the metadata says nothing (unknownItem), and so does an accept.
        #expect(try run("_bob", .fetchMetadata(tokenText: token, shouldFetchRootRecord: false, desiredKeys: nil)).failure?.code == .unknownItem)
        _ = try run("_alice", .addParticipant(
            token: token, lookup: LookupInfo(emailAddress: "bob@example.com"), role: .privateUser, permission: .readWrite,
            newParticipantID: "00000000-0000-4000-8000-000000000003", ifChangeTag: nil)).get()
        let metadata = try run("_bob", .fetchMetadata(tokenText: token, shouldFetchRootRecord: false, desiredKeys: nil)).get()
        guard case .metadata(token, false, nil, let decided) = metadata else { Issue.record("not metadata: \(metadata)"); return }
        // What the metadata presented after the commit reports of Bob, worked out again and as decided.
        let bob = Decider(models: domain.models, container: Self.container, actor: "_bob", signedIn: true, now: Self.now)
        let m = try bob.metadataStanding(domain.store, tokenText: token)
        #expect(m.role == .privateUser && m.status == .pending && m.permission == .readWrite)
        let d = try #require(decided)
        #expect(d.role == m.role && d.status == m.status && d.permission == m.permission && d.oneTimeToken == m.oneTimeToken)
        #expect(d.token == m.token && d.viewer == m.viewer && d.share == m.share)
        let accepted = try run("_bob", .accept(token: token, metadataContainer: Self.container, newParticipantID: "00000000-0000-4000-8000-000000000004"))
        #expect((try? accepted.get()) != nil)
        // The accept left a residual task in the outbox; completing it makes the zone appear.
        var taskID: UInt64?
        try domain.store.visit(domain.models.outbox, from: nil) { key, _ in
            taskID = BigEndian.uint64(key)
            return false
        }
        let task = try #require(taskID)
        _ = try run("system", .completeTask(taskID: task)).get()
        #expect(try domain.models.residualTask(domain.store, id: task) == nil)
        #expect(domain.events.map(\.event.typeName).last == "shareledger.events.v1.ParticipantZoneCreated")
        // A stranger with no account: notAuthenticated.
        #expect(try run("_nobody", .saveZone(RecordZoneID(zoneName: "X"), capabilities: 7)).failure?.code == .notAuthenticated)
    }
}

extension Result {
    fileprivate var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
