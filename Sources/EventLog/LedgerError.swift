import LMDB

/// The one error type of ShareLedger.
///
/// Every failure has a ``Code``: CloudKit's codes keep CloudKit's numbers (`CKError.Code`), the
/// ledger's own start at 1000. Catch a single code with a pattern:
///
/// ```swift
/// do {
///     try await log.append(events, to: stream, expectedVersion: .exact(3), metadata: metadata)
/// } catch LedgerError.Code.wrongExpectedVersion {
///     // reload the stream and decide again
/// }
/// ```
///
/// ``message`` says what failed and what to do about it.
public struct LedgerError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of failure. New codes may be added; switch with a `default`.
    public struct Code: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        /// The number: CloudKit's for CloudKit's codes, 1000 and up for the ledger's own.
        public let rawValue: Int
        /// The code's name, e.g. `"unknownItem"`.
        public let name: String

        /// Makes the code with `rawValue`; unknown numbers get the name `"code<N>"`.
        public init(rawValue: Int) {
            self.rawValue = rawValue
            self.name = Code.names[rawValue] ?? "code\(rawValue)"
        }

        /// A code of a layer built on the log (the sharing layer declares CloudKit's other codes).
        package init(_ rawValue: Int, _ name: String) {
            self.rawValue = rawValue
            self.name = name
        }

        /// The code's name.
        public var description: String { name }

        /// Lets `catch LedgerError.Code.unknownItem` match an error by its code.
        public static func ~= (code: Code, error: any Error) -> Bool {
            (error as? LedgerError)?.code == code
        }

        /// Codes are equal when their numbers are.
        public static func == (lhs: Code, rhs: Code) -> Bool { lhs.rawValue == rhs.rawValue }
        /// Hashes the number.
        public func hash(into hasher: inout Hasher) { hasher.combine(rawValue) }

        // MARK: CloudKit's codes the log itself uses (CKError.Code numbers)

        /// The request is malformed or breaks a rule.
        public static let invalidArguments = Code(12, "invalidArguments")
        /// The request is too large (too many items or bytes); split it.
        public static let limitExceeded = Code(27, "limitExceeded")
        /// The operation was cancelled.
        public static let operationCancelled = Code(20, "operationCancelled")

        // MARK: The ledger's own

        /// An append's expected stream version did not hold (optimistic concurrency).
        public static let wrongExpectedVersion = Code(1000, "wrongExpectedVersion")
        /// The ledger reached its maximum size; nothing of the failed write was stored.
        public static let storageFull = Code(1001, "storageFull")
        /// The storage failed (I/O error, damaged file, LMDB error).
        public static let storageFailure = Code(1002, "storageFailure")
        /// The path is not a ledger (missing, not a directory, foreign files, not writable).
        public static let notALedger = Code(1003, "notALedger")
        /// The ledger was written by a newer version of ShareLedger.
        public static let formatTooNew = Code(1004, "formatTooNew")
        /// Stored data does not decode or does not hold together.
        public static let corruptedData = Code(1005, "corruptedData")
        /// The ledger is closed.
        public static let closed = Code(1006, "closed")
        /// The ledger was opened read-only and cannot take writes.
        public static let readOnly = Code(1007, "readOnly")
        /// A wait ended before what it waited for happened.
        public static let timedOut = Code(1008, "timedOut")
        /// The ledger may not take this write in its role: a replica, a deposed writer, or a writer
        /// whose lease is lost or has too little time left (the message names the role and what to do).
        public static let notWriter = Code(1009, "notWriter")

        /// Names by number: the ledger's own codes, and CloudKit's `CKError.Code` numbering, which the
        /// ledger's codes share (a layer above declares the CloudKit codes it uses as members).
        private static let names: [Int: String] = [
            1: "internalError", 2: "partialFailure", 3: "networkUnavailable", 4: "networkFailure",
            5: "badContainer", 6: "serviceUnavailable", 7: "requestRateLimited", 8: "missingEntitlement",
            9: "notAuthenticated", 10: "permissionFailure", 11: "unknownItem", 12: "invalidArguments",
            13: "resultsTruncated", 14: "serverRecordChanged", 15: "serverRejectedRequest",
            16: "assetFileNotFound", 17: "assetFileModified", 18: "incompatibleVersion", 19: "constraintViolation",
            20: "operationCancelled", 21: "changeTokenExpired", 22: "batchRequestFailed", 23: "zoneBusy",
            24: "badDatabase", 25: "quotaExceeded", 26: "zoneNotFound", 27: "limitExceeded",
            28: "userDeletedZone", 29: "tooManyParticipants", 30: "alreadyShared", 31: "referenceViolation",
            32: "managedAccountRestricted", 33: "participantMayNeedVerification", 34: "serverResponseLost",
            35: "assetNotAvailable", 36: "accountTemporarilyUnavailable", 37: "participantAlreadyInvited",
            1000: "wrongExpectedVersion", 1001: "storageFull", 1002: "storageFailure", 1003: "notALedger",
            1004: "formatTooNew", 1005: "corruptedData", 1006: "closed", 1007: "readOnly", 1008: "timedOut",
            1009: "notWriter",
        ]
    }

    /// What kind of failure.
    public var code: Code
    /// What failed and what to do about it.
    public var message: String
    /// For `partialFailure` (a code of the sharing layer): the error of each failed item, keyed by
    /// the item's description (a URL string, a record name, ...).
    public var partialErrors: [String: LedgerError]
    /// The lower-level error, where there is one, as text (an LMDB or system error).
    public var underlying: String?

    /// Makes an error.
    public init(_ code: Code, _ message: String, partialErrors: [String: LedgerError] = [:], underlying: String? = nil) {
        self.code = code
        self.message = message
        self.partialErrors = partialErrors
        self.underlying = underlying
    }

    /// The code's name and number, the message, and the underlying error if any.
    public var description: String {
        var text = "\(code.name) (\(code.rawValue)): \(message)"
        if let underlying { text += " [\(underlying)]" }
        return text
    }
}

extension LedgerError {
    /// Maps a storage-layer error to the ledger's codes, keeping the LMDB text as ``underlying``.
    package init(_ error: LMDBError, while doing: String) {
        let code: Code
        let advice: String
        switch error.code {
        case .storageFull:
            code = .storageFull
            advice = error.message
        case .badPath, .invalid, .versionMismatch:
            code = .notALedger
            advice = error.message
        case .corrupted where error.returnCode == 0:
            // The wrapper's own check of data.mdb: its message names the file and what to do.
            code = .corruptedData
            advice = error.message
        case .pageNotFound, .corrupted, .panic, .cursorFull:
            code = .corruptedData
            // `derived/` is a cache of the log: rebuilt from it, never restored.
            advice =
                DerivedState.isCompanionPath(error.path)
                ? "derived/data.mdb is damaged; " + DerivedState.damagedAdvice
                : "the ledger's data file is damaged; run `share-ledger audit` and restore from a backup or export"
        case .closed:
            code = .closed
            advice = "the ledger is closed; open it again"
        case .readersFull:
            code = .storageFailure
            advice = "too many concurrent readers; raise maxReaders or look for stale readers (mdb_stat -r)"
        case .system where error.errno == ENOSPC:
            code = .storageFull
            advice = "the disk is full; nothing of the failed write was stored. Free space and retry"
        default:
            code = .storageFailure
            advice = error.message
        }
        self.init(code, "\(doing) failed: \(advice)", underlying: error.description)
    }

    /// Wraps any error from below the public API.
    package static func wrap(_ error: any Error, while doing: String) -> LedgerError {
        if let ledger = error as? LedgerError { return ledger }
        if let lmdb = error as? LMDBError { return LedgerError(lmdb, while: doing) }
        return LedgerError(.storageFailure, "\(doing) failed: \(error)", underlying: "\(error)")
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
