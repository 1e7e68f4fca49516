import EventLog
import Foundation
import SwiftProtobuf

/// Participant lookup (CloudKit's `CKFetchShareParticipantsOperation`) and the lookup rules it shares
/// with inviting.
extension Decider {
    /// Longest phone number accepted, in bytes.
    package static let maxPhoneBytes = 32

    /// The account `lookup` names in the container: its user record name, or `""` when the lookup is
    /// an email address or phone number no account has.
    ///
    /// Messages never repeat the email address or phone number (personal data stays out of errors).
    ///
    /// - Throws: ``LedgerError/Code/unknownItem`` for a user record id no user of the container has;
    ///   ``LedgerError/Code/invalidArguments`` for an email address or phone number that is not one.
    package func account(_ txn: borrowing some ReadModelStore & ~Copyable, for lookup: LookupInfo) throws -> String {
        if let id = lookup.userRecordID {
            guard try models.userExists(txn, container, id.recordName) else {
                throw LedgerError(
                    .unknownItem, "no user with that user record name is registered in container \(container): "
                        + "look people up by a registered user record name, an email address or a phone number")
            }
            return id.recordName
        }
        if let email = lookup.emailAddress {
            let bytes = email.utf8
            guard !bytes.isEmpty, bytes.count <= Limits.maxLookupBytes, !bytes.contains(0), bytes.contains(UInt8(ascii: "@")) else {
                throw LedgerError(
                    .invalidArguments, "the email address of a lookup is not valid: it needs an @, at most "
                        + "\(Limits.maxLookupBytes) bytes and no NUL")
            }
            return try models.userName(txn, container, email: email) ?? ""
        }
        if let phone = lookup.phoneNumber {
            let bytes = phone.utf8
            guard !bytes.isEmpty, bytes.count <= Decider.maxPhoneBytes, !bytes.contains(0),
                ReadModels.normalizePhone(phone).count >= 3
            else {
                throw LedgerError(
                    .invalidArguments, "the phone number of a lookup is not valid: it needs at least 3 digits and at "
                        + "most \(Decider.maxPhoneBytes) bytes")
            }
            return try models.userName(txn, container, phone: phone) ?? ""
        }
        throw LedgerError(.invalidArguments, "a lookup needs an email address, a phone number or a user record id")
    }

    /// Looks up one person to invite: a participant value (privateUser, readOnly, status unknown, not in
    /// any share yet) whose identity names the account when one has the lookup, or has no account
    /// (`hasiCloudAccount == false`) for an email address or phone number nobody registered, as
    /// CloudKit answers. Every lookup, failed or not, appends `ShareParticipantFetched`.
    package func lookupParticipant(_ txn: borrowing some ReadModelStore & ~Copyable, _ lookup: LookupInfo) throws -> Decision {
        var e = Shareledger_Events_V1_ShareParticipantFetched()
        e.lookupInfo = Decider.bounded(PBLookupInfo(lookup))
        let stream = signedIn ? Streams.user(actor) : Streams.anonymous
        func failed(_ error: LedgerError) -> Decision {
            e.errorCode = Int32(error.code.rawValue)
            return Decision(events: [event(stream, .shareParticipantFetched(e))], outcome: .failed(error))
        }
        guard signedIn, try models.userExists(txn, container, actor) else {
            return failed(
                LedgerError(.notAuthenticated, "looking up participants needs a signed-in user; register the user and act as them"))
        }
        let user: String
        do {
            user = try account(txn, for: lookup)
        } catch let error as LedgerError {
            return failed(error)
        }
        e.userRecordName = user
        guard !user.isEmpty else {
            let identity = UserIdentity(userRecordID: nil, lookupInfo: lookup, nameComponents: nil, hasiCloudAccount: false)
            return .output([event(stream, .shareParticipantFetched(e))], .participant(Share.Participant(lookedUp: identity)))
        }
        return .output([event(stream, .shareParticipantFetched(e))], .lookedUpParticipant(user: user, lookup: lookup))
    }

    /// `lookup` with each field cut to at most 254 bytes (on a character boundary), so that a refused
    /// lookup of any size is logged with a bounded event.
    package static func bounded(_ lookup: PBLookupInfo) -> PBLookupInfo {
        func cut(_ text: String) -> String {
            guard text.utf8.count > Limits.maxLookupBytes else { return text }
            var out = ""
            for character in text {
                guard out.utf8.count + character.utf8.count <= Limits.maxLookupBytes else { break }
                out.append(character)
            }
            return out
        }
        var out = lookup
        out.emailAddress = cut(lookup.emailAddress)
        out.phoneNumber = cut(lookup.phoneNumber)
        out.userRecordName = cut(lookup.userRecordName)
        return out
    }
}
