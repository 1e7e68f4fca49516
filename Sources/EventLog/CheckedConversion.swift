import Foundation

/// Conversions of numbers into fixed-width integers that never trap, for every number that comes from
/// outside the process (a request, a command line, a file) or is derived from one. Swift's own
/// `Int64(_: Double)` and `Int64(_: UInt64)` stop the process on a value out of range (NaN and the
/// infinities included); these answer `nil` or clamp instead, so that the caller can refuse the value
/// with a typed error or keep a bound.
///
/// ```swift
/// guard let micros = CheckedConversion.microseconds(since1970: date) else { throw ... }
/// let wait = CheckedConversion.milliseconds(clamping: timeout)
/// ```
public enum CheckedConversion {
    /// `value` rounded to the nearest integer (halves away from zero), or `nil` when it is NaN,
    /// infinite or outside `Int64`.
    public static func int64(rounding value: Double) -> Int64? {
        guard value.isFinite else { return nil }
        return Int64(exactly: value.rounded())
    }

    /// `value` rounded to the nearest integer and clamped into `Int64` (NaN gives 0).
    public static func int64(clamping value: Double) -> Int64 {
        if value.isNaN { return 0 }
        return int64(rounding: value) ?? (value < 0 ? .min : .max)
    }

    /// `value` rounded to the nearest integer and clamped into `Int` (NaN gives 0).
    public static func int(clamping value: Double) -> Int {
        Int(clamping: int64(clamping: value))
    }

    /// `date` in whole microseconds since 1970-01-01 UTC, or `nil` when that is outside `Int64`
    /// (beyond about ±292,000 years) or the date is not finite.
    public static func microseconds(since1970 date: Date) -> Int64? {
        int64(rounding: date.timeIntervalSince1970 * 1_000_000)
    }

    /// `date` in whole milliseconds since 1970-01-01 UTC, or `nil` when that is outside `Int64` or the
    /// date is not finite.
    public static func milliseconds(since1970 date: Date) -> Int64? {
        int64(rounding: date.timeIntervalSince1970 * 1_000)
    }

    /// `duration` in whole milliseconds (rounded toward zero), clamped into `Int64`.
    public static func milliseconds(clamping duration: Duration) -> Int64 {
        whole(duration, unitsPerSecond: 1_000)
    }

    /// `duration` in whole microseconds (rounded toward zero), clamped into `Int64`.
    public static func microseconds(clamping duration: Duration) -> Int64 {
        whole(duration, unitsPerSecond: 1_000_000)
    }

    /// `duration` in whole nanoseconds (rounded toward zero), clamped into `Int64`.
    public static func nanoseconds(clamping duration: Duration) -> Int64 {
        whole(duration, unitsPerSecond: 1_000_000_000)
    }

    /// A `Duration` of `seconds` (a command-line or configuration figure), or `nil` when it is NaN,
    /// infinite, negative or longer than a hundred years: `Duration.seconds(_: Double)` traps on
    /// the first two.
    public static func duration(seconds: Double) -> Duration? {
        guard seconds.isFinite, seconds >= 0, seconds <= 100 * 366 * 86_400 else { return nil }
        return .nanoseconds(Int64((seconds * 1_000_000_000).rounded()))
    }

    private static func whole(_ duration: Duration, unitsPerSecond: Int64) -> Int64 {
        let (seconds, attoseconds) = duration.components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: unitsPerSecond)
        if overflow { return seconds < 0 ? .min : .max }
        // |attoseconds| < 10^18, so the fraction is below `unitsPerSecond` in magnitude.
        let fraction = attoseconds / (1_000_000_000_000_000_000 / unitsPerSecond)
        let (sum, sumOverflow) = scaled.addingReportingOverflow(fraction)
        if sumOverflow { return scaled < 0 ? .min : .max }
        return sum
    }
}
