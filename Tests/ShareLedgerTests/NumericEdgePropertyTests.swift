import Foundation
import PropertyBased
import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// Every numeric field value type through the library (``Container/save(_:)-record``), at and beyond
/// every bound: a date within ±100,000,000 days of 1970 (JavaScript's range) is stored, one outside
/// it, or not finite, is `invalidArguments` with nothing changed; integers and doubles of any value
/// (NaN and the infinities included) are stored. Nothing traps (a date beyond ±292,000 years once did).
@Suite("Numbers at the edges through the library")
struct NumericEdgePropertyTests {
    /// The bound of a date field, in seconds from 1970.
    static let bound = 8_640_000_000_000.0

    static let edgeSeconds: [Double] = [
        0, 1, -1, 0.000_001, bound, -bound, bound.nextUp, (-bound).nextDown, bound + 0.001, -bound - 0.001, 9.2e12, 9.3e12,
        -9.3e12, 9_223_372_036_854.775_807, -9_223_372_036_854.775_808, 9.3e15, 1e300, -1e300, .greatestFiniteMagnitude,
        -.greatestFiniteMagnitude, .nan, .infinity, -.infinity, Date.distantFuture.timeIntervalSince1970,
        Date.distantPast.timeIntervalSince1970, Double(Int64.max), Double(Int64.min),
    ]

    /// Saves `value` as field `f` of a new record and checks the outcome against `storable`.
    static func check(_ f: SharingFixture, _ name: String, _ value: FieldValue, storable: Bool) async throws {
        let head = try f.ledger.log.head().position
        let id = SharingFixture.recordID(name)
        var refusal: LedgerError?
        do {
            _ = try await f.alice.save(Record(recordType: "N", recordID: id, fields: ["f": value]))
        } catch {
            refusal = error
        }
        guard let refusal else {
            #expect(storable, "\(describe(value)) was stored")
            let read = try f.alice.record(for: id)["f"]
            #expect(read.map { same($0, value) } ?? false, "\(describe(value)) read back as \(read.map(describe) ?? "nothing")")
            return
        }
        #expect(!storable, "\(describe(value)): \(refusal)")
        #expect(refusal.code == .invalidArguments, "\(describe(value)): \(refusal)")
        #expect(refusal.message.contains("8640000000000000"), "\(refusal.message)")
        #expect(try f.ledger.log.head().position == head, "\(describe(value)) changed the ledger")
    }

    /// `value` as text, dates as seconds from 1970: Foundation's `Date.description` traps on dates
    /// far beyond the range.
    static func describe(_ value: FieldValue) -> String {
        switch value {
        case .date(let date): return "date(\(date.timeIntervalSince1970) s)"
        case .list(let values): return "list(\(values.map(describe).joined(separator: ", ")))"
        default: return "\(value)"
        }
    }

    /// Equal as stored: dates to the microsecond (or the spacing of `Date` beyond it), doubles by bits.
    static func same(_ lhs: FieldValue, _ rhs: FieldValue) -> Bool {
        switch (lhs, rhs) {
        case (.date(let a), .date(let b)):
            let tolerance = max(0.000_001, b.timeIntervalSinceReferenceDate.ulp * 2)
            return abs(a.timeIntervalSince1970 - b.timeIntervalSince1970) <= tolerance
        case (.double(let a), .double(let b)): return a.bitPattern == b.bitPattern || (a == b)
        case (.list(let a), .list(let b)): return a.count == b.count && zip(a, b).allSatisfy { same($0, $1) }
        default: return lhs == rhs
        }
    }

    static func storable(_ seconds: Double) -> Bool { seconds.isFinite && abs(seconds) <= bound }

    @Test("dates at and beyond the bounds, alone and in lists: stored, or invalidArguments naming the range and nothing changed")
    func datesAtTheEdges() async throws {
        let f = try await SharingFixture()
        _ = try await f.alice.save(RecordZone(zoneID: SharingFixture.zone))
        for (index, seconds) in Self.edgeSeconds.enumerated() {
            let date = FieldValue.date(Date(timeIntervalSince1970: seconds))
            try await Self.check(f, "d\(index)", date, storable: Self.storable(seconds))
            try await Self.check(f, "l\(index)", .list([.date(Date()), date]), storable: Self.storable(seconds))
        }
        #expect(try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("audit")).ok)
        await f.ledger.close()
    }

    @Test("random dates around the bounds (property): stored exactly when within them")
    func randomDates() async throws {
        let f = try await SharingFixture()
        _ = try await f.alice.save(RecordZone(zoneID: SharingFixture.zone))
        let counter = Counter()
        await propertyCheck(count: 60, input: Gen.double(in: -1.5...1.5), Gen.double(in: -1_000...1_000)) { scale, jitter in
            let seconds = scale * Self.bound + jitter
            counter.increment()
            try await Self.check(f, "r\(counter.value)", .date(Date(timeIntervalSince1970: seconds)), storable: Self.storable(seconds))
        }
        await f.ledger.close()
    }

    @Test("integers and doubles of any value, alone and in lists, are stored and read back")
    func integersAndDoubles() async throws {
        let f = try await SharingFixture()
        _ = try await f.alice.save(RecordZone(zoneID: SharingFixture.zone))
        let integers: [Int64] = [0, 1, -1, .max, .min, .max - 1, .min + 1, 1 << 53, (1 << 53) + 1, -(1 << 53) - 1]
        let doubles: [Double] = [
            0, -0.0, .greatestFiniteMagnitude, -.greatestFiniteMagnitude, .leastNonzeroMagnitude, .leastNormalMagnitude,
            .ulpOfOne, .nan, .infinity, -.infinity, Double(Int64.max), 9.3e18,
        ]
        for (index, integer) in integers.enumerated() {
            try await Self.check(f, "i\(index)", .int64(integer), storable: true)
            try await Self.check(f, "il\(index)", .list([.int64(integer), .int64(0)]), storable: true)
        }
        for (index, double) in doubles.enumerated() {
            try await Self.check(f, "x\(index)", .double(double), storable: true)
            try await Self.check(f, "xl\(index)", .list([.double(double)]), storable: true)
        }
        await f.ledger.close()
    }
}
