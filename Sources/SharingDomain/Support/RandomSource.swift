import EventLog
import Foundation

/// Where the ledger's randomness comes from. Production code keeps the default, the system's
/// cryptographically secure generator; tests inject a seeded source for repeatable runs.
public protocol LedgerRandomSource: Sendable {
    /// 64 random bits.
    func next() -> UInt64
}

/// The system's cryptographically secure random generator (`getrandom` on Linux).
public struct SystemRandomSource: LedgerRandomSource {
    /// Makes the source.
    public init() {}
    /// 64 random bits from the system CSPRNG.
    public func next() -> UInt64 {
        var generator = SystemRandomNumberGenerator()
        return generator.next()
    }
}

/// Adapts a ``LedgerRandomSource`` to `RandomNumberGenerator`.
package struct RandomSourceGenerator: RandomNumberGenerator {
    package let source: any LedgerRandomSource
    package mutating func next() -> UInt64 { source.next() }

    /// Makes the value from its fields.
    package init(source: any LedgerRandomSource) {
        self.source = source
    }
}
