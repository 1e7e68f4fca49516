import EventLog
import Foundation

/// Projecting the events about users: registrations and erasures.
extension Projector {
    /// Since crypto-shredding: the row keeps the box, opened only for answers, and the event's
    /// keyed hashes, which key the lookup entries. No key is needed: the read models follow
    /// from the log alone, on replicas and in rebuilds too.
    func userRegisteredSealed(
        _ e: Shareledger_Events_V1_UserRegistered, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        var state = UserState()
        state.sealed = e.sealed
        state.sealed.emailHash = Data()
        state.sealed.phoneHash = Data()
        state.registeredAtMicros = context.recordedAtMicros
        if e.sealed.emailHash.count == ReadModels.lookupHashBytes {
            state.emailHash = e.sealed.emailHash
            try m.putRaw(
                txn, m.userLookup, ReadModels.lookupKey(context.container, hash: Array(e.sealed.emailHash), kind: "E"),
                Array(e.userRecordName.utf8))
        }
        if e.sealed.phoneHash.count == ReadModels.lookupHashBytes {
            state.phoneHash = e.sealed.phoneHash
            try m.putRaw(
                txn, m.userLookup, ReadModels.lookupKey(context.container, hash: Array(e.sealed.phoneHash), kind: "P"),
                Array(e.userRecordName.utf8))
        }
        try m.put(txn, m.users, ReadModels.userKey(context.container, e.userRecordName), state)
        try m.add(txn, .users, 1)
    }

    /// The addresses whose keys go with this erasure: their invitations answer as erased.
    func personalDataForgotten(
        _ e: Shareledger_Events_V1_PersonalDataForgotten, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        for address in e.addresses { try forget(address, context, txn) }
        guard !e.userRecordName.isEmpty else { return }
        // So do those of the invitations bound to the user (verified ones: the user proved the address).
        for address in try m.boundAddresses(txn, context.container, user: e.userRecordName) { try forget(address, context, txn) }
        let key = ReadModels.userKey(context.container, e.userRecordName)
        guard let state = try m.user(txn, context.container, e.userRecordName) else { return }
        if !state.emailHash.isEmpty {
            _ = try m.deleteRow(txn, m.userLookup, ReadModels.lookupKey(context.container, hash: Array(state.emailHash), kind: "E"))
        }
        if !state.phoneHash.isEmpty {
            _ = try m.deleteRow(txn, m.userLookup, ReadModels.lookupKey(context.container, hash: Array(state.phoneHash), kind: "P"))
        }
        // A user registered before crypto-shredding: its row and lookup entries held plaintext (and
        // so does its UserRegistered event, which `audit` counts).
        let name = Array(e.userRecordName.utf8)
        for legacy in [
            state.emailAddress.isEmpty ? nil : ReadModels.lookupKey(context.container, email: state.emailAddress),
            state.phoneNumber.isEmpty ? nil : ReadModels.lookupKey(context.container, phone: state.phoneNumber),
        ] {
            if let legacy, try m.string(txn, m.userLookup, legacy).map({ Array($0.utf8) }) == name {
                _ = try m.deleteRow(txn, m.userLookup, legacy)
            }
        }
        var erased = UserState()
        erased.registeredAtMicros = state.registeredAtMicros
        erased.forgottenAtMicros = context.recordedAtMicros
        try m.put(txn, m.users, key, erased)
    }

    func userRegistered(
        _ e: Shareledger_Events_V1_UserRegistered, _ context: Context, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws {
        let m = models
        var state = UserState()
        state.emailAddress = e.emailAddress
        state.phoneNumber = e.phoneNumber
        state.givenName = e.name.givenName
        state.familyName = e.name.familyName
        state.middleName = e.name.middleName
        state.nickname = e.name.nickname
        state.registeredAtMicros = context.recordedAtMicros
        try m.put(txn, m.users, ReadModels.userKey(context.container, e.userRecordName), state)
        if !e.emailAddress.isEmpty {
            try m.putRaw(
                txn, m.userLookup, ReadModels.lookupKey(context.container, email: e.emailAddress),
                Array(e.userRecordName.utf8))
        }
        if !e.phoneNumber.isEmpty {
            try m.putRaw(
                txn, m.userLookup, ReadModels.lookupKey(context.container, phone: e.phoneNumber),
                Array(e.userRecordName.utf8))
        }
        try m.add(txn, .users, 1)
    }
}
