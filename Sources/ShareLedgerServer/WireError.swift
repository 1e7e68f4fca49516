import ShareLedger

/// An error as CloudKit Web Services sends it: a `serverErrorCode`, the HTTP status that goes with it
/// when it fails the whole request, and a `reason` that never carries personal data.
struct WireError: Error, Sendable, Hashable {
    /// CloudKit Web Services' error codes and their HTTP statuses.
    enum Code: String, Sendable {
        case accessDenied = "ACCESS_DENIED"
        case atomicError = "ATOMIC_ERROR"
        case authenticationFailed = "AUTHENTICATION_FAILED"
        case authenticationRequired = "AUTHENTICATION_REQUIRED"
        case badRequest = "BAD_REQUEST"
        case conflict = "CONFLICT"
        case exists = "EXISTS"
        case internalError = "INTERNAL_ERROR"
        case notFound = "NOT_FOUND"
        case quotaExceeded = "QUOTA_EXCEEDED"
        case throttled = "THROTTLED"
        case tryAgainLater = "TRY_AGAIN_LATER"
        case validatingReferenceError = "VALIDATING_REFERENCE_ERROR"
        case zoneNotFound = "ZONE_NOT_FOUND"

        var status: Int {
            switch self {
            case .accessDenied: return 403
            case .atomicError, .badRequest: return 400
            case .authenticationFailed: return 401
            case .authenticationRequired: return 421
            case .conflict, .exists: return 409
            case .internalError: return 500
            case .notFound, .zoneNotFound: return 404
            case .quotaExceeded: return 413
            case .throttled: return 429
            case .tryAgainLater: return 503
            case .validatingReferenceError: return 412
            }
        }
    }

    var code: Code
    var reason: String
    /// The HTTP status when the error fails the whole request (the code's, unless a request limit
    /// asks for another: 413 for a body over the limit, 404 for an unknown path, 405 for a method).
    var status: Int
    /// Where a user can sign in (for `AUTHENTICATION_REQUIRED`).
    var redirectURL: String?

    init(_ code: Code, _ reason: String, status: Int? = nil, redirectURL: String? = nil) {
        self.code = code
        self.reason = reason
        self.status = status ?? code.status
        self.redirectURL = redirectURL
    }

    static func wrongType(_ path: String, _ expected: String) -> WireError {
        WireError(.badRequest, "\(path) must be \(expected)")
    }

    /// A ledger error as CloudKit Web Services would answer it. The ledger's messages carry no
    /// personal data (its house rule), so they become the reason.
    init(_ error: LedgerError) {
        let code: Code
        switch error.code {
        case .unknownItem: code = .notFound
        case .permissionFailure, .participantMayNeedVerification: code = .accessDenied
        case .serverRecordChanged, .wrongExpectedVersion: code = .conflict
        case .alreadyShared, .participantAlreadyInvited: code = .exists
        case .zoneNotFound: code = .zoneNotFound
        case .referenceViolation: code = .validatingReferenceError
        case .notAuthenticated: code = .authenticationRequired
        case .quotaExceeded, .storageFull: code = .quotaExceeded
        case .batchRequestFailed: code = .atomicError
        case .closed, .timedOut, .operationCancelled, .notWriter: code = .tryAgainLater
        case .invalidArguments, .limitExceeded, .tooManyParticipants, .badContainer, .badDatabase,
            .serverRejectedRequest, .readOnly, .changeTokenExpired:
            code = .badRequest
        default: code = .internalError
        }
        self.init(code, "\(error.code.name): \(error.message)")
    }

    /// The error dictionary: `{uuid, serverErrorCode, reason, redirectURL?}` plus `extra` keys
    /// (`recordName`, `shortGUID`, ... for a per-item error).
    func dictionary(uuid: String?, extra: [String: JSONValue] = [:]) -> JSONValue {
        var object = extra
        object["serverErrorCode"] = .string(code.rawValue)
        object["reason"] = .string(reason)
        if let uuid { object["uuid"] = .string(uuid) }
        if let redirectURL { object["redirectURL"] = .string(redirectURL) }
        return .object(object)
    }
}
