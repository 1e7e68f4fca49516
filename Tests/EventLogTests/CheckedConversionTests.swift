import EventLog
import Foundation
import Testing

/// The one helper every conversion of an outside number goes through: never a trap, nil or a bound instead.
@Suite("Checked conversions")
struct CheckedConversionTests {
    @Test("doubles to Int64: exact within range, nil (or the bound when clamping) beyond it and for NaN and infinities")
    func doubles() {
        #expect(CheckedConversion.int64(rounding: 1.5) == 2)
        #expect(CheckedConversion.int64(rounding: -1.5) == -2)
        #expect(CheckedConversion.int64(rounding: 9_223_372_036_854_774_784) == 9_223_372_036_854_774_784)
        for beyond in [9.223372036854775808e18, -9.3e18, 1e300, .infinity, -.infinity, .nan] {
            #expect(CheckedConversion.int64(rounding: beyond) == nil, "\(beyond)")
        }
        #expect(CheckedConversion.int64(rounding: -9.223372036854775808e18) == .min)
        #expect(CheckedConversion.int64(clamping: 1e300) == .max)
        #expect(CheckedConversion.int64(clamping: -.infinity) == .min)
        #expect(CheckedConversion.int64(clamping: .nan) == 0)
        #expect(CheckedConversion.int(clamping: 1e300) == .max)
    }

    @Test("dates and durations: microseconds and milliseconds, nil or clamped beyond Int64")
    func datesAndDurations() {
        #expect(CheckedConversion.microseconds(since1970: Date(timeIntervalSince1970: 1.25)) == 1_250_000)
        #expect(CheckedConversion.milliseconds(since1970: Date(timeIntervalSince1970: -1.25)) == -1_250)
        #expect(CheckedConversion.microseconds(since1970: Date(timeIntervalSince1970: 9.3e12)) == nil)
        #expect(CheckedConversion.microseconds(since1970: Date(timeIntervalSince1970: .nan)) == nil)
        #expect(CheckedConversion.milliseconds(clamping: .seconds(2) + .microseconds(1_500)) == 2_001)
        #expect(CheckedConversion.microseconds(clamping: .seconds(Int64.max)) == .max)
        #expect(CheckedConversion.nanoseconds(clamping: .seconds(Int64.min)) == .min)
        #expect(CheckedConversion.milliseconds(clamping: .milliseconds(-1_500)) == -1_500)
        #expect(CheckedConversion.duration(seconds: 1.5) == .milliseconds(1_500))
        for bad in [Double.nan, .infinity, -1, 1e300] { #expect(CheckedConversion.duration(seconds: bad) == nil) }
    }
}
