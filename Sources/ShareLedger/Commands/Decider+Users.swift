import Foundation
import SwiftProtobuf

/// Users: registration.
extension Decider {
    // MARK: - Users

    func registerUser(
        _ txn: borrowing some ReadModelStore & ~Copyable, name: String, email: String?, phone: String?, names: PersonNameComponents?
    ) throws -> Decision {
        try Decider.checkUserName(name)
        try Decider.checkContainer(container)
        guard try models.user(txn, container, name) == nil else {
            throw LedgerError(.invalidArguments, "user \(name) is already registered in \(container)")
        }
        var e = Shareledger_Events_V1_UserRegistered()
        e.userRecordName = name
        if let email, !email.isEmpty {
            try Decider.checkName(email, "email address", max: Limits.maxLookupBytes)
            guard email.contains("@") else { throw LedgerError(.invalidArguments, "\"\(email)\" is not an email address") }
            if let other = try models.userName(txn, container, email: email) {
                throw LedgerError(.invalidArguments, "the email \(email) belongs to user \(other) already")
            }
            e.emailAddress = email
        }
        if let phone, !phone.isEmpty {
            try Decider.checkName(phone, "phone number", max: 32)
            guard ReadModels.normalizePhone(phone).count >= 3 else {
                throw LedgerError(.invalidArguments, "\"\(phone)\" is not a phone number")
            }
            if let other = try models.userName(txn, container, phone: phone) {
                throw LedgerError(.invalidArguments, "the phone number \(phone) belongs to user \(other) already")
            }
            e.phoneNumber = phone
        }
        if let names {
            e.name.givenName = String((names.givenName ?? "").prefix(100))
            e.name.familyName = String((names.familyName ?? "").prefix(100))
            e.name.middleName = String((names.middleName ?? "").prefix(100))
            e.name.nickname = String((names.nickname ?? "").prefix(100))
            if e.name == Shareledger_Events_V1_PersonName() { e.clearName() }
        }
        return .output([event(Streams.user(name), .userRegistered(e))], .user(name: name))
    }
}
