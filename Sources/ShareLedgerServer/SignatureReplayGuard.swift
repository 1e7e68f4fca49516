import Foundation
import Synchronization

/// The server-to-server signatures seen while they could still be accepted: a signature is valid
/// for the allowed clock skew around its date, so each one is remembered until then, and a second
/// request with it is refused (a replay). Keyed by the key id and the signature's `r` (which an
/// attacker cannot change without the private key; `s` can be negated, DER and raw forms differ).
///
/// Memory is bounded: at most ``capacity`` signatures. When that many are live, new signed requests
/// are refused (THROTTLED) until some expire, rather than forgetting one that could then be replayed.
final class SignatureReplayGuard: Sendable {
    /// The most signatures remembered at once.
    let capacity: Int

    private struct State {
        /// Signature key → when it stops being acceptable anyway.
        var expiries: [String: Date] = [:]
        /// The keys in the order they were seen, with their expiry (for pruning from the front).
        var order: [(key: String, expiry: Date)] = []
        var head = 0
    }

    private let state = Mutex(State())

    init(capacity: Int = 1_000_000) {
        self.capacity = capacity
    }

    enum Outcome: Equatable {
        case fresh, replayed, full
    }

    /// Records `key` (valid until `expiry`) unless it was seen before and has not expired.
    func admit(_ key: String, expiry: Date, now: Date) -> Outcome {
        state.withLock { state in
            Self.prune(&state, now: now)
            if let seen = state.expiries[key], seen > now { return .replayed }
            if state.expiries.count >= capacity {
                // Entries expired behind a later-expiring one at the front: sweep them all once.
                state.expiries = state.expiries.filter { $0.value > now }
                state.order = state.order[state.head...].filter { state.expiries[$0.key] == $0.expiry }
                state.head = 0
            }
            guard state.expiries.count < capacity else { return .full }
            state.expiries[key] = expiry
            state.order.append((key, expiry))
            return .fresh
        }
    }

    /// How many signatures are remembered.
    var count: Int { state.withLock { $0.expiries.count } }

    private static func prune(_ state: inout State, now: Date) {
        // Expiries are near insertion order (a date within the skew of the clock); an entry that
        // expires before one seen earlier waits for it, at most twice the skew.
        while state.head < state.order.count, state.order[state.head].expiry <= now {
            let entry = state.order[state.head]
            if let current = state.expiries[entry.key], current <= now { state.expiries[entry.key] = nil }
            state.head += 1
        }
        if state.head > 1_024, state.head * 2 > state.order.count {
            state.order.removeFirst(state.head)
            state.head = 0
        }
    }
}
