import EventLog

extension LedgerError.Code {
    // MARK: CloudKit's codes of the sharing model (CKError.Code numbers)

    /// Some items of a batch failed; `LedgerError.partialErrors` has the error of each.
    public static let partialFailure = LedgerError.Code(2, "partialFailure")
    /// The container is unknown or not allowed.
    public static let badContainer = LedgerError.Code(5, "badContainer")
    /// The acting user has no account.
    public static let notAuthenticated = LedgerError.Code(9, "notAuthenticated")
    /// The acting user may not do this.
    public static let permissionFailure = LedgerError.Code(10, "permissionFailure")
    /// The item (share, record, zone, URL) does not exist.
    public static let unknownItem = LedgerError.Code(11, "unknownItem")
    /// The item changed since it was read (a stale change tag, an expected version that does not hold).
    public static let serverRecordChanged = LedgerError.Code(14, "serverRecordChanged")
    /// The server refused the request.
    public static let serverRejectedRequest = LedgerError.Code(15, "serverRejectedRequest")
    /// Another item of an atomic batch failed.
    public static let batchRequestFailed = LedgerError.Code(22, "batchRequestFailed")
    /// The operation does not fit the database it targets.
    public static let badDatabase = LedgerError.Code(24, "badDatabase")
    /// The owner's storage quota is exhausted.
    public static let quotaExceeded = LedgerError.Code(25, "quotaExceeded")
    /// The zone does not exist.
    public static let zoneNotFound = LedgerError.Code(26, "zoneNotFound")
    /// The share would have more than 100 participants.
    public static let tooManyParticipants = LedgerError.Code(29, "tooManyParticipants")
    /// The record already belongs to a share.
    public static let alreadyShared = LedgerError.Code(30, "alreadyShared")
    /// A reference points at a record that does not exist.
    public static let referenceViolation = LedgerError.Code(31, "referenceViolation")
    /// The caller may be an invited participant who still has to verify an email or phone.
    public static let participantMayNeedVerification = LedgerError.Code(33, "participantMayNeedVerification")
    /// The caller is an invited participant of the share already (pending): accept that invitation
    /// instead of claiming another.
    public static let participantAlreadyInvited = LedgerError.Code(37, "participantAlreadyInvited")
}
