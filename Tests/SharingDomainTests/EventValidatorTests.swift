import EventLog
import Foundation
import SharingDomain
import Testing

/// The event validator on the in-memory state: every event the rules produced passes when replayed
/// in order; an event the rules could not have produced from the state before it is named.
@Suite("The event validator in memory")
struct EventValidatorTests {
    static let container = "iCloud.com.example.pure"
    static let now: Int64 = 1_800_000_000_000_000
    static let token = "0FGla26YtxqPeVFDDjx2Ds3DAb"

    /// A share's life, decided in memory: Alice shares a record with Bob, who accepts.
    static func sharedDomain() throws -> InMemorySharingDomain {
        let domain = InMemorySharingDomain()
        func run(_ actor: String, _ step: DomainAction) throws {
            let command = DomainCommand(
                metadata: CommandMetadata(container: container, actor: actor), signedIn: true, steps: [step], bytes: 256)
            _ = try #require(try domain.run(command, recordedAt: now).first).get()
        }
        for (user, email) in [("_alice", "alice@example.com"), ("_bob", "bob@example.com")] {
            try run(user, .registerUser(name: user, email: email, phone: nil, names: nil))
        }
        let zone = RecordZoneID(zoneName: "Lists")
        try run("_alice", .saveZone(zone, capabilities: 7))
        try run("_alice", .saveRecord(Record(recordType: "List", recordID: RecordID(recordName: "groceries", zoneID: zone))))
        try run("_alice", .createShare(ShareCreation(
            zoneID: zone, rootRecordName: "groceries", title: "Groceries", publicPermission: .none, tokenCandidate: token,
            shareRecordName: "share-1", ownerParticipantID: "00000000-0000-4000-8000-000000000001")))
        try run("_alice", .addParticipant(
            token: token, lookup: LookupInfo(emailAddress: "bob@example.com"), role: .privateUser, permission: .readWrite,
            newParticipantID: "00000000-0000-4000-8000-000000000002", ifChangeTag: nil))
        try run("_bob", .accept(token: token, metadataContainer: container, newParticipantID: "00000000-0000-4000-8000-000000000003"))
        return domain
    }

    /// Replays `events` into a fresh in-memory state, validating each against the state before it;
    /// the first problem found, with its position.
    static func replay(_ events: [(position: UInt64, actor: String, event: DomainEvent)]) throws -> (UInt64, String)? {
        let store = InMemoryReadModelStore()
        let models = ReadModels.unattached
        let validator = EventValidator(models: models)
        let projector = Projector(models: models)
        for (position, actor, event) in events {
            let context = Projector.Context(position: position, recordedAtMicros: now, container: container, actor: actor)
            if let problem = try validator.problem(event, context, store) { return (position, problem) }
            _ = try projector.apply(event, context, store)
        }
        return nil
    }

    /// The domain's events with the actor each was appended for (the stream of a user's own events
    /// names them; the others are Alice's, but for Bob's accept).
    static func logged(_ domain: InMemorySharingDomain) -> [(position: UInt64, actor: String, event: DomainEvent)] {
        domain.events.map { position, _, event in
            let actor: String
            switch event {
            case .userRegistered(let e): actor = e.userRecordName
            case .shareAccepted(let e): actor = e.userRecordName
            case .participantZoneCreated(let e): actor = e.userRecordName
            default: actor = "_alice"
            }
            return (position, actor, event)
        }
    }

    @Test("every event the rules produced passes, replayed in order")
    func producedEventsPass() throws {
        let events = Self.logged(try Self.sharedDomain())
        #expect(events.map(\.event.typeName).contains("shareledger.events.v1.ShareAccepted"))
        let problem = try Self.replay(events)
        #expect(problem == nil, "\(problem.map { "\($0.0): \($0.1)" } ?? "")")
    }

    @Test("a share deleted by someone other than its owner is named, at its position")
    func forgedDeletionIsRefused() throws {
        var events = Self.logged(try Self.sharedDomain())
        var deleted = Shareledger_Events_V1_ShareDeleted()
        deleted.token = Self.token
        let position = UInt64(events.count + 1)
        events.append((position, "_bob", .shareDeleted(deleted)))
        let problem = try #require(try Self.replay(events))
        #expect(problem.0 == position)
        #expect(problem.1 == "only the share's owner deletes it", "\(problem.1)")
    }

    @Test("an accept by a user who was never invited is named")
    func forgedAcceptIsRefused() throws {
        let domain = try Self.sharedDomain()
        var events = Self.logged(domain).filter { $0.event.typeName != "shareledger.events.v1.ShareAccepted" }
        var accepted = Shareledger_Events_V1_ShareAccepted()
        accepted.token = Self.token
        accepted.userRecordName = "_carol"
        accepted.participantID = "00000000-0000-4000-8000-000000000009"
        events.append((UInt64(events.count + 1), "_carol", .shareAccepted(accepted)))
        let problem = try #require(try Self.replay(events))
        #expect(problem.0 == UInt64(events.count))
    }
}
