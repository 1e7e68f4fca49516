import Foundation
import Synchronization

/// Time-ordered command ids (UUID version 7, RFC 9562).
///
/// 48 bits of Unix milliseconds, then a 12-bit counter that orders ids made in the same millisecond
/// (RFC 9562, method 1), then 62 random bits. Ids made one after another sort one after another, so
/// the idempotency index grows at its right edge instead of dirtying a random page per command.
///
/// The random bits come from a SplitMix64 stream seeded once from the system's random source: ids
/// must be unique, not secret (share URL tokens, which must be unguessable, use the system CSPRNG
/// directly).
public enum CommandID {
    private struct State {
        var millis: UInt64 = 0
        var counter: UInt16 = 0
        var random: UInt64 = {
            var system = SystemRandomNumberGenerator()
            return system.next()
        }()
    }

    /// Guards `state`. A pthread mutex (NSLock) rather than `Synchronization.Mutex`: this lock is the
    /// one every appending task contends for, and ThreadSanitizer sees pthread mutexes (the futex
    /// inside `Mutex` on Linux is invisible to it, so `scripts/tsan` reported a false race here).
    private static let lock = NSLock()
    /// `nonisolated(unsafe)`: only read or written while `lock` is held.
    nonisolated(unsafe) private static var state = State()

    /// A new time-ordered id.
    public static func make() -> UUID {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        let now = UInt64(spec.tv_sec) * 1_000 + UInt64(spec.tv_nsec) / 1_000_000
        let (millis, counter, low) = lock.withLock { () -> (UInt64, UInt16, UInt64) in
            if now > state.millis {
                state.millis = now
                state.counter = 0
            } else if state.counter < 0x0FFF {
                state.counter += 1
            } else {
                state.millis += 1  // counter exhausted: borrow the next millisecond
                state.counter = 0
            }
            // SplitMix64.
            state.random &+= 0x9E37_79B9_7F4A_7C15
            var z = state.random
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return (state.millis, state.counter, z ^ (z >> 31))
        }
        // The 16 bytes written in place (an array here was an allocation per command).
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &uuid) { bytes in
            for index in 0..<6 { bytes[index] = UInt8(truncatingIfNeeded: millis >> (40 - 8 * UInt64(index))) }
            bytes[6] = 0x70 | UInt8(counter >> 8)
            bytes[7] = UInt8(truncatingIfNeeded: counter)
            for index in 8..<16 { bytes[index] = UInt8(truncatingIfNeeded: low >> (56 - 8 * UInt64(index - 8))) }
            bytes[8] = 0x80 | (bytes[8] & 0x3F)  // RFC 9562 variant
        }
        return UUID(uuid: uuid)
    }
}
