import Crypto
import Foundation
import GRDB

/// The same sharing model as ShareLedger's read models, as SQL tables, and the four actions of the
/// workload written the way a developer would with GRDB: each action reads what its rules need,
/// refuses (writing nothing) or appends its event to a hash-chained `events` table and updates the
/// rows the event changes, all inside the caller's write transaction.
///
/// Per event, the same writes as ShareLedger: the event row (envelope columns, protobuf-encoded
/// payload, previous hash, SHA-256(previous hash ‖ canonical bytes)), the stream row (version and
/// last position), the history rows (per share, per user, per container); per command, the
/// idempotency row; plus each action's read-model rows (shares, participants, shares by owner and
/// by user, zones, records, counters, the accept's outbox task). Statements are cached (prepared
/// once per connection).
enum SQLiteModel {
    static let schema = """
        CREATE TABLE events(
            position INTEGER PRIMARY KEY, recorded_at INTEGER NOT NULL, container TEXT NOT NULL, actor TEXT NOT NULL,
            command_id BLOB NOT NULL, stream TEXT NOT NULL, stream_version INTEGER NOT NULL,
            stream_previous_position INTEGER NOT NULL, event_type TEXT NOT NULL, payload BLOB NOT NULL,
            previous_hash BLOB NOT NULL, hash BLOB NOT NULL);
        CREATE TABLE streams(
            container TEXT NOT NULL, stream TEXT NOT NULL, version INTEGER NOT NULL, last_position INTEGER NOT NULL,
            PRIMARY KEY(container, stream)) WITHOUT ROWID;
        CREATE TABLE commands(
            container TEXT NOT NULL, command_id BLOB NOT NULL, first_position INTEGER NOT NULL, count INTEGER NOT NULL,
            PRIMARY KEY(container, command_id)) WITHOUT ROWID;
        CREATE TABLE users(
            container TEXT NOT NULL, name TEXT NOT NULL, email TEXT NOT NULL, phone TEXT NOT NULL,
            registered_at INTEGER NOT NULL, PRIMARY KEY(container, name)) WITHOUT ROWID;
        CREATE TABLE user_lookup(
            container TEXT NOT NULL, kind TEXT NOT NULL, value TEXT NOT NULL, name TEXT NOT NULL,
            PRIMARY KEY(container, kind, value)) WITHOUT ROWID;
        CREATE TABLE zones(
            container TEXT NOT NULL, owner TEXT NOT NULL, zone TEXT NOT NULL, zone_id INTEGER NOT NULL,
            capabilities INTEGER NOT NULL, zone_share_token TEXT NOT NULL, hierarchy_share_count INTEGER NOT NULL,
            created_at INTEGER NOT NULL, PRIMARY KEY(container, owner, zone)) WITHOUT ROWID;
        CREATE TABLE records(
            zone_id INTEGER NOT NULL, name TEXT NOT NULL, record_type TEXT NOT NULL, parent TEXT NOT NULL,
            share_token TEXT NOT NULL, last_share_token TEXT NOT NULL, change_tag TEXT NOT NULL,
            modified_at INTEGER NOT NULL, PRIMARY KEY(zone_id, name)) WITHOUT ROWID;
        CREATE INDEX records_by_parent ON records(zone_id, parent);
        CREATE TABLE shares(
            token TEXT NOT NULL PRIMARY KEY, container TEXT NOT NULL, owner TEXT NOT NULL, zone TEXT NOT NULL,
            zone_id INTEGER NOT NULL, share_record_name TEXT NOT NULL, root_record TEXT NOT NULL, title TEXT NOT NULL,
            public_permission INTEGER NOT NULL, change_tag INTEGER NOT NULL, created_at INTEGER NOT NULL,
            owner_participant_id TEXT NOT NULL, active_participant_count INTEGER NOT NULL,
            unmatched_pending_count INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE participants(
            token TEXT NOT NULL, participant_id TEXT NOT NULL, user_name TEXT NOT NULL, lookup_email TEXT NOT NULL,
            lookup_phone TEXT NOT NULL, lookup_user TEXT NOT NULL, role INTEGER NOT NULL, permission INTEGER NOT NULL,
            status INTEGER NOT NULL, added_at INTEGER NOT NULL, PRIMARY KEY(token, participant_id)) WITHOUT ROWID;
        CREATE TABLE shares_by_owner(
            container TEXT NOT NULL, owner TEXT NOT NULL, token TEXT NOT NULL,
            PRIMARY KEY(container, owner, token)) WITHOUT ROWID;
        CREATE TABLE shares_by_user(
            container TEXT NOT NULL, user TEXT NOT NULL, token TEXT NOT NULL, participant_id TEXT NOT NULL,
            PRIMARY KEY(container, user, token)) WITHOUT ROWID;
        CREATE TABLE counters(name TEXT NOT NULL PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE outbox(
            task_id INTEGER PRIMARY KEY, kind INTEGER NOT NULL, container TEXT NOT NULL, user TEXT NOT NULL,
            owner TEXT NOT NULL, zone TEXT NOT NULL, token TEXT NOT NULL, scheduled_at INTEGER NOT NULL);
        CREATE TABLE share_history(token TEXT NOT NULL, position INTEGER NOT NULL, PRIMARY KEY(token, position)) WITHOUT ROWID;
        CREATE TABLE user_history(
            container TEXT NOT NULL, user TEXT NOT NULL, position INTEGER NOT NULL,
            PRIMARY KEY(container, user, position)) WITHOUT ROWID;
        CREATE TABLE container_history(
            container TEXT NOT NULL, position INTEGER NOT NULL, PRIMARY KEY(container, position)) WITHOUT ROWID;
        """

    // Roles, permissions and statuses as ShareLedger's protobuf enums number them.
    static let roleOwner: Int64 = 1
    static let rolePrivateUser: Int64 = 3
    static let permissionReadWrite: Int64 = 3
    static let statusPending: Int64 = 1
    static let statusAccepted: Int64 = 2
    static let statusRemoved: Int64 = 3

    /// A refused action: it wrote nothing, and the other actions of its transaction commit.
    struct Refusal: Error, CustomStringConvertible {
        var description: String
    }

    /// The log's head, read at the start of every transaction.
    struct Head {
        var position: Int64
        var hash: [UInt8]
    }

    static func readHead(_ db: Database) throws -> Head {
        if let row = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT position, hash FROM events ORDER BY position DESC LIMIT 1"))
        {
            let hash: Data = row[1]
            return Head(position: row[0], hash: [UInt8](hash))
        }
        return Head(position: 0, hash: [UInt8](repeating: 0, count: 32))
    }

    // MARK: - Answers (what the caller gets back, as ShareLedger's API returns a Share or Metadata)

    struct ParticipantAnswer: Sendable {
        var participantID: String
        var userName: String
        var email: String
        var role: Int64
        var permission: Int64
        var status: Int64
        var addedAt: Int64
    }

    struct ShareAnswer: Sendable {
        var token: String
        var container: String
        var owner: String
        var title: String
        var rootRecord: String
        var changeTag: Int64
        var participants: [ParticipantAnswer]
    }

    struct MetadataAnswer: Sendable {
        var share: ShareAnswer
        var ownerEmail: String
        var role: Int64
        var status: Int64
        var permission: Int64
    }

    static func shareAnswer(_ db: Database, token: String) throws -> ShareAnswer {
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT container, owner, title, root_record, change_tag FROM shares WHERE token = ?"),
                arguments: [token])
        else { throw Refusal(description: "unknown share") }
        let participants = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT p.participant_id, p.user_name, u.email, p.role, p.permission, p.status, p.added_at
                    FROM participants p LEFT JOIN users u ON u.container = ? AND u.name = p.user_name
                    WHERE p.token = ? AND p.status != ?
                    """),
            arguments: [row[0] as String, token, statusRemoved]
        ).map { p in
            ParticipantAnswer(
                participantID: p[0], userName: p[1], email: p[2] ?? "", role: p[3], permission: p[4], status: p[5],
                addedAt: p[6])
        }
        return ShareAnswer(
            token: token, container: row[0], owner: row[1], title: row[2], rootRecord: row[3], changeTag: row[4],
            participants: participants)
    }

    // MARK: - Setup (not measured)

    static func setUp(_ db: Database, _ workload: Workload) throws {
        let now = nowMicros()
        var zoneID: Int64 = 0
        for caller in 0..<workload.callers {
            let owner = Workload.owner(caller)
            try db.execute(
                sql: "INSERT INTO users VALUES (?, ?, '', '', ?)", arguments: [Workload.container, owner, now])
            for index in 0..<workload.invitees {
                let email = Workload.email(caller, index)
                try db.execute(
                    sql: "INSERT INTO users VALUES (?, ?, ?, '', ?)",
                    arguments: [Workload.container, Workload.invitee(caller, index), email, now])
                try db.execute(
                    sql: "INSERT INTO user_lookup VALUES (?, 'email', ?, ?)",
                    arguments: [Workload.container, email.lowercased(), Workload.invitee(caller, index)])
            }
            zoneID += 1
            try db.execute(
                sql: "INSERT INTO zones VALUES (?, ?, ?, ?, 15, '', 0, ?)",
                arguments: [Workload.container, owner, Workload.zoneName, zoneID, now])
            for lifecycle in 0..<workload.lifecycles {
                try db.execute(
                    sql: "INSERT INTO records VALUES (?, ?, 'Board', '', '', '', '1', ?)",
                    arguments: [zoneID, Workload.record(lifecycle), now])
            }
        }
    }

    // MARK: - The actions

    /// Who acts, with a fresh time-ordered command id (ShareLedger's default is UUIDv7, so that its
    /// idempotency records land at the right edge of their B-tree; the same here).
    struct Command {
        var actor: String
        var commandID: Data
        var recordedAt: Int64

        init(actor: String) {
            self.actor = actor
            recordedAt = nowMicros()
            var bytes = [UInt8](repeating: 0, count: 16)
            let millis = UInt64(recordedAt / 1000)
            for i in 0..<6 { bytes[i] = UInt8(truncatingIfNeeded: millis >> (40 - 8 * UInt64(i))) }
            var random = SystemRandomNumberGenerator()
            let tail = random.next() as UInt64
            let mid = random.next() as UInt64
            bytes[6] = 0x70 | UInt8(truncatingIfNeeded: mid & 0x0F)
            bytes[7] = UInt8(truncatingIfNeeded: mid >> 8)
            bytes[8] = 0x80 | UInt8(truncatingIfNeeded: tail & 0x3F)
            for i in 9..<16 { bytes[i] = UInt8(truncatingIfNeeded: tail >> (8 * UInt64(i - 8))) }
            commandID = Data(bytes)
        }
    }

    static func createShare(
        _ db: Database, _ head: inout Head, owner: String, root: String, title: String, token: String,
        shareRecordName: String, ownerParticipantID: String
    ) throws -> ShareAnswer {
        let command = Command(actor: owner)
        try checkCommand(db, command)
        try requireUser(db, owner)
        guard
            let zone = try Row.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT zone_id, capabilities, zone_share_token FROM zones
                        WHERE container = ? AND owner = ? AND zone = ?
                        """),
                arguments: [Workload.container, owner, Workload.zoneName])
        else { throw Refusal(description: "zone not found") }
        let zoneID: Int64 = zone[0]
        guard (zone[2] as String).isEmpty else { throw Refusal(description: "the zone is shared as a whole") }
        guard
            let record = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT parent, share_token FROM records WHERE zone_id = ? AND name = ?"),
                arguments: [zoneID, root])
        else { throw Refusal(description: "unknown root record") }
        guard (record[1] as String).isEmpty else { throw Refusal(description: "already shared") }
        // A record below the root in a share would refuse it (ShareLedger walks the children).
        if try Row.fetchOne(
            db.cachedStatement(
                sql: "SELECT 1 FROM records WHERE zone_id = ? AND parent = ? AND share_token != '' LIMIT 1"),
            arguments: [zoneID, root]) != nil
        {
            throw Refusal(description: "a child is shared")
        }
        if try Row.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM shares WHERE token = ?"), arguments: [token]) != nil {
            throw Refusal(description: "token in use")
        }
        var payload = ProtoWriter()
        payload.string(1, token)
        payload.string(2, owner)
        payload.string(3, Workload.zoneName)
        payload.string(4, shareRecordName)
        payload.string(5, root)
        payload.string(6, title)
        payload.string(8, ownerParticipantID)
        let position = try appendEvent(
            db, &head, command, stream: "share/" + token, type: "shareledger.events.v1.ShareCreated", payload: payload)
        let now = command.recordedAt
        try db.cachedStatement(sql: "INSERT INTO shares VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 1, ?, ?, 1, 0)").execute(
            arguments: [
                token, Workload.container, owner, Workload.zoneName, zoneID, shareRecordName, root, title, now,
                ownerParticipantID,
            ])
        try db.cachedStatement(sql: "INSERT INTO participants VALUES (?, ?, ?, '', '', ?, ?, ?, ?, ?)").execute(
            arguments: [token, ownerParticipantID, owner, owner, roleOwner, permissionReadWrite, statusAccepted, now])
        try db.cachedStatement(sql: "INSERT INTO shares_by_owner VALUES (?, ?, ?)").execute(
            arguments: [Workload.container, owner, token])
        try db.cachedStatement(sql: "INSERT INTO shares_by_user VALUES (?, ?, ?, ?)").execute(
            arguments: [Workload.container, owner, token, ownerParticipantID])
        try db.cachedStatement(
            sql: """
                UPDATE zones SET hierarchy_share_count = hierarchy_share_count + 1
                WHERE container = ? AND owner = ? AND zone = ?
                """
        ).execute(arguments: [Workload.container, owner, Workload.zoneName])
        try db.cachedStatement(
            sql: "UPDATE records SET share_token = ?, last_share_token = ? WHERE zone_id = ? AND name = ?"
        ).execute(arguments: [token, token, zoneID, root])
        try addCounter(db, "shares", 1)
        try history(db, position: position, token: token, users: [owner])
        try recordCommand(db, command, first: position, count: 1)
        return try shareAnswer(db, token: token)
    }

    static func invite(
        _ db: Database, _ head: inout Head, owner: String, token: String, email: String, newParticipantID: String
    ) throws -> ShareAnswer {
        let command = Command(actor: owner)
        try checkCommand(db, command)
        try requireUser(db, owner)
        let share = try liveShare(db, token)
        let ownerName: String = share[0]
        guard let manager = try participation(db, user: owner, token: token), manager.role == roleOwner else {
            throw Refusal(description: "only the owner or an administrator invites")
        }
        guard (share[2] as Int64) == 0 else { throw Refusal(description: "public share") }
        let user =
            try String.fetchOne(
                db.cachedStatement(sql: "SELECT name FROM user_lookup WHERE container = ? AND kind = 'email' AND value = ?"),
                arguments: [Workload.container, email.lowercased()]) ?? ""
        guard user != ownerName else { throw Refusal(description: "the owner is a participant already") }
        if !user.isEmpty, try participation(db, user: user, token: token) != nil {
            throw Refusal(description: "invited already (the workload never invites twice)")
        }
        // An earlier invitation to the same email is the same person.
        for row in try Row.fetchAll(
            db.cachedStatement(sql: "SELECT lookup_email, status FROM participants WHERE token = ?"), arguments: [token])
        where (row[0] as String).lowercased() == email.lowercased() && (row[1] as Int64) != statusRemoved {
            throw Refusal(description: "invited already (the workload never invites twice)")
        }
        guard (share[1] as Int64) < 100 else { throw Refusal(description: "too many participants") }
        var payload = ProtoWriter()
        payload.string(1, token)
        payload.string(2, newParticipantID)
        payload.string(3, user)
        var lookup = ProtoWriter()
        lookup.string(1, email)
        payload.bytes(4, lookup.bytes)
        payload.varint(5, UInt64(rolePrivateUser))
        payload.varint(6, UInt64(permissionReadWrite))
        let position = try appendEvent(
            db, &head, command, stream: "share/" + token, type: "shareledger.events.v1.ParticipantAdded", payload: payload)
        try db.cachedStatement(sql: "INSERT INTO participants VALUES (?, ?, ?, ?, '', '', ?, ?, ?, ?)").execute(
            arguments: [
                token, newParticipantID, user, email, rolePrivateUser, permissionReadWrite, statusPending,
                command.recordedAt,
            ])
        if !user.isEmpty {
            try db.cachedStatement(sql: "INSERT INTO shares_by_user VALUES (?, ?, ?, ?)").execute(
                arguments: [Workload.container, user, token, newParticipantID])
        }
        try db.cachedStatement(
            sql: """
                UPDATE shares SET active_participant_count = active_participant_count + 1, change_tag = change_tag + 1,
                unmatched_pending_count = unmatched_pending_count + ? WHERE token = ?
                """
        ).execute(arguments: [user.isEmpty ? 1 : 0, token])
        try addCounter(db, "participants", 1)
        try history(db, position: position, token: token, users: [owner, user])
        try recordCommand(db, command, first: position, count: 1)
        return try shareAnswer(db, token: token)
    }

    static func fetchMetadata(_ db: Database, _ head: inout Head, user: String, token: String) throws -> MetadataAnswer {
        let command = Command(actor: user)
        try checkCommand(db, command)
        try requireUser(db, user)
        let share = try liveShare(db, token)
        guard let standing = try participation(db, user: user, token: token), standing.status != statusRemoved else {
            throw Refusal(description: "not shared with you")
        }
        let answer = try shareAnswer(db, token: token)
        let ownerEmail =
            try String.fetchOne(
                db.cachedStatement(sql: "SELECT email FROM users WHERE container = ? AND name = ?"),
                arguments: [Workload.container, share[0] as String]) ?? ""
        var payload = ProtoWriter()
        payload.string(1, token)
        payload.string(2, Workload.container)
        payload.varint(4, UInt64(standing.role))
        payload.varint(5, UInt64(standing.status))
        payload.varint(6, UInt64(standing.permission))
        let position = try appendEvent(
            db, &head, command, stream: "user/" + user, type: "shareledger.events.v1.ShareMetadataFetched",
            payload: payload)
        try history(db, position: position, token: token, users: [user])
        try recordCommand(db, command, first: position, count: 1)
        return MetadataAnswer(
            share: answer, ownerEmail: ownerEmail, role: standing.role, status: standing.status,
            permission: standing.permission)
    }

    static func accept(_ db: Database, _ head: inout Head, user: String, metadata: MetadataAnswer) throws -> ShareAnswer {
        let command = Command(actor: user)
        let token = metadata.share.token
        try checkCommand(db, command)
        try requireUser(db, user)
        guard metadata.share.container == Workload.container else { throw Refusal(description: "bad container") }
        let share = try liveShare(db, token)
        guard let entry = try participation(db, user: user, token: token) else {
            throw Refusal(description: "no invitation")
        }
        guard entry.role != roleOwner, entry.status == statusPending else {
            return try shareAnswer(db, token: token)  // accepted already: nothing new
        }
        var payload = ProtoWriter()
        payload.string(1, token)
        payload.string(2, entry.participantID)
        payload.string(3, user)
        let position = try appendEvent(
            db, &head, command, stream: "share/" + token, type: "shareledger.events.v1.ShareAccepted", payload: payload)
        try db.cachedStatement(
            sql: "UPDATE participants SET status = ?, user_name = ? WHERE token = ? AND participant_id = ?"
        ).execute(arguments: [statusAccepted, user, token, entry.participantID])
        try addCounter(db, "acceptedParticipants", 1)
        try db.cachedStatement(sql: "INSERT INTO outbox VALUES (?, 1, ?, ?, ?, ?, ?, ?)").execute(
            arguments: [position << 12, Workload.container, user, share[0] as String, share[3] as String, token, command.recordedAt])
        try db.cachedStatement(sql: "UPDATE shares SET change_tag = change_tag + 1 WHERE token = ?").execute(
            arguments: [token])
        try history(db, position: position, token: token, users: [user])
        try recordCommand(db, command, first: position, count: 1)
        return try shareAnswer(db, token: token)
    }

    // MARK: - Shared steps

    private static func checkCommand(_ db: Database, _ command: Command) throws {
        if try Row.fetchOne(
            db.cachedStatement(sql: "SELECT first_position FROM commands WHERE container = ? AND command_id = ?"),
            arguments: [Workload.container, command.commandID]) != nil
        {
            throw Refusal(description: "command applied already")
        }
    }

    private static func requireUser(_ db: Database, _ name: String) throws {
        guard
            try Row.fetchOne(
                db.cachedStatement(sql: "SELECT registered_at FROM users WHERE container = ? AND name = ?"),
                arguments: [Workload.container, name]) != nil
        else { throw Refusal(description: "not authenticated") }
    }

    /// owner, active participant count, public permission, zone.
    private static func liveShare(_ db: Database, _ token: String) throws -> Row {
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT owner, active_participant_count, public_permission, zone FROM shares WHERE token = ?"),
                arguments: [token])
        else { throw Refusal(description: "unknown share") }
        return row
    }

    private struct Participation {
        var participantID: String
        var role: Int64
        var permission: Int64
        var status: Int64
    }

    private static func participation(_ db: Database, user: String, token: String) throws -> Participation? {
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT p.participant_id, p.role, p.permission, p.status FROM shares_by_user s
                        JOIN participants p ON p.token = s.token AND p.participant_id = s.participant_id
                        WHERE s.container = ? AND s.user = ? AND s.token = ?
                        """),
                arguments: [Workload.container, user, token])
        else { return nil }
        return Participation(participantID: row[0], role: row[1], permission: row[2], status: row[3])
    }

    /// Appends one event: its envelope's canonical bytes are hashed with the previous event's hash,
    /// the row is inserted, and its stream's row moves on.
    private static func appendEvent(
        _ db: Database, _ head: inout Head, _ command: Command, stream: String, type: String, payload: ProtoWriter
    ) throws -> Int64 {
        let streamRow = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT version, last_position FROM streams WHERE container = ? AND stream = ?"),
            arguments: [Workload.container, stream])
        let version: Int64 = (streamRow?[0] ?? 0) + 1
        let streamPrevious: Int64 = streamRow?[1] ?? 0
        let position = head.position + 1
        var canonical = ProtoWriter()
        canonical.varint(1, UInt64(position))
        canonical.varint(2, UInt64(command.recordedAt))
        canonical.string(3, Workload.container)
        canonical.string(4, command.actor)
        canonical.bytes(5, [UInt8](command.commandID))
        canonical.varint(8, 1)
        canonical.string(9, stream)
        canonical.varint(10, UInt64(version))
        canonical.varint(11, UInt64(streamPrevious))
        canonical.string(12, type)
        canonical.bytes(13, payload.bytes)
        canonical.bytes(14, head.hash)
        var hasher = SHA256()
        hasher.update(data: head.hash)
        hasher.update(data: canonical.bytes)
        let hash = Array(hasher.finalize())
        try db.cachedStatement(sql: "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)").execute(
            arguments: [
                position, command.recordedAt, Workload.container, command.actor, command.commandID, stream, version,
                streamPrevious, type, Data(payload.bytes), Data(head.hash), Data(hash),
            ])
        try db.cachedStatement(
            sql: """
                INSERT INTO streams VALUES (?, ?, ?, ?)
                ON CONFLICT(container, stream) DO UPDATE SET version = excluded.version, last_position = excluded.last_position
                """
        ).execute(arguments: [Workload.container, stream, version, position])
        head = Head(position: position, hash: hash)
        return position
    }

    private static func history(_ db: Database, position: Int64, token: String, users: [String]) throws {
        try db.cachedStatement(sql: "INSERT INTO share_history VALUES (?, ?)").execute(arguments: [token, position])
        var seen: Set<String> = []
        for user in users where !user.isEmpty && seen.insert(user).inserted {
            try db.cachedStatement(sql: "INSERT INTO user_history VALUES (?, ?, ?)").execute(
                arguments: [Workload.container, user, position])
        }
        try db.cachedStatement(sql: "INSERT INTO container_history VALUES (?, ?)").execute(
            arguments: [Workload.container, position])
    }

    private static func addCounter(_ db: Database, _ name: String, _ delta: Int64) throws {
        try db.cachedStatement(
            sql: "INSERT INTO counters VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = value + excluded.value"
        ).execute(arguments: [name, delta])
    }

    private static func recordCommand(_ db: Database, _ command: Command, first: Int64, count: Int64) throws {
        try db.cachedStatement(sql: "INSERT INTO commands VALUES (?, ?, ?, ?)").execute(
            arguments: [Workload.container, command.commandID, first, count])
    }

    static func nowMicros() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1_000_000 + Int64(spec.tv_nsec) / 1_000
    }
}

/// Protocol Buffers wire format, just enough for the payloads and the canonical envelope bytes
/// (ShareLedger's are protobuf too).
struct ProtoWriter {
    var bytes: [UInt8] = []

    init() { bytes.reserveCapacity(128) }

    mutating func varint(_ field: UInt64, _ value: UInt64) {
        guard value != 0 else { return }
        raw(field << 3)
        raw(value)
    }

    mutating func string(_ field: UInt64, _ value: String) {
        guard !value.isEmpty else { return }
        raw(field << 3 | 2)
        raw(UInt64(value.utf8.count))
        bytes.append(contentsOf: value.utf8)
    }

    mutating func bytes(_ field: UInt64, _ value: [UInt8]) {
        guard !value.isEmpty else { return }
        raw(field << 3 | 2)
        raw(UInt64(value.count))
        bytes.append(contentsOf: value)
    }

    private mutating func raw(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }
}
