import Foundation
import SharingDomain
import Testing

/// `Share`, `Share.Participant` and `Share.Metadata` keep their fields in a copy-on-write box: they
/// must still behave as plain values (a changed copy leaves the original alone; equality and hashing
/// by content; printed with their fields).
@Suite("Public values kept in a box")
struct ValueBoxTests {
    static func participant(_ id: String, role: Share.Participant.Role = .privateUser) -> Share.Participant {
        Share.Participant(
            participantID: id,
            userIdentity: UserIdentity(
                userRecordID: RecordID(userRecordName: "_\(id)"), lookupInfo: LookupInfo(emailAddress: "\(id)@example.com"),
                nameComponents: nil, hasiCloudAccount: true),
            role: role, permission: .readOnly, acceptanceStatus: .pending, dateAddedToShare: Date(timeIntervalSince1970: 7))
    }

    static func metadata(owner: Share.Participant, participants: [Share.Participant]) throws -> Share.Metadata {
        let zone = RecordZoneID(zoneName: "Z", ownerName: "_owner")
        let token = try #require(ShareToken("0123456789abcdefghijklmnop"))
        let share = Share(
            recordID: RecordID(recordName: "share-1", zoneID: zone), containerIdentifier: "iCloud.c",
            url: try #require(URL(string: "https://share.example.com/share/\(token.text)")), token: token, title: "T",
            publicPermission: .none, participants: participants, owner: owner, currentUserParticipant: participants.last,
            hierarchicalRootRecordID: RecordID(recordName: "root", zoneID: zone), recordChangeTag: "3",
            creationDate: Date(timeIntervalSince1970: 1))
        return Share.Metadata(
            share: share, containerIdentifier: "iCloud.c", ownerIdentity: owner.userIdentity,
            hierarchicalRootRecordID: share.hierarchicalRootRecordID, rootRecord: nil, participantRole: .privateUser,
            participantStatus: .pending, participantPermission: .readOnly)
    }

    @Test("a changed copy of a participant leaves the original alone; equal fields are equal values with equal hashes")
    func participantIsAValue() {
        let original = Self.participant("bob")
        var copy = original
        #expect(copy == original)
        copy.role = .administrator
        copy.userIdentity.lookupInfo = LookupInfo(phoneNumber: "+15550100")
        copy.isApprovedRequester = true
        #expect(original.role == .privateUser && original.userIdentity.lookupInfo?.emailAddress == "bob@example.com")
        #expect(!original.isApprovedRequester)
        #expect(copy.role == .administrator && copy.userIdentity.lookupInfo?.phoneNumber == "+15550100")
        #expect(copy != original)
        // Built apart (two boxes), the same fields: equal, and hashed alike.
        let twin = Self.participant("bob")
        #expect(twin == original)
        #expect(twin.hashValue == original.hashValue)
        #expect(Set([twin, original, copy]).count == 2)
        #expect(Share.Participant.oneTimeURLParticipant().isOneTimeURLParticipant)
        #expect(!original.isOneTimeURLParticipant)
    }

    @Test("a changed copy of a metadata leaves the original alone; equality compares every field")
    func metadataIsAValue() throws {
        let owner = Self.participant("owner", role: .owner)
        let original = try Self.metadata(owner: owner, participants: [owner, Self.participant("bob")])
        var copy = original
        copy.participantStatus = .accepted
        copy.share.title = "changed"
        #expect(original.participantStatus == .pending && original.share.title == "T")
        #expect(copy.participantStatus == .accepted && copy.share.title == "changed")
        #expect(copy != original)
        let twin = try Self.metadata(owner: owner, participants: [owner, Self.participant("bob")])
        #expect(twin == original && twin.hashValue == original.hashValue)
        // A field the hash leaves out still tells them apart.
        var other = original
        other.ownerIdentity.nameComponents = PersonNameComponents(givenName: "O")
        #expect(other != original)
    }

    @Test("boxed values print and dump their fields")
    func printedWithFields() throws {
        let bob = Self.participant("bob")
        let text = String(describing: bob)
        #expect(text.contains("participantID: \"bob\"") && text.contains("acceptanceStatus"))
        let metadata = try Self.metadata(owner: Self.participant("owner", role: .owner), participants: [bob])
        var dumped = ""
        dump(metadata, to: &dumped)
        #expect(dumped.contains("participantPermission") && dumped.contains("bob@example.com"))
    }
}
