import EventLog
import Foundation
import SwiftProtobuf

/// Users: registration.
extension Decider {
    // MARK: - Users

    // Messages name the email address and phone number only by a placeholder (``PersonalData``).

    /// Refuses an email address or phone number (`what`, redacted) that `other` registered already.
    private static func refuseRegistered(_ what: String, to other: String?) throws {
        guard let other else { return }
        throw LedgerError(.invalidArguments, "\(what) belongs to user \(other) already; register the user without it or with another one")
    }

    package func registerUser(
        _ txn: borrowing some ReadModelStore & ~Copyable, name: String, email: String?, phone: String?, names: PersonNameComponents?
    ) throws -> Decision {
        try Decider.checkUserName(name)
        try Decider.checkContainer(container)
        guard try !models.userExists(txn, container, name) else {
            throw LedgerError(.invalidArguments, "user \(name) is already registered in \(container)")
        }
        var e = Shareledger_Events_V1_UserRegistered()
        e.userRecordName = name
        if let email, !email.isEmpty {
            let bytes = email.utf8
            let what = "the email address \(PersonalData.redact(email, as: .emailAddress))"
            guard bytes.count <= Limits.maxLookupBytes, !bytes.contains(0), bytes.contains(UInt8(ascii: "@")) else {
                throw LedgerError(.invalidArguments, "\(what) is not valid: it needs an @, at most \(Limits.maxLookupBytes) bytes and no NUL")
            }
            try Decider.refuseRegistered(what, to: models.userName(txn, container, email: email))
            e.emailAddress = email
        }
        if let phone, !phone.isEmpty {
            let bytes = phone.utf8
            let what = "the phone number \(PersonalData.redact(phone, as: .phoneNumber))"
            guard bytes.count <= Decider.maxPhoneBytes, !bytes.contains(0), ReadModels.normalizePhone(phone).count >= 3 else {
                throw LedgerError(
                    .invalidArguments, "\(what) is not valid: it needs at least 3 digits, at most \(Decider.maxPhoneBytes) bytes and no NUL")
            }
            try Decider.refuseRegistered(what, to: models.userName(txn, container, phone: phone))
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

    /// An erasure request: appends `PersonalDataForgotten` unless the user was forgotten already
    /// (forgetting is idempotent: a second request succeeds and appends nothing). The key itself is
    /// destroyed by `ShareLedger.forget(user:in:requestedBy:)` once the event is committed.
    package func forgetUser(_ txn: borrowing some ReadModelStore & ~Copyable, name: String) throws -> Decision {
        try Decider.checkUserName(name)
        try Decider.checkContainer(container)
        guard let state = try models.user(txn, container, name) else {
            throw LedgerError(
                .unknownItem, "user \(name) is not registered in \(container); check the user record name and the container")
        }
        guard state.forgottenAtMicros == 0 else { return .output([], .user(name: name)) }
        var e = Shareledger_Events_V1_PersonalDataForgotten()
        e.userRecordName = name
        // (The keyed hashes of the user's email and phone, whose keys go too, are added when the
        // event is sealed: ``ReadModels/sealingPersonalData(of:container:_:)``.)
        return .output([event(Streams.user(name), .personalDataForgotten(e))], .user(name: name))
    }

    /// An erasure request for an email address or phone number nobody registered with: appends
    /// `PersonalDataForgotten` naming the address by its keyed hash, unless it is forgotten already
    /// and nothing was sealed to it since (idempotent). The address's key is destroyed by
    /// `ShareLedger.forget(address:in:requestedBy:)` once the event is committed.
    ///
    /// - Throws: ``LedgerError/Code/invalidArguments`` for a lookup by account, or an address a user
    ///   registered with (forget that user: it takes the address with it); ``LedgerError/Code/readOnly``
    ///   without a key store.
    package func forgetAddress(_ txn: borrowing some ReadModelStore & ~Copyable, _ lookup: LookupInfo) throws -> Decision {
        try Decider.checkContainer(container)
        let wanted = PBLookupInfo(lookup)
        guard lookup.userRecordID == nil, wanted.emailAddress.isEmpty != wanted.phoneNumber.isEmpty else {
            throw LedgerError(
                .invalidArguments, "forgetting an address needs one email address or one phone number; forget a user by "
                    + "their user record name instead")
        }
        guard let address = models.addressHash(container, of: wanted) else {
            throw LedgerError(.readOnly, "the ledger has no key store open for writing; open it for writing to forget an address")
        }
        let owner = try wanted.emailAddress.isEmpty
            ? models.userName(txn, container, phone: wanted.phoneNumber) : models.userName(txn, container, email: wanted.emailAddress)
        if let owner {
            throw LedgerError(
                .invalidArguments, "\(lookup) belongs to user \(owner): forget that user, which erases the invitations and "
                    + "lookups to their email address and phone number too")
        }
        guard try models.forgottenAddress(txn, container, address) == nil else { return .output(.none) }
        var e = Shareledger_Events_V1_PersonalDataForgotten()
        switch address.kind {
        case .email: e.emailHash = Data(address.hash)
        case .phone: e.phoneHash = Data(address.hash)
        }
        return .output([event(Streams.address(address), .personalDataForgotten(e))], .none)
    }
}
