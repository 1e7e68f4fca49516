import Foundation
import ShareLedger

/// `demo --share-participants N --share-events M`: one busy share to draw with `report share`: N
/// people invited and accepting, then permission and role changes, removals and invitations again,
/// leaving, public-permission changes and metadata fetches, until the share has about M events.
struct DemoShare {
    let ledger: ShareLedger
    let participants: Int
    let events: Int
    let seed: UInt64
    static let container = "iCloud.com.example.demo"

    struct Summary: Encodable {
        var url: String
        var shareEvents: Int
        var participants: Int
        var seconds: Double
    }

    func run(progress: (Int) -> Void) async throws(LedgerError) -> Summary {
        let started = ContinuousClock.now
        var random = SeededGenerator(seed: seed)
        let owner = "_owner"
        let people = (1...participants).map { String(format: "_person%04d", $0) }
        _ = try await ledger.registerUser(owner, in: Self.container)
        for person in people { _ = try await ledger.registerUser(person, in: Self.container) }
        let alice = ledger.container(Self.container, userRecordName: owner)
        let zone = RecordZoneID(zoneName: "Demo")
        _ = try await alice.save(RecordZone(zoneID: zone))
        let root = RecordID(recordName: "root", zoneID: zone)
        _ = try await alice.save(Record(recordType: "List", recordID: root))
        let url = try await alice.share(rootRecord: root).url
        var count = 1
        var ids: [String: String] = [:]
        var accepted = Set<String>()
        func invite(_ person: String, _ permission: Share.Participant.Permission) async throws(LedgerError) {
            let share = try await alice.addParticipant(
                LookupInfo(userRecordID: RecordID(userRecordName: person)), permission: permission, to: url)
            ids[person] = share.participants.first { $0.userIdentity.userRecordID?.recordName == person }?.participantID
            count += 1
        }
        func accept(_ person: String) async throws(LedgerError) {
            let them = ledger.container(Self.container, userRecordName: person)
            _ = try await them.accept(try await them.shareMetadata(for: url))
            accepted.insert(person)
            count += 2
        }
        for person in people { try await invite(person, random.next() % 3 == 0 ? .readWrite : .readOnly) }
        for person in people where random.next() % 10 != 0 { try await accept(person) }
        var publicPermission = Share.Participant.Permission.none
        var failures = 0
        while count < events {
            if count % 500 < 2 {
                publicPermission = publicPermission == .none ? .readOnly : .none
                _ = try await alice.setPublicPermission(publicPermission, for: url)
                count += 1
                accepted = accepted.filter { ids[$0] != nil }
            }
            let person = people[Int(random.next() % UInt64(people.count))]
            guard let id = ids[person] else { continue }
            let dice = random.next() % 100
            do throws(LedgerError) {
                if !accepted.contains(person) {
                    if dice < 60 { try await accept(person) } else { try await invite(person, .readWrite) }
                } else if dice < 45 {
                    _ = try await alice.setPermission(random.next() % 2 == 0 ? .readOnly : .readWrite, forParticipant: id, in: url)
                    count += 1
                } else if dice < 55 {
                    _ = try await alice.setPermission(.readWrite, role: random.next() % 2 == 0 ? .administrator : .privateUser, forParticipant: id, in: url)
                    count += 1
                } else if dice < 65 {
                    _ = try await alice.removeParticipant(id, from: url)
                    accepted.remove(person)
                    count += 1
                } else if dice < 70 {
                    try await ledger.container(Self.container, userRecordName: person).leaveShare(url)
                    accepted.remove(person)
                    count += 1
                } else {
                    _ = try await ledger.container(Self.container, userRecordName: person).shareMetadata(for: url)
                    count += 1
                }
                failures = 0
            } catch where ![LedgerError.Code.storageFailure, .storageFull, .readOnly].contains(error.code) {
                // A call the share's state refused (a participant the public-permission change dropped, one
                // invited twice): invite them again when there is room, and go on; give up only when
                // nothing succeeds any more.
                failures += 1
                if failures > 1_000 { throw error }
                do throws(LedgerError) {
                    try await invite(person, .readOnly)
                } catch where error.code != .storageFailure && error.code != .storageFull {}
                accepted.remove(person)
            }
            if count % 250 == 0 { progress(count) }
        }
        return Summary(url: url.absoluteString, shareEvents: count, participants: participants, seconds: (ContinuousClock.now - started).seconds)
    }
}
