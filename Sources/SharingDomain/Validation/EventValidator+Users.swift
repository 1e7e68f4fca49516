import EventLog
import Foundation

/// Checking the events about users: registrations and erasures.
extension EventValidator {
    func checkUserRegistered(
        _ e: Shareledger_Events_V1_UserRegistered, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        try Decider.checkUserName(e.userRecordName)
        try Decider.checkContainer(d.container)
        guard try m.user(txn, d.container, e.userRecordName) == nil else {
            throw Self.refuse("user \(e.userRecordName) is registered already")
        }
        // Sealed: checked by the keyed hashes it carries (no key needed).
        if !e.sealed.emailHash.isEmpty,
            try m.string(txn, m.userLookup, ReadModels.lookupKey(d.container, hash: Array(e.sealed.emailHash), kind: "E")) != nil
        {
            throw Self.refuse("its email address belongs to another user already")
        }
        if !e.sealed.phoneHash.isEmpty,
            try m.string(txn, m.userLookup, ReadModels.lookupKey(d.container, hash: Array(e.sealed.phoneHash), kind: "P")) != nil
        {
            throw Self.refuse("its phone number belongs to another user already")
        }
        if !e.emailAddress.isEmpty, try m.userName(txn, d.container, email: e.emailAddress) != nil {
            throw Self.refuse("its email address belongs to another user already")
        }
        if !e.phoneNumber.isEmpty, try m.userName(txn, d.container, phone: e.phoneNumber) != nil {
            throw Self.refuse("its phone number belongs to another user already")
        }
    }

    func checkPersonalDataForgotten(
        _ e: Shareledger_Events_V1_PersonalDataForgotten, _ d: Decider, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        guard [e.emailHash, e.phoneHash].allSatisfy({ $0.isEmpty || $0.count == AddressHash.byteCount }) else {
            throw Self.refuse("its keyed hashes are not \(AddressHash.byteCount) bytes")
        }
        if e.userRecordName.isEmpty {
            // An address nobody registered with, by its keyed hash.
            guard e.addresses.count == 1, let address = e.addresses.first else {
                throw Self.refuse("it names neither a user nor exactly one address")
            }
            guard try m.string(txn, m.userLookup, ReadModels.addressKey(d.container, address)) == nil else {
                throw Self.refuse("its address belongs to a registered user (who is forgotten with the address)")
            }
            guard try m.forgottenAddress(txn, d.container, address) == nil else {
                throw Self.refuse("its address was forgotten already, and nothing was sealed to it since")
            }
            return
        }
        try Decider.checkUserName(e.userRecordName)
        guard let state = try m.user(txn, d.container, e.userRecordName) else {
            throw Self.refuse("user \(e.userRecordName) is not registered in the container")
        }
        guard state.forgottenAtMicros == 0 else { throw Self.refuse("user \(e.userRecordName) was forgotten already") }
    }
}
