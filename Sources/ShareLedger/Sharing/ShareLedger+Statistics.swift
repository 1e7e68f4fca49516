import EventLog
import SharingDomain

extension ShareLedger {
    /// Counters of the ledger: the log's (``log``, also readable directly on this value, e.g.
    /// `statistics.headPosition`) and the read models'. Encoded as one flat object.
    @dynamicMemberLookup
    public struct Statistics: Sendable, Hashable, Codable {
        /// The log's counters: events, head, streams, commands, sizes, format, durability.
        public var log: EventLog.Statistics
        /// Registered users.
        public var users: UInt64
        /// Record zones in private databases.
        public var zones: UInt64
        /// Records.
        public var records: UInt64
        /// Live shares.
        public var shares: UInt64
        /// Participants of live shares that are not removed, owners not counted.
        public var participants: UInt64
        /// Participants of live shares that accepted, owners not counted.
        public var acceptedParticipants: UInt64
        /// Residual tasks (zone creation or removal after an accept or a removal) not done yet.
        public var pendingResidualTasks: Int
        /// Residual tasks parked after failing too often (`share-ledger tasks` lists them).
        public var parkedResidualTasks: Int
        /// Seconds since the oldest pending residual task was scheduled (0 when none is pending).
        public var oldestPendingTaskAgeSeconds: Double
        /// Zones in participants' shared databases.
        public var participantZones: UInt64

        /// One of the log's counters (``log``).
        public subscript<Value>(dynamicMember keyPath: KeyPath<EventLog.Statistics, Value>) -> Value {
            log[keyPath: keyPath]
        }

        private enum CodingKeys: String, CodingKey {
            case users, zones, records, shares, participants, acceptedParticipants, pendingResidualTasks
            case parkedResidualTasks, oldestPendingTaskAgeSeconds, participantZones
        }

        init(
            log: EventLog.Statistics, users: UInt64, zones: UInt64, records: UInt64, shares: UInt64, participants: UInt64,
            acceptedParticipants: UInt64, pendingResidualTasks: Int, parkedResidualTasks: Int,
            oldestPendingTaskAgeSeconds: Double, participantZones: UInt64
        ) {
            self.log = log
            self.users = users
            self.zones = zones
            self.records = records
            self.shares = shares
            self.participants = participants
            self.acceptedParticipants = acceptedParticipants
            self.pendingResidualTasks = pendingResidualTasks
            self.parkedResidualTasks = parkedResidualTasks
            self.oldestPendingTaskAgeSeconds = oldestPendingTaskAgeSeconds
            self.participantZones = participantZones
        }

        /// Decodes the flat object ``encode(to:)`` writes.
        public init(from decoder: any Decoder) throws {
            log = try EventLog.Statistics(from: decoder)
            let container = try decoder.container(keyedBy: CodingKeys.self)
            users = try container.decode(UInt64.self, forKey: .users)
            zones = try container.decode(UInt64.self, forKey: .zones)
            records = try container.decode(UInt64.self, forKey: .records)
            shares = try container.decode(UInt64.self, forKey: .shares)
            participants = try container.decode(UInt64.self, forKey: .participants)
            acceptedParticipants = try container.decode(UInt64.self, forKey: .acceptedParticipants)
            pendingResidualTasks = try container.decode(Int.self, forKey: .pendingResidualTasks)
            parkedResidualTasks = try container.decode(Int.self, forKey: .parkedResidualTasks)
            oldestPendingTaskAgeSeconds = try container.decode(Double.self, forKey: .oldestPendingTaskAgeSeconds)
            participantZones = try container.decode(UInt64.self, forKey: .participantZones)
        }

        /// Encodes the log's counters and the read models' side by side, in one flat object.
        public func encode(to encoder: any Encoder) throws {
            try log.encode(to: encoder)
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(users, forKey: .users)
            try container.encode(zones, forKey: .zones)
            try container.encode(records, forKey: .records)
            try container.encode(shares, forKey: .shares)
            try container.encode(participants, forKey: .participants)
            try container.encode(acceptedParticipants, forKey: .acceptedParticipants)
            try container.encode(pendingResidualTasks, forKey: .pendingResidualTasks)
            try container.encode(parkedResidualTasks, forKey: .parkedResidualTasks)
            try container.encode(oldestPendingTaskAgeSeconds, forKey: .oldestPendingTaskAgeSeconds)
            try container.encode(participantZones, forKey: .participantZones)
        }
    }
}

// What a server built on the public API needs to monitor the ledger (`share-ledger serve`'s /metrics).
extension ShareLedger {
    /// Commands waiting for the writer thread (queued, not yet taken into a batch) at this moment:
    /// the writer's queue depth. A depth that stays high means callers submit faster than the
    /// writer commits (see docs/operations.md). Takes the writer's lock briefly; for monitoring, not
    /// for every request.
    public var writerQueueDepth: Int { log.writer.queuedCommands }
}
