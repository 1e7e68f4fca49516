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

        private init(_ rawValue: Int, _ name: String) {
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

        // MARK: CloudKit's codes (CKError.Code numbers)

        /// Some items of a batch failed; ``LedgerError/partialErrors`` has the error of each.
        public static let partialFailure = Code(2, "partialFailure")
        /// The container is unknown or not allowed.
        public static let badContainer = Code(5, "badContainer")
        /// The acting user has no account.
        public static let notAuthenticated = Code(9, "notAuthenticated")
        /// The acting user may not do this.
        public static let permissionFailure = Code(10, "permissionFailure")
        /// The item (share, record, zone, URL) does not exist.
        public static let unknownItem = Code(11, "unknownItem")
        /// The request is malformed or breaks a rule.
        public static let invalidArguments = Code(12, "invalidArguments")
        /// The item changed since it was read (a stale change tag, an expected version that does not hold).
        public static let serverRecordChanged = Code(14, "serverRecordChanged")
        /// The server refused the request.
        public static let serverRejectedRequest = Code(15, "serverRejectedRequest")
        /// Another item of an atomic batch failed.
        public static let batchRequestFailed = Code(22, "batchRequestFailed")
        /// The operation does not fit the database it targets.
        public static let badDatabase = Code(24, "badDatabase")
        /// The owner's storage quota is exhausted.
        public static let quotaExceeded = Code(25, "quotaExceeded")
        /// The zone does not exist.
        public static let zoneNotFound = Code(26, "zoneNotFound")
        /// The request is too large (too many items or bytes); split it.
        public static let limitExceeded = Code(27, "limitExceeded")
        /// The share would have more than 100 participants.
        public static let tooManyParticipants = Code(29, "tooManyParticipants")
        /// The record already belongs to a share.
        public static let alreadyShared = Code(30, "alreadyShared")
        /// A reference points at a record that does not exist.
        public static let referenceViolation = Code(31, "referenceViolation")
        /// The caller may be an invited participant who still has to verify an email or phone.
        public static let participantMayNeedVerification = Code(33, "participantMayNeedVerification")
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

        private static let all: [Code] = [
            partialFailure, badContainer, notAuthenticated, permissionFailure, unknownItem, invalidArguments,
            serverRecordChanged, serverRejectedRequest, batchRequestFailed, badDatabase, quotaExceeded,
            zoneNotFound, limitExceeded, tooManyParticipants, alreadyShared, referenceViolation,
            participantMayNeedVerification, operationCancelled, wrongExpectedVersion, storageFull,
            storageFailure, notALedger, formatTooNew, corruptedData, closed, readOnly, timedOut,
        ]
        private static let names: [Int: String] = Dictionary(uniqueKeysWithValues: all.map { ($0.rawValue, $0.name) })
    }

    /// What kind of failure.
    public var code: Code
    /// What failed and what to do about it.
    public var message: String
    /// For ``Code/partialFailure``: the error of each failed item, keyed by the item's description
    /// (a URL string, a record name, ...).
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
    init(_ error: LMDBError, while doing: String) {
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
            advice = "the ledger's data file is damaged; run `share-ledger audit` and restore from a backup or export"
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
    static func wrap(_ error: any Error, while doing: String) -> LedgerError {
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
