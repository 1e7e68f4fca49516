import Foundation
import ShareLedger

/// SplitMix64: a small seeded generator. Every choice of the simulation comes from one of these,
/// so runs with the same seed do the same things (share tokens and participant ids still come
/// from the ledger's own, cryptographically secure, source).
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64

    /// A generator whose sequence is fixed by `seed`.
    init(seed: UInt64) { state = seed }

    /// The next 64 bits of the sequence.
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// True with probability `probability`.
    mutating func chance(_ probability: Double) -> Bool {
        Double.random(in: 0..<1, using: &self) < probability
    }
}

// MARK: - The workload's model of its own partition
//
// Each client owns a partition: its users, their zones, records and shares, and only its users take
// part in its shares. The client is the only writer of its partition, one call at a time, so its
// model says exactly what the ledger must answer. Collections the workload picks from are arrays
// (never dictionaries or sets, whose order changes from process to process), so the seed fixes
// every choice.

/// A participant's role.
typealias Role = Share.Participant.Role
/// A participant's permission.
typealias Permission = Share.Participant.Permission
/// A participant's acceptance status.
typealias Status = Share.Participant.AcceptanceStatus

/// A user of the simulation.
struct SimPerson {
    /// The user record name.
    let name: String
    /// The container the user is registered in.
    let container: String
    /// The registered email address, if any.
    let email: String?
    /// The registered phone number, if any.
    let phone: String?
    /// An address of the user's that no account has: an invitation sent to it needs verification.
    let alias: String
    /// A second container the user also has an account in (to accept in the wrong container).
    var otherContainer: String?
}

/// How an invitation found its participant, as the ledger stored it.
enum LookupKind {
    /// By user record id (also how public users and re-invited matched users are found).
    case account
    /// By the user's registered email address.
    case email
    /// By the user's registered phone number.
    case phone
    /// By an address no account has (matched only by verification).
    case alias
}

/// A participant entry of a share, as the model expects the ledger to hold it.
struct SimEntry {
    /// The person behind the entry (for an unmatched invitation: the person who will verify it).
    var person: Int
    /// The id the ledger gave the entry.
    var participantID: String
    /// How the invitation found its participant.
    var kind: LookupKind
    /// Whether the ledger knows the entry's account (false for an unverified invitation to an alias).
    var claimed: Bool
    /// Pending, accepted or removed.
    var status: Status
    /// The entry's role.
    var role: Role
    /// The entry's permission.
    var permission: Permission
}

/// A share of the partition.
struct SimShare {
    /// The share's token (it stays when the same root or zone is shared again).
    var token: String
    /// The share's URL.
    var url: URL
    /// The owner (a person of the partition).
    var owner: Int
    /// The zone it is in (an index of the model's zones).
    var zone: Int
    /// The root record's name; `nil` for a zone-wide share.
    var root: String?
    /// What anyone with the URL may do.
    var publicPermission: Permission
    /// The title.
    var title: String
    /// Participants other than the owner.
    var entries: [SimEntry] = []
    /// Whether a manager allowed access requests.
    var allowsAccessRequests = false
    /// False once deleted.
    var live = true

    /// Whether anyone with the URL may join.
    var isPublic: Bool { publicPermission != .none }
    /// Invitations to addresses no account has, still pending.
    var unmatchedPending: Int { entries.reduce(0) { $0 + (!$1.claimed && $1.status == .pending ? 1 : 0) } }

    /// The index of the person's entry (the invariant: at most one per person).
    func entryIndex(of person: Int) -> Int? { entries.firstIndex { $0.person == person } }

    /// The person's entry as the ledger sees it: matched to the account and not removed.
    func activeEntry(of person: Int) -> SimEntry? {
        guard let index = entryIndex(of: person) else { return nil }
        let entry = entries[index]
        return entry.claimed && entry.status != .removed ? entry : nil
    }
}

/// What a share's metadata says to one user: their role, status and permission, or the error the
/// fetch must fail with.
enum Standing {
    /// The user's role, status and permission.
    case member(Role, Status, Permission)
    /// The fetch fails with this code.
    case refused(LedgerError.Code)

    /// The intent of a fetch by that user.
    var intent: Intent {
        switch self {
        case .member: return .success
        case .refused(let code): return .failure(code)
        }
    }
}

/// A record of a zone.
struct SimRecord {
    /// The record name.
    var name: String
    /// The parent's record name, if any.
    var parent: String?
}

/// A zone of one of the partition's users.
struct SimZone {
    /// The owner (a person of the partition).
    var owner: Int
    /// The zone name.
    var name: String
    /// The zone's records.
    var records: [SimRecord] = []
    /// False once deleted.
    var live = true
    /// The index of the zone's live share. A zone holds at most one live share at a time, so that
    /// every accepted participant has its own zone in its shared database.
    var share: Int?

    /// Whether `name`'s parent chain reaches `ancestor` (`name` itself included).
    func chain(from name: String, reaches ancestor: String) -> Bool {
        var parents: [String: String] = [:]
        for record in records { if let parent = record.parent { parents[record.name] = parent } }
        var current: String? = name
        var steps = 0
        while let next = current, steps <= records.count {
            if next == ancestor { return true }
            current = parents[next]
            steps += 1
        }
        return false
    }

    /// Whether a record has `name` as its parent.
    func hasChildren(_ name: String) -> Bool { records.contains { $0.parent == name } }
}

/// The state of one client's partition.
struct PartitionModel {
    /// The partition's users.
    var people: [SimPerson] = []
    /// Zones of the partition's users, deleted ones included.
    var zones: [SimZone] = []
    /// Shares of the partition's users, deleted ones included.
    var shares: [SimShare] = []
    /// URLs of deleted shares (not re-created since).
    var deadURLs: [URL] = []
    /// A counter for unique names.
    var serial = 0

    /// The next number for a unique name.
    mutating func nextSerial() -> Int {
        serial += 1
        return serial
    }

    /// Indexes of the zones not deleted.
    var liveZones: [Int] { zones.indices.filter { zones[$0].live } }
    /// Indexes of the shares not deleted.
    var liveShares: [Int] { shares.indices.filter { shares[$0].live } }

    /// The records a share covers: its root and everything below it, or the whole zone.
    func covered(_ shareIndex: Int) -> [String] {
        let share = shares[shareIndex]
        let zone = zones[share.zone]
        guard let root = share.root else { return zone.records.map(\.name) }
        return zone.records.map(\.name).filter { zone.chain(from: $0, reaches: root) }
    }

    /// What fetching the share's metadata must answer `person`.
    func standing(_ shareIndex: Int, person: Int) -> Standing {
        let share = shares[shareIndex]
        guard share.live else { return .refused(.unknownItem) }
        if person == share.owner { return .member(.owner, .accepted, .readWrite) }
        if let entry = share.activeEntry(of: person) { return .member(entry.role, entry.status, entry.permission) }
        if share.isPublic { return .member(.publicUser, .pending, share.publicPermission) }
        if share.unmatchedPending > 0 { return .refused(.participantMayNeedVerification) }
        return .refused(.unknownItem)
    }

    /// Marks a share deleted: its participants lose it, its URL stops resolving.
    mutating func killShare(_ shareIndex: Int) {
        guard shares[shareIndex].live else { return }
        shares[shareIndex].live = false
        deadURLs.append(shares[shareIndex].url)
        let zone = shares[shareIndex].zone
        if zones[zone].share == shareIndex { zones[zone].share = nil }
    }

    /// Registers a created share (a re-shared root or zone gets its old token, whose URL lives again).
    mutating func addShare(_ share: SimShare) -> Int {
        deadURLs.removeAll { ShareURL.token(in: $0)?.text == share.token }
        shares.append(share)
        zones[share.zone].share = shares.count - 1
        return shares.count - 1
    }

    /// What a change of the public permission does to the participants (as CloudKit does): pending
    /// invitations are dropped, public users follow the new permission, or leave when it is `none`.
    mutating func changePublicPermission(_ shareIndex: Int, to permission: Permission) {
        shares[shareIndex].publicPermission = permission
        for index in shares[shareIndex].entries.indices {
            var entry = shares[shareIndex].entries[index]
            if entry.status == .pending || (permission == .none && entry.role == .publicUser && entry.status != .removed) {
                entry.status = .removed
            } else if entry.role == .publicUser && entry.status == .accepted {
                entry.permission = permission
            }
            shares[shareIndex].entries[index] = entry
        }
    }
}
