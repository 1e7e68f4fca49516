import Foundation
import ShareLedger
import ShareLedgerAudit

/// A participant's standing in a share from some position on (what `LedgerAudit(ShareLedger).access(to:at:)`
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
    var shareStates: [TimelineFold.ShareState]

    /// Builds the timeline from `events` (a share's history, oldest first), drawing `window`.
    public init(url: String, token: String, events: [ReportEvent], window: Range<Int>? = nil, asOf: UInt64? = nil) {
        self.url = url
        self.token = token
        self.events = events
        self.window = window ?? 0..<events.count
        self.asOf = asOf ?? events.last?.position ?? 0
        container = events.first?.container ?? ""
        let fold = TimelineFold(events)
        owner = fold.owner
        lanes = fold.lanes
        shareMarks = fold.shareMarks
        shareStates = fold.shareStates
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
