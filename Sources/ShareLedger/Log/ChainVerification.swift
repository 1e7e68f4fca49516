import Crypto
import LMDB

/// The outcome of ``EventLog/verifyChain(chunkSize:)``.
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
    /// SHA-256(previous hash ‖ canonical bytes) equals the stored hash; finally that the head record
    /// names the last event. Stops at the first problem.
    public func verifyChain(chunkSize: Int = 8192) throws(LedgerError) -> ChainVerification {
        var result = ChainVerification(
            eventsChecked: 0, headPosition: 0, headHash: EventHash.zero.hex, firstBadPosition: nil, problem: nil)
        var expectedPosition: UInt64 = 1
        // The previous event's hash, overwritten in place for each event (no allocation per event).
        var previous = EventHash.zero.bytes
        var done = false
        while !done {
            try read("verifying the chain at position \(expectedPosition)") { txn in
                try txn.withCursor(store.log) { cursor in
                    var entry = try BigEndian.withBytes(of: expectedPosition) { try cursor.seek(atLeast: $0) }
                    var checked = 0
                    while let current = entry {
                        if let problem = EventLog.check(current, expected: expectedPosition, previous: previous) {
                            result.firstBadPosition = expectedPosition
                            result.problem = problem
                            done = true
                            return
                        }
                        previous.withUnsafeMutableBytes { target in
                            target.copyMemory(from: UnsafeRawBufferPointer(rebasing: current.value.suffix(32)))
                        }
                        result.eventsChecked += 1
                        result.headPosition = expectedPosition
                        expectedPosition += 1
                        checked += 1
                        if checked == chunkSize { return }
                        entry = try cursor.next()
                    }
                    done = true
                }
            }
        }
        result.headHash = EventHash(bytes: previous)!.hex
        if result.isValid {
            let head = try head()
            if head.position.rawValue != result.headPosition || head.hash.bytes != previous {
                result.firstBadPosition = result.headPosition + 1
                result.problem =
                    "the head record says position \(head.position) hash \(head.hash.hex), but the chain ends at "
                    + "position \(result.headPosition) hash \(result.headHash)"
            }
        }
        return result
    }

    /// Checks one stored entry; returns what is wrong, or `nil`.
    static func check(_ entry: Entry, expected: UInt64, previous: [UInt8]) -> String? {
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
