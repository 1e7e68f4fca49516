import ShareLedger

/// The one error type of ShareLedger's replication, shaped like `LedgerError`: a
/// ``Code`` and a message that says what failed and what to do. Messages name positions, streams and
/// servers, never the content of events.
public struct ReplicationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of failure. New codes may be added; switch with a `default`.
    public struct Code: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        /// The number (2000 and up, apart from the ledger's own codes).
        public let rawValue: Int
        /// The code's name, e.g. `"fenced"`.
        public var name: String { Code.names[rawValue] ?? "code\(rawValue)" }

        /// Makes the code with `rawValue`.
        public init(rawValue: Int) { self.rawValue = rawValue }

        /// The code's name.
        public var description: String { name }

        /// NATS could not be reached, or a call to it failed (connection lost, no leader, bad reply).
        public static let unavailable = Code(rawValue: 2000)
        /// A wait on NATS ended before its answer came; the call may still take effect: retry, and
        /// check the outcome (appends are fenced, so a retry cannot fork the log).
        public static let timedOut = Code(rawValue: 2001)
        /// Another writer appended to the stream: this writer no longer owns it and stopped shipping
        /// (`Nats-Expected-Last-Sequence` failed). Its unshipped local events are not part of the history.
        public static let fenced = Code(rawValue: 2002)
        /// The stream and the ledger disagree: the stream's entry at a position has another hash than
        /// the ledger's event there, or the stream is ahead of the ledger. Nothing was published.
        public static let diverged = Code(rawValue: 2003)
        /// The stream exists with settings replication cannot rely on (deletes or purges allowed).
        public static let misconfigured = Code(rawValue: 2004)
        /// The ledger refused or failed an operation (its `LedgerError` is in the message).
        public static let ledger = Code(rawValue: 2005)
        /// The writer lease is held by another writer, or was lost.
        public static let leaseHeld = Code(rawValue: 2006)
        /// The request is malformed (a bad URL list, stream or shard name).
        public static let invalidArguments = Code(rawValue: 2007)
        /// The operation involves more than one container (there are no cross-container operations).
        public static let crossContainer = Code(rawValue: 2008)
        /// No writer owns the shard right now (no responder): retry after a standby takes the lease.
        public static let noWriter = Code(rawValue: 2009)
        /// This ledger may not write or publish in its role: a replica, a deposed writer, or a writer
        /// whose lease is lost or has less than its safety margin left.
        public static let notWriter = Code(rawValue: 2010)

        private static let names: [Int: String] = [
            2000: "unavailable", 2001: "timedOut", 2002: "fenced", 2003: "diverged", 2004: "misconfigured",
            2005: "ledger", 2006: "leaseHeld", 2007: "invalidArguments", 2008: "crossContainer", 2009: "noWriter",
            2010: "notWriter",
        ]
    }

    /// What kind of failure.
    public var code: Code
    /// What failed and what to do about it.
    public var message: String

    /// Makes an error.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// Wraps a ledger error.
    public init(_ error: LedgerError, while doing: String) {
        self.init(.ledger, "\(doing): \(error.message) (\(error.code.name))")
    }

    /// `name: message`.
    public var description: String { "\(code.name): \(message)" }

    /// Whether trying again may succeed: NATS could not be reached or did not answer in time (a lost
    /// connection, a leader election), ``Code/unavailable`` or ``Code/timedOut``.
    var isTransient: Bool { code == .unavailable || code == .timedOut }
}
