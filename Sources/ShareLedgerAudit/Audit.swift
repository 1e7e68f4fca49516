import EventLog
import Foundation
import LMDB
import ShareLedger
import SharingDomain

/// What ``LedgerAudit/audit(scratchPath:options:progress:)`` found.
public struct AuditReport: Sendable, Hashable, Codable {
    /// Whether everything holds: the chain, every event's payload, the stream and command records,
    /// every sharing event being one the rules could have produced from the state before it
    /// (`EventValidator`), and every read model against a rebuild from the log.
    public var ok: Bool
    /// Events checked.
    public var events: UInt64
    /// The head position.
    public var headPosition: UInt64
    /// The head hash, hexadecimal.
    public var headHash: String
    /// The first position where something is wrong, if any.
    public var firstBadPosition: UInt64?
    /// What is wrong, in words.
    public var problems: [String]
    /// Whether every read model equals its rebuild from the log.
    public var projectionsMatch: Bool
    /// Read-model databases that differ from the rebuild, with the first differing key (hex; for
    /// `rm_user_lookup`, whose keys are email addresses and phone numbers, a placeholder instead).
    public var projectionDifferences: [String: String]
    /// Whether the stream and command records (the log's own indexes) agree with the log.
    public var indexesMatch: Bool
    /// Signed checkpoints stored in the ledger.
    public var checkpoints: Int = 0
    /// Checkpoints whose signature verified with a trusted key (``AuditOptions/trustedKeys``) and
    /// whose position still holds the checkpointed hash.
    public var checkpointsVerified: Int = 0
    /// Pinned heads (``AuditOptions/expectedHeads``) the log still holds.
    public var expectedHeadsVerified: Int = 0
    /// The first position whose hash was recomputed: always 1 (``AuditOptions/fromCheckpoint``
    /// no longer skips the events before the checkpoint).
    public var chainVerifiedFrom: UInt64 = 1
    /// The position `derived/` (the cache of the log: stream and command records, read models)
    /// reflects, when it is behind the head: it matches the log there (or ``problems`` say where it
    /// does not), the stream and command records and read models were compared as of that position,
    /// and the next open for writing brings it up to the head. Not a problem: nil when it is at the
    /// head, or when the ledger keeps no `derived/`.
    public var derivedPosition: UInt64? = nil
    /// Events that hold personal data in plaintext (`docs/events.md`, "Personal data"):
    /// registrations and share titles written before crypto-shredding, invitations' and lookups'
    /// email or phone written before those were sealed, anything written with sealing off. Not a
    /// problem of the audit (`ok` does not depend on it): a count for the operator, who can
    /// re-encrypt the ledger into a new one (``LedgerAudit/importResealingPersonalData(from:progress:)``;
    /// `docs/operations.md`, "Personal data written before crypto-shredding").
    public var eventsWithPlaintextPersonalData: UInt64 = 0
}

extension LedgerAudit {
    /// Audits the ledger: verifies the hash chain from the first event, decodes every event, checks
    /// the stream and command records against the log, rebuilds every read model from the log into a
    /// scratch ledger at `scratchPath` (created, then removed), checking each sharing event against
    /// the rules as it goes (the first the rules could not have produced is reported with its position,
    /// and the rebuild stops there), and compares it with the live one.
    /// Checks every stored checkpoint against the log (and, with ``AuditOptions/trustedKeys``, its
    /// signature), and every head pinned in ``AuditOptions/expectedHeads``.
    ///
    /// Reads in chunks of short read transactions; the live ledger keeps working meanwhile (a
    /// comparison against a ledger that changes during the audit can report differences; audit a
    /// quiet ledger or a copy).
    public func audit(
        scratchPath: String, options: AuditOptions = AuditOptions(), progress: (@Sendable (UInt64, UInt64) -> Void)? = nil
    ) throws(LedgerError)
        -> AuditReport
    {
        // What `derived/` holds, not a read-only open's catch-up of it in memory.
        do {
            return try LogStore.$readsAsStored.withValue(true) {
                try auditAsStored(scratchPath: scratchPath, options: options, progress: progress)
            }
        } catch let error as LedgerError {
            throw error
        } catch {
            throw LedgerError.wrap(error, while: "auditing the ledger at \(configuration.path)")
        }
    }

    private func auditAsStored(
        scratchPath: String, options: AuditOptions, progress: (@Sendable (UInt64, UInt64) -> Void)?
    ) throws(LedgerError) -> AuditReport {
        let head = try log.head()
        let headPosition = head.position.rawValue
        var findings = AuditFindings()
        func bad(_ position: UInt64?, _ text: String) { findings.bad(position, text) }

        // 1. The chain, always from the first event: a checkpoint vouches for the history before it
        //    only while that history still hashes to it, which only recomputing it shows.
        if options.fromCheckpoint && options.trustedKeys.isEmpty {
            throw LedgerError(
                .invalidArguments, "auditing from a checkpoint needs a trusted key (--trusted-key) to verify it with")
        }
        let checkpoints = try auditCheckpoints(options, head: headPosition, bad: bad)
        if options.fromCheckpoint && checkpoints.newestVerified == 0 && checkpoints.stored > 0 {
            bad(nil, "no checkpoint signed by a trusted key still matches the log, so there is no checkpoint to audit from")
        }
        let chainStart: UInt64 = 0
        let chain = try log.verifyChain(after: chainStart)
        if !chain.isValid, let position = chain.firstBadPosition {
            bad(position, "hash chain broken at position \(position): \(chain.problem ?? "")")
        }

        // `derived/` is a cache of the log: compared with it at the position it records (behind the
        // head is normal: a process stopped between the two commits), and reported only when it
        // disagrees with the log there.
        var derived = try derivedAgainstLog(head: headPosition, bad: bad)
        let compareAt = derived.compareAt
        // Every row of derived/ against its checksum: damage no read reached. Where there is some,
        // derived/ is not compared entry by entry (its rows cannot be read back).
        let rowCheck = log.store.checkDerivedRows()
        if !rowCheck.failed.isEmpty {
            derived.comparable = false
            bad(
                nil, "derived/ holds rows damaged at rest in \(rowCheck.failed.map(\.database).joined(separator: ", ")) "
                    + "(\(rowCheck.failed[0].error)): derived/ is a cache of the log, which this does not touch; "
                    + "`share-ledger rebuild` derives it again")
        }

        // 2. Every payload decodes; stream and command records rebuilt from the log.
        let scan = try scanLog(head: headPosition, compareAt: compareAt, bad: bad, progress: progress)
        var indexesMatch = derived.comparable
        // Records that name events beyond the head: the log's tail was cut (reported once, at the cut).
        let beyondHead = rowCheck.failed.isEmpty ? try recordsBeyondHead(headPosition) : nil
        if let beyondHead {
            indexesMatch = false
            bad(headPosition + 1, AuditReport.cutTailProblem(head: headPosition, named: beyondHead))
        }
        if derived.comparable {
            let expected = scan.expected
            let records = try compareRecords(
                streams: expected.streams, commands: expected.commands, head: headPosition, beyondHead: beyondHead, bad: bad)
            indexesMatch = indexesMatch && records.matches
            findings.problems.append(contentsOf: records.problems)
        }

        // 3. Checkpoints and pinned heads: checked with the chain, above.

        // 4. Read models against a rebuild (as of where `derived/` is).
        try? FileManager.default.removeItem(atPath: scratchPath)
        defer { try? FileManager.default.removeItem(atPath: scratchPath) }
        var readModels: (matches: Bool, differences: [String: String]) = (false, [:])
        if rowCheck.failed.isEmpty {
            readModels = compareReadModels(
                scratchPath: scratchPath, through: compareAt < headPosition ? compareAt : .max, comparable: derived.comparable,
                findings: &findings)
        }
        return AuditReport(
            ok: findings.problems.isEmpty, events: scan.checked, headPosition: headPosition, headHash: head.hash.hex,
            firstBadPosition: findings.firstBad, problems: findings.problems, projectionsMatch: readModels.matches,
            projectionDifferences: readModels.differences, indexesMatch: indexesMatch, checkpoints: checkpoints.stored,
            checkpointsVerified: checkpoints.verified, expectedHeadsVerified: checkpoints.headsVerified,
            chainVerifiedFrom: chainStart + 1,
            derivedPosition: derived.comparable && compareAt < headPosition ? compareAt : nil,
            eventsWithPlaintextPersonalData: scan.plaintextPersonal)
    }

    /// Step 2 of an audit: decodes every event of the log up to `head` (in chunks of short read
    /// transactions), reporting those that do not decode and the gaps, and builds the stream and
    /// command records the log implies (also as of `compareAt`, where `derived/` is compared).
    private func scanLog(
        head: UInt64, compareAt: UInt64, bad: (UInt64?, String) -> Void, progress: (@Sendable (UInt64, UInt64) -> Void)?
    ) throws(LedgerError) -> AuditScan {
        var scan = AuditScan()
        var after: UInt64 = 0
        while after < head {
            var chunk: [EventEnvelope]
            do {
                chunk = try log.events(after: LogPosition(after), limit: 8_192)
            } catch {
                // A stored entry does not decode: find it, report it, go on after it.
                chunk = try eventsOneByOne(after: &after, head: head, checked: &scan.checked, bad: bad)
                if chunk.isEmpty {
                    continue
                }
            }
            guard let last = chunk.last else { break }
            for envelope in chunk { scan.check(envelope, compareAt: compareAt, bad: bad) }
            after = last.position.rawValue
            progress?(after, head)
        }
        return scan
    }

    /// After a chunk failed to decode: the events after `after`, read one at a time, up to the first
    /// that does not decode (reported, counted in `checked`, and passed: `after` moves on to it) once
    /// some did; a gap is reported once and skipped.
    private func eventsOneByOne(
        after: inout UInt64, head: UInt64, checked: inout UInt64, bad: (UInt64?, String) -> Void
    ) throws(LedgerError) -> [EventEnvelope] {
        var chunk: [EventEnvelope] = []
        var position = after + 1
        while chunk.count < 8_192 && position <= head {
            do {
                guard let envelope = try log.event(at: LogPosition(position)) else {
                    // A gap (a damaged key can make the head look billions of events away): one
                    // report for it, and on at the next stored entry, not one lookup per missing position.
                    let next = try log.nextStoredPosition(atLeast: LogPosition(position)).map { max($0, position + 1) }
                    let end = min(next ?? head + 1, head + 1)
                    bad(
                        position,
                        end - position == 1
                            ? "event \(position) is missing from the log" : "events \(position) through \(end - 1) are missing from the log")
                    after = end - 1
                    position = end
                    continue
                }
                chunk.append(envelope)
            } catch {
                bad(position, "event \(position) does not decode: \(error.message)")
                checked += 1
                after = position
                position += 1
                if chunk.isEmpty { continue }
                break
            }
            position += 1
        }
        return chunk
    }

    /// Step 4 of an audit: the read models against a rebuild from the log into `scratchPath` (as of
    /// `last`), each event checked against the rules; differences are reported in `findings` only
    /// when `derived/` is `comparable` (read models of another history: the position says it all).
    private func compareReadModels(
        scratchPath: String, through last: UInt64, comparable: Bool, findings: inout AuditFindings
    ) -> (matches: Bool, differences: [String: String]) {
        var differences: [String: String] = [:]
        do {
            let comparison = try verifyReadModels(scratchPath: scratchPath, through: last)
            if let inadmissible = comparison.inadmissible {
                findings.bad(inadmissible.position, inadmissible.text)
            }
            for difference in comparison.differences where comparable {
                // The keys of the lookup index are email addresses and phone numbers: report a
                // placeholder instead of their hex (docs/operations.md, no personal data in output).
                let key =
                    difference.database == "rm_user_lookup"
                    ? PersonalData.redact(difference.firstDifferingKeyHex, as: .text) : difference.firstDifferingKeyHex
                differences[difference.database] = key
                findings.problems.append("read model \(difference.database) differs from its rebuild (first key \(key))")
            }
            return (comparison.matches && comparable, differences)
        } catch {
            findings.problems.append("the read models could not be rebuilt for comparison: \(error.message)")
            return (false, differences)
        }
    }

    /// Where the audit compares `derived/` with the log: at the position `derived/` records when it
    /// is behind the head and its hash is the log's there (`comparable`); at the head when the
    /// ledger keeps no `derived/`. A position whose hash is not the log's event's there (the log was
    /// rewritten after `derived/` was derived from it, or `derived/` is another ledger's) is reported
    /// at that position, and one beyond the head at the position after the head (a cut tail); then
    /// nothing is compared entry by entry (`comparable` false).
    func derivedAgainstLog(
        head: UInt64, bad: (UInt64?, String) -> Void
    ) throws(LedgerError) -> (compareAt: UInt64, comparable: Bool) {
        let store = log.store
        guard store.defersDerivedState else { return (head, true) }
        let recorded: (position: UInt64, hash: EventHash)
        let logHash: EventHash?
        do {
            recorded = try store.readAsStored { txn in try store.derivedPosition(txn) }
            logHash = try recorded.position == 0 ? EventHash.zero : storedHash(at: recorded.position)
        } catch {
            let wrapped = LedgerError.wrap(error, while: "reading the position of derived/")
            bad(nil, "the position record of derived/ cannot be read: \(wrapped.message)")
            return (head, false)
        }
        if recorded.position > head {
            bad(
                head + 1, "derived/ reflects the log up to position \(recorded.position), beyond its head (\(head)): the events "
                    + "after \(head) were removed (a cut tail); restore the ledger from a backup or an export")
            return (head, false)
        }
        guard logHash == recorded.hash else {
            bad(
                recorded.position, "derived/ records position \(recorded.position) with hash \(recorded.hash.hex), but the log's "
                    + "event there has hash \(logHash?.hex ?? "none"): derived/ was derived from another history (the log "
                    + "was rewritten after it, or derived/ belongs to another ledger)")
            return (head, false)
        }
        return (recorded.position, true)
    }

    /// Compares the stored stream and command records with those the log implies (`streams`,
    /// `commands`, as of where `derived/` is).
    private func compareRecords(
        streams: [[UInt8]: (version: UInt64, last: UInt64)], commands: [[UInt8]: (first: UInt64, count: UInt32)],
        head: UInt64, beyondHead: UInt64?, bad: (UInt64?, String) -> Void
    ) throws(LedgerError) -> (matches: Bool, problems: [String]) {
        var matches = true
        var found: [String] = []
        do {
            try log.store.readAsStored { txn in
                let storedStreams = try txn.statistics(log.store.streams).entries
                let storedCommands = try txn.statistics(log.store.commands).entries
                if storedStreams != streams.count || storedCommands != commands.count {
                    matches = false
                    found.append(
                        "the stream/command records in derived/ number \(storedStreams)/\(storedCommands); the log implies "
                            + "\(streams.count)/\(commands.count)")
                }
                for (key, expected) in streams {
                    let stored = try log.store.streamRecord(txn, key: key)
                    if stored.version != expected.version || stored.last != expected.last {
                        matches = false
                        if beyondHead != nil && stored.last > head { continue }
                        bad(expected.last, "the stream record of \(String(decoding: key, as: UTF8.self)) in derived/ disagrees with the log")
                    }
                }
                for (key, expected) in commands {
                    guard let stored = try log.store.commandRecord(txn, key: key), stored.first == expected.first,
                        stored.count == expected.count
                    else {
                        matches = false
                        if beyondHead != nil, let stored = try log.store.commandRecord(txn, key: key),
                            stored.first + UInt64(stored.count) - 1 > head
                        {
                            continue
                        }
                        bad(expected.first, "the command record of the command at \(expected.first) in derived/ disagrees with the log")
                        continue
                    }
                }
            }
        } catch {
            throw LedgerError.wrap(error, while: "checking the stream and command records")
        }
        return (matches, found)
    }
}

/// What an audit found so far: its problems, and the first position where something is wrong.
struct AuditFindings {
    var problems: [String] = []
    var firstBad: UInt64?

    /// Reports `text` (the first 20 problems are kept) at `position` (nil: at no position).
    mutating func bad(_ position: UInt64?, _ text: String) {
        if let position, firstBad == nil || position < firstBad! { firstBad = position }
        if problems.count < 20 { problems.append(text) }
    }
}

/// What an audit's scan of the log found: the events checked, those holding plaintext personal
/// data, and the stream and command records the log implies.
struct AuditScan {
    typealias Streams = [[UInt8]: (version: UInt64, last: UInt64)]
    typealias Commands = [[UInt8]: (first: UInt64, count: UInt32)]

    var streams: Streams = [:]
    var commands: Commands = [:]
    /// The records as of the position `derived/` is compared at, taken when the scan passes it.
    var recordsAtCompare: (streams: Streams, commands: Commands)?
    var checked: UInt64 = 0
    var plaintextPersonal: UInt64 = 0

    /// The records `derived/` should hold where it is compared.
    var expected: (streams: Streams, commands: Commands) { recordsAtCompare ?? (streams, commands) }

    /// Checks one event (its payload decodes, its stream version and back-link follow its stream's)
    /// and counts it in the records.
    mutating func check(_ envelope: EventEnvelope, compareAt: UInt64, bad: (UInt64?, String) -> Void) {
        if recordsAtCompare == nil && envelope.position.rawValue > compareAt { recordsAtCompare = (streams, commands) }
        do {
            let event = try DomainEvent.decode(envelope)
            if let event, PersonalDataVault.holdsPlaintextPersonalData(event) { plaintextPersonal += 1 }
        } catch {
            bad(envelope.position.rawValue, "event \(envelope.position): \(error.message)")
        }
        let streamKey = LogStore.streamKey(container: envelope.container, stream: envelope.stream)
        if envelope.streamVersion == 0 {
            // Unversioned (a record of a read): no place in the stream, so no back-link either.
            if envelope.streamPreviousPosition.rawValue != 0 {
                bad(envelope.position.rawValue, "event \(envelope.position): unversioned but with a stream back-link")
            }
        } else {
            let previous = streams[streamKey] ?? (0, 0)
            if envelope.streamVersion != previous.version + 1 || envelope.streamPreviousPosition.rawValue != previous.last {
                bad(envelope.position.rawValue, "event \(envelope.position): stream \(envelope.stream) version or back-link is off")
            }
            streams[streamKey] = (envelope.streamVersion, envelope.position.rawValue)
        }
        let commandKey = LogStore.commandKey(container: envelope.container, commandID: envelope.commandID)
        if let existing = commands[commandKey] {
            commands[commandKey] = (existing.first, existing.count + 1)
        } else {
            commands[commandKey] = (envelope.position.rawValue, 1)
        }
        checked += 1
    }
}
