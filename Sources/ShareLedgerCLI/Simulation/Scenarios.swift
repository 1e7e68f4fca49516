import Foundation
import ShareLedger

/// What a client does next: a small story of one to four calls, chosen by weight. A scenario whose
/// preconditions do not hold in the model (nothing to accept yet, say) does nothing and another is
/// chosen.
enum Scenario: CaseIterable {
    /// Building: zones, records with parent chains, edits (one with a stale change tag), deletions.
    case createZone, createRecord, editRecord, staleRecordEdit, deleteRecord, deleteZone
    /// Sharing a hierarchy, or a zone as a whole.
    case shareHierarchy, shareZone
    /// The owner's (or an administrator's) management.
    case invite, setPermission, removeParticipant, setPublicPermission, staleShareTag, deleteShare
    /// Participants: fetching, accepting, verifying, leaving.
    case fetchMetadata, fetchMetadataBatch, accept, acceptAgain, acceptWithOperations, concurrentAccepts, verify, leave
    /// Participants working with the shared records, and anyone listing their shares.
    case participantEdit, participantDeletes, listShares
    /// Mistakes real clients make (CloudKit sharing reference, §9): URLs and accepts.
    case fetchUnknownURL, fetchWithoutAccount, acceptUninvited, acceptInWrongContainer, wrongAddressVerification
    /// Mistakes real clients make: sharing and managing.
    case inviteToPublicShare, shareAlreadyShared, secondZoneShare, ownerLeaves, notOwnerManages
    /// Mistakes real clients make: participants going too far, stale state.
    case participantDeletesRoot, readNotShared, leaveTwice, acceptDeletedShare
    // access requests and blocked identities (with their intended errors)
    case accessRequest, blockParticipant, oneTimeURL

    /// How often the scenario is chosen, relative to the others.
    var weight: Double {
        switch self {
        case .createZone: return 3
        case .createRecord: return 10
        case .editRecord: return 4
        case .staleRecordEdit: return 1.5
        case .deleteRecord: return 1.2
        case .deleteZone: return 0.3
        case .shareHierarchy: return 5
        case .shareZone: return 1.5
        case .invite: return 11
        case .setPermission: return 3
        case .removeParticipant: return 2.5
        case .setPublicPermission: return 2
        case .staleShareTag: return 1.5
        case .deleteShare: return 1.2
        case .fetchMetadata: return 10
        case .fetchMetadataBatch: return 3
        case .accept: return 9
        case .acceptAgain: return 0.7
        case .verify: return 4
        case .leave: return 2
        case .participantEdit: return 6
        case .listShares: return 1
        case .fetchUnknownURL: return 1.5
        case .fetchWithoutAccount: return 0.3
        case .acceptUninvited: return 1.5
        case .acceptInWrongContainer: return 0.5
        case .wrongAddressVerification: return 0.5
        case .inviteToPublicShare: return 0.5
        case .shareAlreadyShared: return 1.5
        case .secondZoneShare: return 1
        case .ownerLeaves: return 0.3
        case .notOwnerManages: return 0.8
        case .participantDeletesRoot: return 0.5
        case .readNotShared: return 0.5
        case .acceptWithOperations: return 1.5
        case .concurrentAccepts: return 1
        case .participantDeletes: return 1
        case .leaveTwice: return 0.4
        case .acceptDeletedShare: return 0.4
        case .accessRequest: return 2
        case .blockParticipant: return 0.5
        case .oneTimeURL: return 1
        }
    }

    /// The most calls the scenario makes.
    var cost: Int {
        switch self {
        case .concurrentAccepts: return 7
        case .accessRequest: return 6
        case .blockParticipant: return 3
        case .oneTimeURL: return 4
        case .staleRecordEdit, .staleShareTag, .acceptDeletedShare: return 3
        case .verify: return 4
        case .editRecord, .accept, .acceptAgain, .acceptWithOperations, .participantEdit, .acceptUninvited, .acceptInWrongContainer, .listShares:
            return 2
        default: return 1
        }
    }

    private static let table: [(Scenario, Double)] = {
        var total = 0.0
        return allCases.map { scenario in
            total += scenario.weight
            return (scenario, total)
        }
    }()

    /// A scenario chosen by weight.
    static func pick(using rng: inout SeededGenerator) -> Scenario {
        let x = Double.random(in: 0..<table.last!.1, using: &rng)
        return table.first { x < $0.1 }?.0 ?? .createRecord
    }

    /// What to do when nothing chosen could run: build something.
    static func fallback(_ model: PartitionModel) -> Scenario {
        model.liveZones.isEmpty ? .createZone : .createRecord
    }
}

extension SimulationClient {
    /// Runs a scenario; false when its preconditions do not hold (no call was made).
    mutating func perform(_ scenario: Scenario) async -> Bool {
        switch scenario {
        case .createZone: return await createZone()
        case .createRecord: return await createRecord()
        case .editRecord: return await editRecord(stale: false)
        case .staleRecordEdit: return await editRecord(stale: true)
        case .deleteRecord: return await deleteRecord()
        case .deleteZone: return await deleteZone()
        case .shareHierarchy: return await shareHierarchy()
        case .shareZone: return await shareZone()
        case .invite: return await invite()
        case .setPermission: return await setPermission()
        case .removeParticipant: return await removeParticipant()
        case .setPublicPermission: return await setPublicPermission()
        case .staleShareTag: return await staleShareTag()
        case .deleteShare: return await deleteShare()
        case .fetchMetadata: return await fetchMetadata()
        case .fetchMetadataBatch: return await fetchMetadataBatch()
        case .accept: return await accept()
        case .acceptAgain: return await acceptAgain()
        case .verify: return await verify()
        case .leave: return await leave()
        case .participantEdit: return await participantEdit()
        case .listShares: return await listShares()
        case .fetchUnknownURL: return await fetchUnknownURL()
        case .fetchWithoutAccount: return await fetchWithoutAccount()
        case .acceptUninvited: return await acceptUninvited()
        case .acceptInWrongContainer: return await acceptInWrongContainer()
        case .wrongAddressVerification: return await wrongAddressVerification()
        case .inviteToPublicShare: return await inviteToPublicShare()
        case .shareAlreadyShared: return await shareAlreadyShared()
        case .secondZoneShare: return await secondZoneShare()
        case .ownerLeaves: return await ownerLeaves()
        case .notOwnerManages: return await notOwnerManages()
        case .participantDeletesRoot: return await participantDeletesRoot()
        case .readNotShared: return await readNotShared()
        case .acceptWithOperations: return await acceptWithOperations()
        case .concurrentAccepts: return await concurrentAccepts()
        case .participantDeletes: return await participantDeletes()
        case .leaveTwice: return await leaveTwice()
        case .acceptDeletedShare: return await acceptDeletedShare()
        case .accessRequest: return await accessRequest()
        case .blockParticipant: return await blockParticipant()
        case .oneTimeURL: return await oneTimeURL()
        }
    }
}
