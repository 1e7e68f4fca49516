import ByteKeys
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
    /// - Parameter parallelism: how many threads hash (default: one per active core). With more than
    ///   one, the threads take the chunks in position order, each the next one not yet taken, and
    ///   check it in a read transaction of its own: a chunk's first event is linked to the stored hash
    ///   of the event before it, whose own hash the chunk before recomputes, so the chunks together
    ///   check exactly what one pass from the start does, and the answer (the first bad position and
    ///   its problem, the events checked before it) is the same. No chunk after the first one found
    ///   bad is started. 1 checks the whole log in one pass on the calling thread.
    ///
    /// - Parameter start: check only the events after this position, linking the first of them to the
    ///   hash stored at `start` (which something else must vouch for, e.g. a signed checkpoint:
    ///   `audit --from-checkpoint`). 0, the default, checks from the first event.
    public func verifyChain(chunkSize: Int = 8192, parallelism: Int? = nil, after start: UInt64 = 0) throws(LedgerError)
        -> ChainVerification
    {
        let head = try head()
        let last = head.position.rawValue
        let first = min(start, last)
        let chunk = UInt64(max(1, chunkSize))
        let span = last - first
        let chunkCount = span / chunk + (span % chunk == 0 ? 0 : 1)
        let threads = max(1, min(parallelism ?? ProcessInfo.processInfo.activeProcessorCount, 64, Int(min(chunkCount, 64))))
        // One thread: one range, read chunk by chunk. More: one range per chunk, made as taken (a
        // damaged last key can put the head at 2^40 and more; only the chunks started exist).
        let outcomes =
            threads == 1
            ? checkRanges(count: span == 0 ? 0 : 1, chunkSize: Int(chunk), threads: 1) { _ in (first + 1)...last }
            : checkRanges(count: chunkCount, chunkSize: Int(chunk), threads: threads) { index in
                let before = first + index * chunk
                return (before + 1)...(before + min(chunk, last - before))
            }
        var result = ChainVerification(
            eventsChecked: 0, headPosition: 0, headHash: EventHash.zero.hex, firstBadPosition: nil, problem: nil)
        var lastHash = EventHash.zero.bytes
        if start > 0, start <= last {
            result.headPosition = start
            lastHash = try storedHash(at: start)?.bytes ?? EventHash.zero.bytes
        }
        // In position order: the ranges after the first bad one (or the first that failed to read)
        // count for nothing, whether they ran or not.
        for outcome in outcomes {
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

    /// Checks ranges `0..<count` (consecutive, in position order; `range` gives each) on `threads`
    /// threads, each taking the next range not yet taken; returns the outcomes of the ranges started,
    /// by index: the ones after the first found bad or unreadable are not started.
    private func checkRanges(
        count: UInt64, chunkSize: Int, threads: Int, range: @escaping @Sendable (UInt64) -> ClosedRange<UInt64>
    ) -> [Result<RangeOutcome, LedgerError>] {
        let schedule = RangeSchedule(count: count)
        let work: @Sendable () -> Void = { [self] in
            while let index = schedule.take() {
                let outcome = Result { () throws(LedgerError) -> RangeOutcome in
                    try verifyRange(range(index), chunkSize: chunkSize)
                }
                schedule.record(outcome, at: index)
            }
        }
        if threads == 1 {
            work()
        } else {
            DispatchQueue.concurrentPerform(iterations: threads) { _ in work() }
        }
        return schedule.outcomes()
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
                        if checked == chunkSize {
                            done = expectedPosition > range.upperBound
                            return
                        }
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

/// The ranges of a verification and their outcomes: which range a thread takes next, and from
/// which range on nothing more is started (the one after the first found bad or unreadable).
private final class RangeSchedule: @unchecked Sendable {
    // @unchecked: `next`, `end` and `values` are only touched under `lock`.
    private let lock = NSLock()
    private var next: UInt64 = 0
    private var end: UInt64
    /// The outcomes of the ranges started, by index (ranges are started in index order).
    private var values: [UInt64: Result<EventLog.RangeOutcome, LedgerError>] = [:]

    init(count: UInt64) { end = count }

    /// The index of the next range to check, or nil when none is left to start.
    func take() -> UInt64? {
        lock.withLock {
            guard next < end else { return nil }
            defer { next += 1 }
            return next
        }
    }

    /// Records the outcome of range `index`; a bad or unreadable range stops the ranges after it.
    func record(_ outcome: Result<EventLog.RangeOutcome, LedgerError>, at index: UInt64) {
        let stops: Bool
        switch outcome {
        case .success(let range): stops = range.firstBad != nil
        case .failure: stops = true
        }
        lock.withLock {
            values[index] = outcome
            if stops { end = min(end, index + 1) }
        }
    }

    /// The outcomes in index order, up to the first range not recorded (none is missing once every
    /// thread has returned: every range before a stop was taken, and every one taken is recorded).
    func outcomes() -> [Result<EventLog.RangeOutcome, LedgerError>] {
        lock.withLock {
            var ordered: [Result<EventLog.RangeOutcome, LedgerError>] = []
            ordered.reserveCapacity(values.count)
            var index: UInt64 = 0
            while let outcome = values[index] {
                ordered.append(outcome)
                index += 1
            }
            return ordered
        }
    }
}
