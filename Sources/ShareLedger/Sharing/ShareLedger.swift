import Crypto
import Foundation
import LMDB
import SwiftProtobuf

/// A sharing ledger: CloudKit's sharing model (shares, participants, share metadata, accepting) as
/// an event-sourced, hash-chained log in LMDB with read models kept in the same commits.
///
/// Open one per directory and process, share it (it is `Sendable`), and act through a
/// ``Container`` handle for a signed-in user:
///
/// ```swift
/// let ledger = try ShareLedger.open(.init(path: "/var/lib/share-ledger"))
/// try await ledger.registerUser("_alice", in: "iCloud.com.example.notes", emailAddress: "alice@example.com")
/// let alice = ledger.container("iCloud.com.example.notes", userRecordName: "_alice")
/// let zone = try await alice.save(RecordZone(zoneID: RecordZoneID(zoneName: "Notes")))
/// ...
/// await ledger.close()
/// ```
public final class ShareLedger: Sendable {
    /// The event log underneath (for reads, subscriptions and chain verification).
    public let log: EventLog

    private init(log: EventLog) {
        self.log = log
    }

    /// Opens (or creates) the ledger at `configuration.path`.
    ///
    /// - Throws: ``LedgerError`` as ``EventLog/open(_:)`` does.
    public static func open(_ configuration: EventLog.Configuration) throws(LedgerError) -> ShareLedger {
        ShareLedger(log: try EventLog.open(configuration))
    }

    /// Commits what is queued and closes the ledger.
    public func close() async {
        await log.close()
    }

    /// A handle on `containerIdentifier` acting as the user `userRecordName` (what `CKContainer` is
    /// for the signed-in user). `nil` acts with no account: every call fails with
    /// ``LedgerError/Code/notAuthenticated``, as CloudKit's do without an iCloud account.
    public func container(_ containerIdentifier: String, userRecordName: String?) -> Container {
        Container(ledger: self, containerIdentifier: containerIdentifier, userRecordName: userRecordName)
    }

    /// Registers an account in a container: a user record name, and the email address and phone
    /// number others can invite it by. Invitations already sent to that email or phone stay
    /// unmatched until the user verifies them (``Container/requestParticipantVerification(for:lookupInfo:)``).
    ///
    /// - Throws: ``LedgerError/Code/invalidArguments`` when the name is not 1 to 64 characters of
    ///   `A-Z a-z 0-9 _ . - @ +`, the user exists, or the email or phone belongs to another user.
    @discardableResult
    public func registerUser(
        _ userRecordName: String, in containerIdentifier: String, emailAddress: String? = nil, phoneNumber: String? = nil,
        nameComponents: PersonNameComponents? = nil
    ) async throws(LedgerError) -> UserIdentity {
        try Decider.checkUserName(userRecordName)
        let output = try await container(containerIdentifier, userRecordName: userRecordName).runOne(
            .registerUser(
                name: userRecordName, email: emailAddress, phone: phoneNumber, givenName: nameComponents?.givenName,
                familyName: nameComponents?.familyName))
        guard case .user(let identity) = output else { throw LedgerError.unexpectedOutput("registerUser") }
        return identity
    }

    // MARK: - Statistics

    /// Counters of the ledger and its read models, read in one transaction.
    public func statistics() throws(LedgerError) -> EventLog.Statistics {
        try log.statistics()
    }

    // MARK: - Residual tasks

    /// Runs every residual task that is due (the zone creations and removals acceptances and
    /// removals leave behind), in the order they were scheduled, and returns how many it completed.
    /// Each completion appends its event and deletes its task in one commit; completing a task twice
    /// has no further effect.
    @discardableResult
    public func completeResidualTasks(limit: Int = .max) async throws(LedgerError) -> Int {
        var done = 0
        while done < limit {
            let tasks = try read("reading the residual tasks") { txn in
                try models.scan(txn, models.outbox, prefix: [], limit: min(256, limit - done)).compactMap {
                    entry -> (id: UInt64, container: String)? in
                    guard let id = BigEndian.uint64(entry.suffix) else { return nil }
                    return (id, try ResidualTaskState(serializedBytes: entry.value).container)
                }
            }
            guard !tasks.isEmpty else { break }
            // One command per container, so each completion is recorded in its task's container.
            var containers: [String] = []
            var byContainer: [String: [UInt64]] = [:]
            for task in tasks {
                if byContainer[task.container] == nil { containers.append(task.container) }
                byContainer[task.container, default: []].append(task.id)
            }
            for container in containers {
                let ids = byContainer[container]!
                let command = DomainCommand(
                    metadata: CommandMetadata(container: container, actor: "system"), signedIn: false,
                    steps: ids.map { .completeTask(taskID: $0) }, bytes: ids.count * 64)
                for result in try await submit(command).results { _ = try result.get() }
            }
            done += tasks.count
        }
        return done
    }

    // MARK: - Internals shared by the containers

    var configuration: EventLog.Configuration { log.configuration }

    /// A new random participant id (a UUID in its text form).
    func newParticipantID() -> String {
        var generator = RandomSourceGenerator(source: configuration.randomSource)
        var bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
        bytes[6] = (bytes[6] & 0x0F) | 0x40
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return UUID(uuid: (bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8],
            bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15])).uuidString
    }

    func newToken() -> ShareToken {
        var generator = RandomSourceGenerator(source: configuration.randomSource)
        return ShareToken.generate(using: &generator)
    }

    /// A one-time verification code: 26 characters of Crockford's base32 (130 random bits).
    func newVerificationCode() -> String {
        let alphabet = Array("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
        var generator = RandomSourceGenerator(source: configuration.randomSource)
        return String((0..<26).map { _ in alphabet[Int.random(in: 0..<32, using: &generator)] })
    }

    static func sha256(_ text: String) -> [UInt8] {
        Array(SHA256.hash(data: Array(text.utf8)))
    }

    func submit(_ command: DomainCommand) async throws(LedgerError) -> DomainOutcome {
        guard !configuration.readOnly else {
            throw LedgerError(.readOnly, "the ledger at \(configuration.path) was opened read-only")
        }
        if Task.isCancelled {
            throw LedgerError(.operationCancelled, "the task was cancelled before the command was submitted")
        }
        return try await log.writer.submit(command).get()
    }

    /// Runs `body` in a short read transaction, mapping errors to ``LedgerError``.
    func read<R>(_ doing: @autoclosure () -> String, _ body: (borrowing Transaction) throws -> R) throws(LedgerError) -> R {
        try log.read(doing(), body)
    }

    var models: ReadModels { log.store.models }
    var presenter: Presenter { Presenter(models: log.store.models, urlHost: configuration.shareURLHost) }
}

extension LedgerError {
    static func unexpectedOutput(_ call: String) -> LedgerError {
        LedgerError(.storageFailure, "\(call) returned an unexpected result; this is a bug in ShareLedger")
    }
}
