import Foundation
import ShareLedger
import ShareLedgerAudit

/// What `report share` draws: a share's timeline and the state of the chain it came from.
public struct ShareReport: Sendable {
    /// The share's lanes, marks and events.
    public var timeline: ShareTimeline
    /// The header's verification.
    public var chain: ChainStatus
    /// When the report was made.
    public var generatedAt: Date
    /// Whether emails and phones were asked for.
    public var showsContact: Bool

    /// What to draw.
    public struct Options: Sendable {
        /// The last position (or time) included; the head when `nil`.
        public var asOf: HistoryBound?
        /// The first position or time drawn (earlier events still count for who stood where).
        public var from: HistoryBound?
        /// The last position or time drawn.
        public var to: HistoryBound?
        /// Show each person's email or phone (while their key exists; "erased" once forgotten).
        public var showContact = false
        /// Only a checkpoint signed by one of these keys counts in the header (any valid one when empty).
        public var trustedKeys: [CheckpointPublicKey] = []
        /// The time written as the report's own.
        public var now = Date()

        /// Options with everything at its default.
        public init(
            asOf: HistoryBound? = nil, from: HistoryBound? = nil, to: HistoryBound? = nil, showContact: Bool = false,
            trustedKeys: [CheckpointPublicKey] = []
        ) {
            self.asOf = asOf
            self.from = from
            self.to = to
            self.showContact = showContact
            self.trustedKeys = trustedKeys
        }
    }

    /// Reads the share's history from `ledger` (its history index) and checks the chain.
    ///
    /// - Throws: `LedgerError.Code.unknownItem` when the URL names no share with events up to the
    ///   report's end.
    public static func make(ledger: ShareLedger, url: URL, options: Options = Options()) throws(LedgerError) -> ShareReport {
        let asOf = try LedgerAudit(ledger).position(atOrBefore: options.asOf ?? .position(LogPosition(UInt64.max)))
        let events = try LedgerAudit(ledger).history(of: .share(url), until: .position(asOf), limit: .max).map(ReportEvent.init)
        guard let first = events.first else {
            throw LedgerError(
                .unknownItem, "no share with this URL has events up to position \(asOf.rawValue); check the URL (`share-ledger history --share URL`)")
        }
        var timeline = ShareTimeline(
            url: url.absoluteString, token: first.token ?? "", events: events,
            window: window(events, from: options.from, to: options.to), asOf: asOf.rawValue)
        if options.showContact {
            timeline.lanes = contacts(ledger, url: url, timeline: timeline)
        }
        return ShareReport(
            timeline: timeline, chain: try ChainStatus.check(ledger, trustedKeys: options.trustedKeys), generatedAt: options.now,
            showsContact: options.showContact)
    }

    /// The indexes of the events within `from`...`to`.
    static func window(_ events: [ReportEvent], from: HistoryBound?, to: HistoryBound?) -> Range<Int> {
        func after(_ event: ReportEvent) -> Bool {
            switch from {
            case .position(let p)?: return event.position >= p.rawValue
            case .time(let t)?: return event.recordedAt >= t
            case nil: return true
            }
        }
        func before(_ event: ReportEvent) -> Bool {
            switch to {
            case .position(let p)?: return event.position <= p.rawValue
            case .time(let t)?: return event.recordedAt <= t
            case nil: return true
            }
        }
        let low = events.firstIndex(where: after) ?? events.count
        let high = (events.lastIndex(where: before) ?? -1) + 1
        return low..<max(low, high)
    }

    /// The lanes with each person's email or phone, as the share's owner sees them now; "erased" for
    /// a person whose key was destroyed.
    static func contacts(_ ledger: ShareLedger, url: URL, timeline: ShareTimeline) -> [TimelineLane] {
        var byParticipant: [String: String] = [:]
        if let share = try? ledger.container(timeline.container, userRecordName: timeline.owner).share(for: url) {
            for participant in share.participants + [share.owner] {
                if participant.userIdentity.personalDataErased == true {
                    byParticipant[participant.participantID] = "erased"
                } else if let lookup = participant.userIdentity.lookupInfo, let address = lookup.emailAddress ?? lookup.phoneNumber {
                    byParticipant[participant.participantID] = address
                }
            }
        }
        var erasedLanes = Set<String>()
        for event in timeline.events where event.personalDataErased {
            if case .added(let id, _, _, _, _, _) = event.change { erasedLanes.insert(id) }
        }
        return timeline.lanes.map { lane in
            var lane = lane
            lane.contact = erasedLanes.contains(lane.id) ? "erased" : byParticipant[lane.id]
            return lane
        }
    }
}
