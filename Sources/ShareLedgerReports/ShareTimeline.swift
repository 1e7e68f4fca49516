import Foundation
import ShareLedger

/// A participant's standing in a share from some position on (what `ShareLedger.access(to:at:)`
/// reports for them there).
public struct ParticipantStanding: Sendable, Hashable {
    /// Pending, accepted or removed.
    public var status: Share.Participant.AcceptanceStatus
    /// Their role.
    public var role: Share.Participant.Role
    /// Their permission.
    public var permission: Share.Participant.Permission
    /// Their account, once one claimed the invitation.
    public var userRecordName: String?
    /// Whether their invitation approved their access request.
    public var isApprovedRequester: Bool
    /// Why they left, once removed.
    public var removal: AccessChange.RemovalReason?

    /// Whether they could reach the shared records (the owner, or accepted).
    public var hasAccess: Bool { role == .owner || status == .accepted }
}

/// Where a user stood with a share's access requests and blocks.
public enum RequestStanding: String, Sendable, Hashable {
    /// No pending request, not blocked.
    case none
    /// A pending access request.
    case requesting
    /// Blocked from the share.
    case blocked
}

/// How a person got into a share.
public enum AccessRoute: String, Sendable, Hashable, CaseIterable {
    /// They own it.
    case owner
    /// Invited by the owner or an administrator.
    case invited
    /// Their access request was approved.
    case approvedRequest = "approved request"
    /// Through a one-time URL.
    case oneTimeURL = "one-time URL"
    /// Joined a public share through its link.
    case publicLink = "public link"
    /// Never a participant (only requested, or blocked).
    case none = "none"
}

/// A mark on a lane: one event that changed something about the lane's person or the share.
public struct TimelineMark: Sendable, Hashable {
    /// What happened.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        case created, deleted, publicPermission = "public permission", requestsAllowed = "requests allowed"
        case invited, approved, accepted, verified, permission, role, removed, left, dropped, requested, denied, blocked
        case unblocked
    }
    /// The event's position in the log.
    public var position: UInt64
    /// The event's index in ``ShareTimeline/events``.
    public var eventIndex: Int
    /// What happened.
    public var kind: Kind
    /// A short description (no personal data: names are user record names).
    public var text: String
}

/// One row of the picture: a person (a participant, or a user who only requested or was blocked).
public struct TimelineLane: Sendable {
    /// The owner, a participant, or a user who was never a participant.
    public enum Kind: String, Sendable, Hashable { case owner, participant, requester }
    /// The participant id, or `user:` and the user record name for a requester.
    public var id: String
    /// What the lane is.
    public var kind: Kind
    /// The person's user record name (the latest known); `nil` for an invitation no account claimed.
    public var userRecordName: String?
    /// How they got in (the latest invitation's way).
    public var route: AccessRoute
    /// Their standing as a participant from each position on; `nil` while they were none (before the
    /// invitation, after the share was deleted or created again).
    public var standings: [(position: UInt64, eventIndex: Int, standing: ParticipantStanding?)]
    /// Their standing with access requests and blocks from each position on.
    public var requests: [(position: UInt64, eventIndex: Int, standing: RequestStanding)]
    /// The events on this lane, oldest first.
    public var marks: [TimelineMark]
    /// The user record name its requests and blocks are about, if any.
    public var requestUser: String?
    /// The person's email or phone when the report was asked to show it and their key exists; "erased"
    /// when they were forgotten.
    public var contact: String?

    /// Their participant standing right after `position`.
    public func standing(at position: UInt64) -> ParticipantStanding? {
        standings.last(where: { $0.position <= position })?.standing
    }

    /// Their request standing right after `position`.
    public func requestStanding(at position: UInt64) -> RequestStanding {
        requests.last(where: { $0.position <= position })?.standing ?? .none
    }

    /// The name the picture gives the lane: the user record name, or what the invitation was.
    public var label: String {
        if let userRecordName { return userRecordName }
        switch route {
        case .oneTimeURL: return "(one-time URL, unclaimed)"
        default: return "(invitation, no account yet)"
        }
    }
}

/// A share's state right after a position, as the timeline has it (to hold against `ShareAccess`).
public struct TimelineState: Sendable, Hashable {
    /// Whether the share existed.
    public var existed: Bool
    /// Its public permission (after a deletion: the last it had, as `ShareAccess.publicPermission`).
    public var publicPermission: Share.Participant.Permission
    /// Whether it allowed access requests.
    public var allowsAccessRequests: Bool
    /// Participant id → standing, for every participant since the share was (last) created.
    public var participants: [String: ParticipantStanding]
    /// Users with a pending access request, sorted.
    public var requesters: [String]
    /// Users blocked, sorted.
    public var blocked: [String]
}

/// Everything a share's access timeline shows: its events, one lane per person, the share's own
/// changes, and the window drawn.
public struct ShareTimeline: Sendable {
    /// The share's URL as given.
    public var url: String
    /// The share's token.
    public var token: String
    /// The container.
    public var container: String
    /// The owner's user record name (the last creation's).
    public var owner: String
    /// Every event of the share up to the report's end (``asOf``), oldest first.
    public var events: [ReportEvent]
    /// Lanes in the order their people first appear; the owner's first.
    public var lanes: [TimelineLane]
    /// The share's own marks: creation, deletion, public permission and access-request changes.
    public var shareMarks: [TimelineMark]
    /// The indexes into ``events`` the picture shows (from `--from` to `--to`).
    public var window: Range<Int>
    /// The last position the report includes (`--as-of`, or the head).
    public var asOf: UInt64
    /// Share-level state changes: (position, event index, existed, public permission, allows requests).
    var shareStates: [(position: UInt64, eventIndex: Int, existed: Bool, publicPermission: Share.Participant.Permission, allowsRequests: Bool)]

    /// Builds the timeline from `events` (a share's history, oldest first), drawing `window`.
    public init(url: String, token: String, events: [ReportEvent], window: Range<Int>? = nil, asOf: UInt64? = nil) {
        self.url = url
        self.token = token
        self.events = events
        self.window = window ?? 0..<events.count
        self.asOf = asOf ?? events.last?.position ?? 0
        container = events.first?.container ?? ""
        owner = ""
        lanes = []
        shareMarks = []
        shareStates = []
        fold()
    }

    private mutating func fold() {
        // Which lane a user's requests and blocks go to: the first participant they ever were.
        var participantOfUser: [String: String] = [:]
        for event in events {
            switch event.change {
            case .added(let id, let user?, _, _, _, _), .verified(let id, let user), .accepted(let id, let user):
                if participantOfUser[user] == nil { participantOfUser[user] = id }
            default: break
            }
        }
        var index: [String: Int] = [:]
        var existed = false
        var publicPermission = Share.Participant.Permission.none
        var allowsRequests = false
        var current: [String: ParticipantStanding] = [:]
        var requests: [String: RequestStanding] = [:]
        func laneIndex(_ id: String, kind: TimelineLane.Kind, user: String?) -> Int {
            if let found = index[id] { return found }
            lanes.append(
                TimelineLane(
                    id: id, kind: kind, userRecordName: user, route: kind == .owner ? .owner : .none, standings: [], requests: [],
                    marks: [], requestUser: nil))
            index[id] = lanes.count - 1
            return lanes.count - 1
        }
        func userLane(_ user: String) -> Int {
            let lane =
                participantOfUser[user].map { laneIndex($0, kind: .participant, user: user) }
                ?? laneIndex("user:" + user, kind: .requester, user: user)
            lanes[lane].requestUser = user
            return lane
        }
        func shareState(_ position: UInt64, _ eventIndex: Int) {
            shareStates.append((position, eventIndex, existed, publicPermission, allowsRequests))
        }
        func setRequest(_ user: String, _ standing: RequestStanding, _ position: UInt64, _ eventIndex: Int) {
            guard (requests[user] ?? .none) != standing else { return }
            requests[user] = standing
            lanes[userLane(user)].requests.append((position, eventIndex, standing))
        }
        func set(_ id: String, _ position: UInt64, _ eventIndex: Int, _ standing: ParticipantStanding?) {
            guard let lane = index[id] else { return }
            if standing == nil && current[id] == nil { return }
            current[id] = standing
            lanes[lane].standings.append((position, eventIndex, standing))
            if let user = standing?.userRecordName { lanes[lane].userRecordName = user }
        }
        func mark(_ lane: Int, _ event: ReportEvent, _ eventIndex: Int, _ kind: TimelineMark.Kind, _ text: String) {
            lanes[lane].marks.append(TimelineMark(position: event.position, eventIndex: eventIndex, kind: kind, text: text))
        }
        func shareMark(_ event: ReportEvent, _ eventIndex: Int, _ kind: TimelineMark.Kind, _ text: String) {
            shareMarks.append(TimelineMark(position: event.position, eventIndex: eventIndex, kind: kind, text: text))
        }
        func endEverything(_ position: UInt64, _ eventIndex: Int) {
            for id in current.keys.sorted() { set(id, position, eventIndex, nil) }
            for user in requests.keys.sorted() { setRequest(user, .none, position, eventIndex) }
            current = [:]
            requests = [:]
        }
        for (i, event) in events.enumerated() {
            let position = event.position
            switch event.change {
            case .created(let ownerName, let ownerID, let permission):
                endEverything(position, i)
                existed = true
                publicPermission = permission
                allowsRequests = false
                owner = ownerName
                let lane = laneIndex(ownerID, kind: .owner, user: ownerName)
                set(
                    ownerID, position, i,
                    ParticipantStanding(
                        status: .accepted, role: .owner, permission: .readWrite, userRecordName: ownerName, isApprovedRequester: false))
                mark(lane, event, i, .created, "created the share (public permission \(permission))")
                shareMark(event, i, .created, "share created, public permission \(permission)")
                shareState(position, i)
            case .deleted:
                endEverything(position, i)
                existed = false
                allowsRequests = false
                shareMark(event, i, .deleted, "share deleted")
                shareState(position, i)
            case .publicPermission(let old, let new):
                guard existed else { continue }
                publicPermission = new
                shareMark(event, i, .publicPermission, "public permission \(old) → \(new)")
                shareState(position, i)
            case .requestsAllowed(let allowed):
                guard existed else { continue }
                allowsRequests = allowed
                shareMark(event, i, .requestsAllowed, allowed ? "access requests allowed" : "access requests not allowed")
                shareState(position, i)
            case .added(let id, let user, let role, let permission, let approved, let oneTime):
                guard existed else { continue }
                let lane = laneIndex(id, kind: .participant, user: user)
                lanes[lane].route =
                    approved ? .approvedRequest : oneTime ? .oneTimeURL : role == .publicUser ? .publicLink : .invited
                set(
                    id, position, i,
                    ParticipantStanding(
                        status: .pending, role: role, permission: permission, userRecordName: user, isApprovedRequester: approved))
                mark(
                    lane, event, i, approved ? .approved : .invited,
                    (approved ? "request approved: " : role == .publicUser ? "joined by the public link: " : "invited: ")
                        + "\(role), \(permission)")
                if let user { setRequest(user, requests[user] == .blocked ? .blocked : .none, position, i) }
            case .updated(let id, let role, let permission):
                guard existed, let lane = index[id], var standing = current[id] else { continue }
                let before = standing
                standing.role = role
                standing.permission = permission
                set(id, position, i, standing)
                if before.role != role { mark(lane, event, i, .role, "role \(before.role) → \(role)") }
                if before.permission != permission || before.role == role {
                    mark(lane, event, i, .permission, "permission \(before.permission) → \(permission)")
                }
            case .removed(let id, let reason):
                guard existed, let lane = index[id], var standing = current[id] else { continue }
                standing.status = .removed
                standing.removal = reason
                set(id, position, i, standing)
                switch reason {
                case .left: mark(lane, event, i, .left, "left")
                case .removed: mark(lane, event, i, .removed, "removed")
                case .publicPermissionChanged: mark(lane, event, i, .dropped, "dropped by the public permission change")
                case .blocked: mark(lane, event, i, .removed, "removed (blocked)")
                }
            case .verified(let id, let user):
                guard existed else { continue }
                if let lane = index[id], var standing = current[id] {
                    standing.userRecordName = user
                    set(id, position, i, standing)
                    mark(lane, event, i, .verified, "verified as \(user)")
                }
                setRequest(user, requests[user] == .blocked ? .blocked : .none, position, i)
            case .accepted(let id, let user):
                guard existed, let lane = index[id], var standing = current[id] else { continue }
                standing.status = .accepted
                standing.userRecordName = user
                set(id, position, i, standing)
                mark(lane, event, i, .accepted, "accepted (\(standing.permission))")
            case .requested(let user):
                guard existed else { continue }
                setRequest(user, .requesting, position, i)
                mark(userLane(user), event, i, .requested, "requested access")
            case .denied(let user):
                guard existed else { continue }
                setRequest(user, requests[user] == .blocked ? .blocked : .none, position, i)
                mark(userLane(user), event, i, .denied, "request denied")
            case .blocked(let user):
                guard existed else { continue }
                setRequest(user, .blocked, position, i)
                mark(userLane(user), event, i, .blocked, "blocked")
            case .unblocked(let user):
                guard existed else { continue }
                setRequest(user, .none, position, i)
                mark(userLane(user), event, i, .unblocked, "unblocked")
            case .other:
                break
            }
        }
        // Lanes in the order of their first mark; the owner's first.
        lanes.sort { a, b in
            if (a.kind == .owner) != (b.kind == .owner) { return a.kind == .owner }
            return (a.marks.first?.position ?? .max, a.id) < (b.marks.first?.position ?? .max, b.id)
        }
    }

    /// The share as the timeline has it right after `position`.
    public func state(at position: UInt64) -> TimelineState {
        let share = shareStates.last(where: { $0.position <= position })
        let existed = share?.existed ?? false
        var participants: [String: ParticipantStanding] = [:]
        var requesters: [String] = []
        var blocked: [String] = []
        if existed {
            for lane in lanes {
                if let standing = lane.standing(at: position), lane.kind != .requester { participants[lane.id] = standing }
                if let user = lane.requestUser {
                    switch lane.requestStanding(at: position) {
                    case .requesting: requesters.append(user)
                    case .blocked: blocked.append(user)
                    case .none: break
                    }
                }
            }
        }
        return TimelineState(
            existed: existed, publicPermission: share?.publicPermission ?? Share.Participant.Permission.none,
            allowsAccessRequests: existed && (share?.allowsRequests ?? false), participants: participants,
            requesters: requesters.sorted(), blocked: blocked.sorted())
    }

    /// The events the picture shows.
    public var shownEvents: ArraySlice<ReportEvent> { events[window] }
}
