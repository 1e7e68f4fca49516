import Foundation

/// Addresses (email addresses and phone numbers) by keyed hash: what invitations and lookups are
/// sealed to, matched by and erased through (``AddressHash``, `rm_addresses`).
extension ReadModels {
    /// The keyed hash of `email` (normalized); nil without a key store.
    func addressHash(_ container: String, email: String) -> AddressHash? {
        lookupHash(container, email: email).flatMap { AddressHash(.email, $0) }
    }

    /// The keyed hash of `phone` (normalized); nil without a key store.
    func addressHash(_ container: String, phone: String) -> AddressHash? {
        lookupHash(container, phone: phone).flatMap { AddressHash(.phone, $0) }
    }

    /// The keyed hash of a lookup's email address, else of its phone number; nil for a lookup by
    /// account, or without a key store.
    func addressHash(_ container: String, of lookup: PBLookupInfo) -> AddressHash? {
        if !lookup.emailAddress.isEmpty { return addressHash(container, email: lookup.emailAddress) }
        if !lookup.phoneNumber.isEmpty { return addressHash(container, phone: lookup.phoneNumber) }
        return nil
    }

    /// The `rm_addresses` entry of a forgotten address, if it is forgotten (and nothing was sealed to
    /// it since).
    func forgottenAddress(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, _ address: AddressHash) throws
        -> AddressState?
    {
        try message(AddressState.self, txn, addresses, ReadModels.addressKey(container, address))
    }

    /// (token, participant id) of every invitation sealed to `address`, in key order.
    func invitations(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, to address: AddressHash) throws
        -> [(token: String, participantID: String)]
    {
        try scan(txn, addresses, prefix: ReadModels.addressKey(container, address)).compactMap { entry in
            guard entry.suffix.count > ShareToken.length else { return nil }
            let token = String(decoding: entry.suffix[..<ShareToken.length], as: UTF8.self)
            return (token, String(decoding: entry.suffix[ShareToken.length...], as: UTF8.self))
        }
    }

    /// The addresses of the sealed invitations bound to `user` in `container` (any status), by keyed
    /// hash, without repeats.
    func boundAddresses(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, user: String) throws
        -> [AddressHash]
    {
        var out: [AddressHash] = []
        for participation in try participations(txn, container, user: user) {
            if let address = try participant(txn, participation.token, participation.participantID)?.address,
                !out.contains(address)
            {
                out.append(address)
            }
        }
        return out
    }

    /// Who an invitation or a verification is addressed to, for matching it with a participant row:
    /// by keyed hash (rows written sealed) and by the normalized plaintext (rows written before
    /// invitations were sealed, and every row of a store without a key store).
    struct AddressMatch {
        var email = ""
        var phone = ""
        var emailHash: [UInt8]?
        var phoneHash: [UInt8]?

        /// Whether the invitation `state` went to this email address or phone number. A row whose
        /// address was forgotten matches nobody.
        func matches(_ state: ParticipantState) -> Bool {
            guard state.forgottenAtMicros == 0 else { return false }
            if let emailHash, !state.emailHash.isEmpty, state.emailHash.elementsEqual(emailHash) { return true }
            if let phoneHash, !state.phoneHash.isEmpty, state.phoneHash.elementsEqual(phoneHash) { return true }
            if !email.isEmpty, !state.lookupInfo.emailAddress.isEmpty,
                ReadModels.normalizeEmail(state.lookupInfo.emailAddress) == ReadModels.normalizeEmail(email)
            {
                return true
            }
            return !phone.isEmpty && !state.lookupInfo.phoneNumber.isEmpty
                && ReadModels.normalizePhone(state.lookupInfo.phoneNumber) == ReadModels.normalizePhone(phone)
        }

        /// Whether it names any address at all.
        var isEmpty: Bool { email.isEmpty && phone.isEmpty }
    }

    /// The match for an email address and a phone number (either may be empty), with their keyed
    /// hashes when there is a key store.
    func addressMatch(_ container: String, email: String, phone: String) -> AddressMatch {
        AddressMatch(
            email: email, phone: phone,
            emailHash: email.isEmpty ? nil : lookupHash(container, email: email),
            phoneHash: phone.isEmpty ? nil : lookupHash(container, phone: phone))
    }

    /// A participant's invitation address as an answer shows it: the plaintext of a row written
    /// before invitations were sealed, else the opened box; `erased` when the address was forgotten
    /// or the box's key is gone.
    func lookup(of state: ParticipantState, container: String) -> (lookup: PBLookupInfo, erased: Bool) {
        if state.forgottenAtMicros != 0 { return (PBLookupInfo(), true) }
        guard state.hasSealedLookup else { return (state.lookupInfo, false) }
        guard let fields = vault?.open(state.sealedLookup, container: container) else {
            var lookup = state.lookupInfo
            lookup.emailAddress = ""
            lookup.phoneNumber = ""
            return (lookup, true)
        }
        var lookup = state.lookupInfo
        lookup.emailAddress = fields.emailAddress
        lookup.phoneNumber = fields.phoneNumber
        return (lookup, false)
    }
}
