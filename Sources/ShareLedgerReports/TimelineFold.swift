import ShareLedger

/// The fold behind ``ShareTimeline``: walks a share's events oldest first and keeps, per person, a
/// lane of standings, request standings and marks, plus the share's own marks and state changes.
struct TimelineFold {
    /// A change of the share's own state: where, whether it existed, its public permission, and
    /// whether it allowed access requests.
    typealias ShareState = (
        position: UInt64, eventIndex: Int, existed: Bool, publicPermission: Share.Participant.Permission, allowsRequests: Bool
    )

    private(set) var lanes: [TimelineLane] = []
    private(set) var shareMarks: [TimelineMark] = []
    private(set) var shareStates: [ShareState] = []
    /// The owner's user record name (the last creation's).
    private(set) var owner = ""

    /// Which lane a user's requests and blocks go to: the first participant they ever were.
    private let participantOfUser: [String: String]
    private var index: [String: Int] = [:]
    private var existed = false
    private var publicPermission = Share.Participant.Permission.none
    private var allowsRequests = false
    private var current: [String: ParticipantStanding] = [:]
    private var requests: [String: RequestStanding] = [:]

    /// Folds `events` (a share's history, oldest first).
    init(_ events: [ReportEvent]) {
        var participantOfUser: [String: String] = [:]
        for event in events {
            switch event.change {
            case .added(let id, let user?, _, _, _, _), .verified(let id, let user), .accepted(let id, let user):
                if participantOfUser[user] == nil { participantOfUser[user] = id }
            default: break
            }
        }
        self.participantOfUser = participantOfUser
        for (i, event) in events.enumerated() { apply(event, i) }
        // Lanes in the order of their first mark; the owner's first.
        lanes.sort { a, b in
            if (a.kind == .owner) != (b.kind == .owner) { return a.kind == .owner }
            return (a.marks.first?.position ?? .max, a.id) < (b.marks.first?.position ?? .max, b.id)
        }
    }

    private mutating func apply(_ event: ReportEvent, _ i: Int) {
        switch event.change {
        case .created(let ownerName, let ownerID, let permission):
            created(event, i, owner: ownerName, ownerID: ownerID, permission: permission)
        case .deleted:
            endEverything(event.position, i)
            existed = false
            allowsRequests = false
            shareChanged(event, i, .deleted, "share deleted")
        case .publicPermission(let old, let new):
            guard existed else { return }
            publicPermission = new
            shareChanged(event, i, .publicPermission, "public permission \(old) → \(new)")
        case .requestsAllowed(let allowed):
            guard existed else { return }
            allowsRequests = allowed
            shareChanged(event, i, .requestsAllowed, allowed ? "access requests allowed" : "access requests not allowed")
        case .added(let id, let user, let role, let permission, let approved, let oneTime):
            guard existed else { return }
            added(event, i, id: id, user: user, role: role, permission: permission, approved: approved, oneTime: oneTime)
        case .updated(let id, let role, let permission):
            guard existed else { return }
            updated(event, i, id: id, role: role, permission: permission)
        case .removed(let id, let reason):
            guard existed else { return }
            removed(event, i, id: id, reason: reason)
        case .verified(let id, let user):
            guard existed else { return }
            verified(event, i, id: id, user: user)
        case .accepted(let id, let user):
            guard existed, let lane = index[id], var standing = current[id] else { return }
            standing.status = .accepted
            standing.userRecordName = user
            set(id, event.position, i, standing)
            mark(lane, event, i, .accepted, "accepted (\(standing.permission))")
        case .requested(let user):
            requestChanged(event, i, user: user, to: .requesting, .requested, "requested access")
        case .denied(let user):
            requestChanged(event, i, user: user, to: requests[user] == .blocked ? .blocked : .none, .denied, "request denied")
        case .blocked(let user):
            requestChanged(event, i, user: user, to: .blocked, .blocked, "blocked")
        case .unblocked(let user):
            requestChanged(event, i, user: user, to: .none, .unblocked, "unblocked")
        case .other:
            break
        }
    }

    // MARK: - Share changes

    private mutating func created(
        _ event: ReportEvent, _ i: Int, owner ownerName: String, ownerID: String, permission: Share.Participant.Permission
    ) {
        endEverything(event.position, i)
        existed = true
        publicPermission = permission
        allowsRequests = false
        owner = ownerName
        let lane = laneIndex(ownerID, kind: .owner, user: ownerName)
        set(
            ownerID, event.position, i,
            ParticipantStanding(
                status: .accepted, role: .owner, permission: .readWrite, userRecordName: ownerName, isApprovedRequester: false))
        mark(lane, event, i, .created, "created the share (public permission \(permission))")
        shareChanged(event, i, .created, "share created, public permission \(permission)")
    }

    /// Marks a change of the share itself and records its state after it.
    private mutating func shareChanged(_ event: ReportEvent, _ eventIndex: Int, _ kind: TimelineMark.Kind, _ text: String) {
        shareMarks.append(TimelineMark(position: event.position, eventIndex: eventIndex, kind: kind, text: text))
        shareStates.append((event.position, eventIndex, existed, publicPermission, allowsRequests))
    }

    /// Ends every participant's standing and every request (the share was deleted or created anew).
    private mutating func endEverything(_ position: UInt64, _ eventIndex: Int) {
        for id in current.keys.sorted() { set(id, position, eventIndex, nil) }
        for user in requests.keys.sorted() { setRequest(user, .none, position, eventIndex) }
        current = [:]
        requests = [:]
    }

    // MARK: - Participant changes

    private mutating func added(
        _ event: ReportEvent, _ i: Int, id: String, user: String?, role: Share.Participant.Role,
        permission: Share.Participant.Permission, approved: Bool, oneTime: Bool
    ) {
        let lane = laneIndex(id, kind: .participant, user: user)
        lanes[lane].route = approved ? .approvedRequest : oneTime ? .oneTimeURL : role == .publicUser ? .publicLink : .invited
        set(
            id, event.position, i,
            ParticipantStanding(status: .pending, role: role, permission: permission, userRecordName: user, isApprovedRequester: approved))
        mark(
            lane, event, i, approved ? .approved : .invited,
            (approved ? "request approved: " : role == .publicUser ? "joined by the public link: " : "invited: ") + "\(role), \(permission)")
        if let user { setRequest(user, requests[user] == .blocked ? .blocked : .none, event.position, i) }
    }

    private mutating func updated(
        _ event: ReportEvent, _ i: Int, id: String, role: Share.Participant.Role, permission: Share.Participant.Permission
    ) {
        guard let lane = index[id], var standing = current[id] else { return }
        let before = standing
        standing.role = role
        standing.permission = permission
        set(id, event.position, i, standing)
        if before.role != role { mark(lane, event, i, .role, "role \(before.role) → \(role)") }
        if before.permission != permission || before.role == role {
            mark(lane, event, i, .permission, "permission \(before.permission) → \(permission)")
        }
    }

    private mutating func removed(_ event: ReportEvent, _ i: Int, id: String, reason: AccessChange.RemovalReason) {
        guard let lane = index[id], var standing = current[id] else { return }
        standing.status = .removed
        standing.removal = reason
        set(id, event.position, i, standing)
        switch reason {
        case .left: mark(lane, event, i, .left, "left")
        case .removed: mark(lane, event, i, .removed, "removed")
        case .publicPermissionChanged: mark(lane, event, i, .dropped, "dropped by the public permission change")
        case .blocked: mark(lane, event, i, .removed, "removed (blocked)")
        }
    }

    private mutating func verified(_ event: ReportEvent, _ i: Int, id: String, user: String) {
        if let lane = index[id], var standing = current[id] {
            standing.userRecordName = user
            set(id, event.position, i, standing)
            mark(lane, event, i, .verified, "verified as \(user)")
        }
        setRequest(user, requests[user] == .blocked ? .blocked : .none, event.position, i)
    }

    // MARK: - Access requests

    /// A request of `user` changed to `standing` (while the share exists), marked on the user's lane.
    private mutating func requestChanged(
        _ event: ReportEvent, _ i: Int, user: String, to standing: RequestStanding, _ kind: TimelineMark.Kind, _ text: String
    ) {
        guard existed else { return }
        setRequest(user, standing, event.position, i)
        mark(userLane(user), event, i, kind, text)
    }

    // MARK: - Lanes

    private mutating func laneIndex(_ id: String, kind: TimelineLane.Kind, user: String?) -> Int {
        if let found = index[id] { return found }
        lanes.append(
            TimelineLane(
                id: id, kind: kind, userRecordName: user, route: kind == .owner ? .owner : .none, standings: [], requests: [],
                marks: [], requestUser: nil))
        index[id] = lanes.count - 1
        return lanes.count - 1
    }

    /// The lane of `user`'s requests: their first participant's, or a requester lane of their own.
    private mutating func userLane(_ user: String) -> Int {
        let lane =
            participantOfUser[user].map { laneIndex($0, kind: .participant, user: user) }
            ?? laneIndex("user:" + user, kind: .requester, user: user)
        lanes[lane].requestUser = user
        return lane
    }

    private mutating func setRequest(_ user: String, _ standing: RequestStanding, _ position: UInt64, _ eventIndex: Int) {
        guard (requests[user] ?? .none) != standing else { return }
        requests[user] = standing
        lanes[userLane(user)].requests.append((position, eventIndex, standing))
    }

    private mutating func set(_ id: String, _ position: UInt64, _ eventIndex: Int, _ standing: ParticipantStanding?) {
        guard let lane = index[id] else { return }
        if standing == nil && current[id] == nil { return }
        current[id] = standing
        lanes[lane].standings.append((position, eventIndex, standing))
        if let user = standing?.userRecordName { lanes[lane].userRecordName = user }
    }

    private mutating func mark(_ lane: Int, _ event: ReportEvent, _ eventIndex: Int, _ kind: TimelineMark.Kind, _ text: String) {
        lanes[lane].marks.append(TimelineMark(position: event.position, eventIndex: eventIndex, kind: kind, text: text))
    }
}
