import EventLog
import Foundation
import LMDB
import ShareLedger
import SharingDomain

/// What ``LedgerAudit/importResealingPersonalData(from:progress:)`` wrote.
public struct ResealSummary: Sendable, Hashable, Codable {
    /// Events written: every event of the source, at the same position.
    public var events: UInt64
    /// Events whose payload was re-encoded because it holds personal data: plaintext sealed, or
    /// sealed data opened with the source's key store and sealed again under the new one.
    public var resealedEvents: UInt64
    /// Events of the source that held personal data in plaintext (what `audit` reports for it).
    public var plaintextEventsInSource: UInt64
    /// Sealed fields the source's key store could not open (their person was forgotten, or the key
    /// store is missing or another one): copied as they are, so they stay unreadable.
    public var unopenedBoxes: UInt64
    /// Events of the new ledger that hold personal data in plaintext: 0.
    public var plaintextEventsLeft: UInt64
    /// The position of the last event written (the new ledger's head).
    public var headPosition: UInt64
    /// The hash of the last event written (hex): a new chain, so not the source's.
    public var headHash: String
}

extension LedgerAudit {
    /// Writes every event of `source` into this ledger, which must be new and empty, with every
    /// personal field sealed under this ledger's key store: re-encrypts a ledger whose events were
    /// written before crypto-shredding (or before invitations were sealed) into a new one
    /// (`share-ledger import --reseal-personal-data --from OLD`).
    ///
    /// An event of a hash-chained log cannot change, so the re-encrypted events make a new chain. Each
    /// event keeps its position, recorded time, container, actor, command, correlation and causation
    /// ids, stream and type; an event without personal data keeps its payload byte for byte. An event
    /// with personal data gets a new payload (and its type's current schema version): plaintext fields
    /// sealed with new keys (made in this ledger's key store), fields the source had sealed opened with
    /// the source's key store and sealed again, keyed hashes recomputed under this ledger's lookup key.
    /// Boxes the source cannot open (their person was forgotten) are copied as they are and stay
    /// unreadable. The read models are projected in the same transactions, in batches that never
    /// split a command; at the end the keys of every user and address the log says is forgotten are
    /// destroyed, so a person forgotten in the source, even one whose old events held plaintext, is
    /// unreadable here.
    ///
    /// The source is only read (it may be open read-only); keep it until the new ledger is checked
    /// (`audit`), then delete it and its backups as the old ledger's plaintext requires.
    ///
    /// - Throws: `LedgerError.Code.invalidArguments` when this ledger is not empty (nothing is
    ///   written), does not seal personal data (`Configuration.sealsPersonalData`) or is the source;
    ///   `LedgerError.Code.readOnly` when it is read-only or has no writable key store; storage
    ///   errors (a crash or an error part way leaves a prefix of whole commands: delete the new
    ///   ledger's directory and run it again).
    @discardableResult
    public func importResealingPersonalData(
        from source: ShareLedger, progress: (@Sendable (UInt64, UInt64) -> Void)? = nil
    ) async throws(LedgerError) -> ResealSummary {
        guard !configuration.readOnly, models.vault?.writable == true else {
            throw LedgerError(.readOnly, "the ledger at \(configuration.path) is not open for writing with its key store")
        }
        guard configuration.sealsPersonalData else {
            throw LedgerError(
                .invalidArguments, "the new ledger does not seal personal data (sealsPersonalData is off); open it with "
                    + "sealing on to re-encrypt into it")
        }
        let here = URL(fileURLWithPath: configuration.path).standardizedFileURL.path
        guard URL(fileURLWithPath: source.configuration.path).standardizedFileURL.path != here else {
            throw LedgerError(.invalidArguments, "a ledger cannot be re-encrypted into itself; write into a new, empty directory")
        }
        let start = try log.head()
        guard start.position.rawValue == 0 else {
            throw LedgerError(
                .invalidArguments, "the ledger at \(configuration.path) is not empty (its head is \(start.position)): "
                    + "re-encrypting writes a new ledger; choose a new, empty directory. Nothing was written")
        }
        let sourceHead = try source.log.head().position.rawValue
        var reseal = Resealing(source: source, target: ledger)
        var summary = ResealSummary(
            events: 0, resealedEvents: 0, plaintextEventsInSource: 0, unopenedBoxes: 0, plaintextEventsLeft: 0,
            headPosition: 0, headHash: EventHash.zero.hex)
        var after: UInt64 = 0
        var pending: [EventEnvelope] = []
        var sourceRead = sourceHead == 0
        while true {
            if !sourceRead {
                let read = try source.log.events(after: LogPosition(after), limit: 4_096).filter { $0.position.rawValue <= sourceHead }
                if let last = read.last { after = last.position.rawValue }
                sourceRead = read.isEmpty || after >= sourceHead
                pending += read
            }
            guard let last = pending.last else { break }
            // Whole commands only: the last one may go on in the next chunk, unless the source ends here.
            var end = pending.count
            if !sourceRead {
                while end > 0 && pending[end - 1].commandID == last.commandID && pending[end - 1].container == last.container {
                    end -= 1
                }
                if end == 0 { continue }
            }
            // Boxes are opened with the source's key store here, outside any transaction.
            var opened: [Resealing.Opened] = []
            opened.reserveCapacity(end)
            for envelope in pending[..<end] { opened.append(try reseal.open(envelope)) }
            pending.removeFirst(end)
            let batch = opened
            let written = try await maintain { [ledger] txn in try Resealing.write(batch, into: ledger, txn) }
            summary.events += UInt64(batch.count)
            summary.resealedEvents += written.resealed
            summary.plaintextEventsLeft += written.plaintext
            summary.headPosition = written.head.position.rawValue
            summary.headHash = written.head.hash.hex
            progress?(summary.headPosition, sourceHead)
        }
        summary.plaintextEventsInSource = reseal.plaintextEventsInSource
        summary.unopenedBoxes = reseal.unopenedBoxes
        // Keys of people and addresses forgotten in the source, made again above for their plaintext.
        try ShareLedger.destroyKeysOfForgottenUsers(log)
        return summary
    }

}
