import ShareLedger
@testable import ShareLedgerServer
import Testing

/// How every error code of the ledger reaches an HTTP client.
@Suite("Server: ledger errors as CloudKit Web Services errors")
struct WireErrorTests {
    /// Every code the ledger defines, with the CloudKit Web Services code it must become.
    static let expected: [(LedgerError.Code, WireError.Code)] = [
        (.invalidArguments, .badRequest), (.limitExceeded, .badRequest), (.tooManyParticipants, .badRequest),
        (.badContainer, .badRequest), (.badDatabase, .badRequest), (.serverRejectedRequest, .badRequest),
        (.readOnly, .badRequest),
        (.unknownItem, .notFound), (.zoneNotFound, .zoneNotFound),
        (.permissionFailure, .accessDenied), (.participantMayNeedVerification, .accessDenied),
        (.serverRecordChanged, .conflict), (.wrongExpectedVersion, .conflict),
        (.alreadyShared, .exists), (.participantAlreadyInvited, .exists),
        (.referenceViolation, .validatingReferenceError), (.notAuthenticated, .authenticationRequired),
        (.quotaExceeded, .quotaExceeded), (.storageFull, .quotaExceeded), (.batchRequestFailed, .atomicError),
        (.closed, .tryAgainLater), (.timedOut, .tryAgainLater), (.operationCancelled, .tryAgainLater),
        // Only damage and faults are the server's own errors (500).
        (.storageFailure, .internalError), (.notALedger, .internalError), (.formatTooNew, .internalError),
        (.corruptedData, .internalError), (.partialFailure, .internalError),
    ]

    @Test("each ledger error code becomes its CloudKit Web Services code and status; only faults are 500")
    func mapping() {
        for (ledger, wire) in Self.expected {
            let error = WireError(LedgerError(ledger, "what failed"))
            #expect(error.code == wire, "\(ledger.name)")
            #expect((error.code.status == 500) == (wire == .internalError), "\(ledger.name)")
            #expect(error.reason == "\(ledger.name): what failed")
        }
    }
}
