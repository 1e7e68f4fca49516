import Crypto
import Dispatch
import Foundation
import LMDB

/// The outcome of ``EventLog/verifyChain(chunkSize:parallelism:after:)``.
public struct ChainVerification: Sendable, Hashable, Codable {
    /// Events checked.
    public var eventsChecked: UInt64
    /// The position and hash of the last event checked.
    public var headPosition: UInt64
    /// The hash of the last good event, hexadecimal.
    public var headHash: String
    /// The first position where the chain does not hold, or `nil` when it holds throughout.
    public var firstBadPosition: UInt64?
    /// What is wrong at ``firstBadPosition``.
    public var problem: String?

    /// Whether the whole chain holds.
    public var isValid: Bool { firstBadPosition == nil }
}

extension EventLog {
    /// Walks the whole log, in chunks of `chunkSize` events with a fresh read transaction each, and
    /// checks for every event: the key is the next position (no gap, no reordering), the stored
    /// position and previous hash agree with its place, the hash field is last, and
    /// SHA-256(previous hash ‖ canonical bytes) equals the stored hash; finally that the head the
    /// ledger reports names the last event. Reports the first problem.
    ///
    /// - Parameter chunkSize: the events read in one read transaction (default 8,192).
    ///
    /// - Parameter parallelism: how many threads share the work (default: one per core, at most 4).
    ///   Each thread checks a contiguous range of positions; a range's first event is linked to the
    ///   stored hash of the event before it, and every event's stored hash is recomputed, so the
    ///   ranges together check exactly what one pass from the start does. By default logs under
    ///   65,536 events are checked by one thread.
    ///
    /// - Parameter start: check only the events after this position, linking the first of them to the
    ///   hash stored at `start` (which something else must vouch for, e.g. a signed checkpoint:
    ///   `audit --from-checkpoint`). 0, the default, checks from the first event.
    public func verifyChain(chunkSize: Int = 8192, parallelism: Int? = nil, after start: UInt64 = 0) throws(LedgerError)
        -> ChainVerification
    {
        let head = try head()
        let last = head.position.rawValue
        let threads =
            parallelism.map { max(1, min($0, Int(min(last - min(start, last), 64)))) }
            ?? max(1, min(4, ProcessInfo.processInfo.activeProcessorCount, Int((last - min(start, last)) / 32_768)))
        var ranges: [ClosedRange<UInt64>] = []
        if last > start {
            let step = (last - start + UInt64(threads) - 1) / UInt64(threads)
            var lower: UInt64 = start + 1
            while lower <= last {
                let upper = min(last, lower + step - 1)
                ranges.append(lower...upper)
                lower = upper + 1
            }
        }
        let outcomes = RangeOutcomes()
        if ranges.isEmpty {
            // Nothing to check (an empty log, or `start` at the head): no range, no outcome.
        } else if ranges.count == 1 {
            let outcome = Result { () throws(LedgerError) -> RangeOutcome in
                try verifyRange(ranges[0], chunkSize: chunkSize)
            }
            outcomes.withLock { $0[0] = outcome }
        } else {
            let work = ranges
            DispatchQueue.concurrentPerform(iterations: work.count) { index in
                let outcome = Result { () throws(LedgerError) -> RangeOutcome in
                    try verifyRange(work[index], chunkSize: chunkSize)
                }
                outcomes.withLock { $0[index] = outcome }
            }
        }
        var result = ChainVerification(
            eventsChecked: 0, headPosition: 0, headHash: EventHash.zero.hex, firstBadPosition: nil, problem: nil)
        var lastHash = EventHash.zero.bytes
        if start > 0, start <= last {
            result.headPosition = start
            lastHash = try storedHash(at: start)?.bytes ?? EventHash.zero.bytes
        }
        for index in ranges.indices.isEmpty ? [0] : Array(ranges.indices) {
            guard let outcome = outcomes.withLock({ $0[index] }) else { continue }
            let range = try outcome.get()
            result.eventsChecked += range.checked
            if range.checked > 0 {
                result.headPosition = range.lastGood
                lastHash = range.lastHash
            }
            if let bad = range.firstBad {
                result.firstBadPosition = bad
                result.problem = range.problem
                break
            }
        }
        result.headHash = EventHash(bytes: lastHash)!.hex
        if result.isValid, head.position.rawValue != result.headPosition || head.hash.bytes != lastHash {
            result.firstBadPosition = result.headPosition + 1
            result.problem =
                "the head record says position \(head.position) hash \(head.hash.hex), but the chain ends at "
                + "position \(result.headPosition) hash \(result.headHash)"
        }
        if result.isValid, let recorded = try formatOneHeadRecord(), recorded > result.headPosition {
            result.firstBadPosition = result.headPosition + 1
            result.problem =
                "the head record (format 1) says position \(recorded), but the log ends at position "
                + "\(result.headPosition): the events after it were removed (a cut tail)"
        }
        return result
    }

    /// The hash stored with the event at `position` (its last 32 bytes), or nil when there is none
    /// or the entry does not end with a hash field.
    package func storedHash(at position: UInt64) throws(LedgerError) -> EventHash? {
        try readLog("reading the event at \(position)") { txn in
            try BigEndian.withBytes(of: position) { key in
                try txn.withValue(store.log, key: key) { value -> EventHash? in
                    guard EnvelopeCodec.endsWithHashField(value) else { return nil }
                    return EventHash(bytes: value.suffix(32))
                }
            } ?? nil
        }
    }

    /// What one thread found in its range of positions.
    package struct RangeOutcome: Sendable {
        var checked: UInt64 = 0
        var lastGood: UInt64 = 0
        var lastHash: [UInt8] = EventHash.zero.bytes
        var firstBad: UInt64?
        var problem: String?
    }

    /// The first position of `range` whose event does not continue the chain (missing, malformed,
    /// not linking to the stored hash before it, or altered), with what is wrong; nil when every event
    /// of `range` holds. For a reader that hands events on (an export) and must not hand on one
    /// the chain rejects.
    package func firstBreak(in range: ClosedRange<UInt64>) throws(LedgerError) -> (position: UInt64, problem: String)? {
        let outcome = try verifyRange(range, chunkSize: 8192)
        return outcome.firstBad.map { ($0, outcome.problem ?? "the chain does not hold there") }
    }

    /// Checks the events of `range` (and that the event before it, if any, is stored whole with the
    /// hash the range's first event links to). Stops at the first problem.
    private func verifyRange(_ range: ClosedRange<UInt64>, chunkSize: Int) throws(LedgerError) -> RangeOutcome {
        var outcome = RangeOutcome()
        guard !range.isEmpty else { return outcome }
        // The previous event's hash, overwritten in place for each event (no allocation per event).
        var previous = EventHash.zero.bytes
        if range.lowerBound > 1 {
            let stored = try storedHash(at: range.lowerBound - 1)?.bytes
            // The range before reports a missing or malformed event itself; this range links to
            // whatever it finds, and a mismatch shows as this range's first problem.
            if let stored { previous = stored }
        }
        var expectedPosition = range.lowerBound
        var done = false
        while !done {
            try readLog("verifying the chain at position \(expectedPosition)") { txn in
                try txn.withCursor(store.log) { cursor in
                    var entry = try BigEndian.withBytes(of: expectedPosition) { try cursor.seek(atLeast: $0) }
                    var checked = 0
                    while let current = entry, expectedPosition <= range.upperBound {
                        if let problem = EventLog.check(current, expected: expectedPosition, previous: previous) {
                            outcome.firstBad = expectedPosition
                            outcome.problem = problem
                            done = true
                            return
                        }
                        previous.withUnsafeMutableBytes { target in
                            target.copyMemory(from: UnsafeRawBufferPointer(rebasing: current.value.suffix(32)))
                        }
                        outcome.checked += 1
                        outcome.lastGood = expectedPosition
                        expectedPosition += 1
                        checked += 1
                        if checked == chunkSize { return }
                        entry = try cursor.next()
                    }
                    if expectedPosition <= range.upperBound {
                        outcome.firstBad = expectedPosition
                        outcome.problem = "position \(expectedPosition) is missing (the log ends before the head)"
                    }
                    done = true
                }
            }
        }
        outcome.lastHash = previous
        return outcome
    }

    /// Checks one stored entry; returns what is wrong, or `nil`.
    package static func check(_ entry: Entry, expected: UInt64, previous: [UInt8]) -> String? {
        guard let key = BigEndian.uint64(entry.key), entry.key.count == 8 else {
            return "a log key is \(entry.key.count) bytes, expected 8"
        }
        guard key == expected else {
            return key > expected
                ? "position \(expected) is missing (the next stored event is at \(key))"
                : "position \(key) appears out of order"
        }
        guard let fields = EnvelopeCodec.scanChainFields(entry.value) else {
            return "the stored bytes are not a well-formed envelope ending with its hash field"
        }
        guard fields.position == expected else {
            return "the envelope says position \(fields.position.map(String.init) ?? "none"), stored at \(expected)"
        }
        guard let storedPrevious = fields.previousHash, storedPrevious.elementsEqual(previous) else {
            return "the previous-hash field does not match the hash of position \(expected - 1)"
        }
        let computed = previous.withUnsafeBytes { EnvelopeCodec.chainDigest(previous: $0, canonical: fields.canonical) }
        let matches = computed.withUnsafeBytes { $0.elementsEqual(fields.hash) }
        guard matches else {
            return "the stored hash does not match SHA-256(previous hash ‖ canonical bytes): the event was altered"
        }
        return nil
    }
}

/// The outcomes of the ranges of a parallel verification, by range index.
private final class RangeOutcomes: @unchecked Sendable {
    // @unchecked: `values` is only touched under `lock`.
    private let lock = NSLock()
    private var values: [Int: Result<EventLog.RangeOutcome, LedgerError>] = [:]

    package func withLock<R>(_ body: (inout [Int: Result<EventLog.RangeOutcome, LedgerError>]) -> R) -> R {
        lock.withLock { body(&values) }
    }
}
