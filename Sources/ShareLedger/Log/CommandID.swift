import Foundation
import Synchronization

/// Time-ordered command ids (UUID version 7, RFC 9562).
///
/// 48 bits of Unix milliseconds, then a 12-bit counter that orders ids made in the same millisecond
/// (RFC 9562, method 1), then 62 random bits. Ids made one after another sort one after another, so
/// the idempotency index grows at its right edge instead of dirtying a random page per command.
public enum CommandID {
    private static let state = Mutex<(millis: UInt64, counter: UInt16)>((0, 0))

    /// A new time-ordered id.
    public static func make() -> UUID {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        let now = UInt64(spec.tv_sec) * 1_000 + UInt64(spec.tv_nsec) / 1_000_000
        let (millis, counter) = state.withLock { state -> (UInt64, UInt16) in
            if now > state.millis {
                state = (now, 0)
            } else if state.counter < 0x0FFF {
                state.counter += 1
            } else {
                state = (state.millis + 1, 0)  // counter exhausted: borrow the next millisecond
            }
            return state
        }
        var random = SystemRandomNumberGenerator()
        let low = random.next() as UInt64
        var bytes = [UInt8](repeating: 0, count: 16)
        for index in 0..<6 { bytes[index] = UInt8(truncatingIfNeeded: millis >> (40 - 8 * UInt64(index))) }
        bytes[6] = 0x70 | UInt8(counter >> 8)
        bytes[7] = UInt8(truncatingIfNeeded: counter)
        for index in 8..<16 { bytes[index] = UInt8(truncatingIfNeeded: low >> (56 - 8 * UInt64(index - 8))) }
        bytes[8] = 0x80 | (bytes[8] & 0x3F)  // RFC 9562 variant
        return bytes.withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
    }
}
