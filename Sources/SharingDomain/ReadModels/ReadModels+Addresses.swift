import ByteKeys
import EventLog
import Foundation

/// Addresses (email addresses and phone numbers) by keyed hash: what invitations and lookups are
/// sealed to, matched by and erased through (``AddressHash``, `rm_addresses`).
extension ReadModels {
    /// The keyed hash of `email` (normalized); nil without a key store.
    package func addressHash(_ container: String, email: String) -> AddressHash? {
        lookupHash(container, email: email).flatMap { AddressHash(.email, $0) }
    }

    /// The keyed hash of `phone` (normalized); nil without a key store.
    package func addressHash(_ container: String, phone: String) -> AddressHash? {
        lookupHash(container, phone: phone).flatMap { AddressHash(.phone, $0) }
    }

    /// The keyed hash of a lookup's email address, else of its phone number; nil for a lookup by
    /// account, or without a key store.
    package func addressHash(_ container: String, of lookup: PBLookupInfo) -> AddressHash? {
        if !lookup.emailAddress.isEmpty { return addressHash(container, email: lookup.emailAddress) }
        if !lookup.phoneNumber.isEmpty { return addressHash(container, phone: lookup.phoneNumber) }
        return nil
    }

    /// The `rm_addresses` entry of a forgotten address, if it is forgotten (and nothing was sealed to
    /// it since).
    package func forgottenAddress(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, _ address: AddressHash) throws
        -> AddressState?
    {
        try message(AddressState.self, txn, addresses, ReadModels.addressKey(container, address))
    }

    /// (token, participant id) of every invitation sealed to `address`, in key order: the entries of
    /// `rm_addresses` and those of the address journal whose invitation still goes to `address`.
    package func invitations(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, to address: AddressHash) throws
        -> [(token: String, participantID: String)]
    {
        let prefix = ReadModels.addressKey(container, address)
        var suffixes = try scan(txn, addresses, prefix: prefix).map(\.suffix)
        for entry in try scan(txn, addressJournal, prefix: []) {
            let key = Array(entry.suffix.dropFirst(8))
            guard key.count > prefix.count, key.starts(with: prefix) else { continue }
            let suffix = Array(key[prefix.count...])
            if try currentInvitation(txn, suffix, to: address) { suffixes.append(suffix) }
        }
        return ReadModels.sortedUnique(suffixes).compactMap { suffix in
            guard suffix.count > ShareToken.length else { return nil }
            return (
                String(decoding: suffix[..<ShareToken.length], as: UTF8.self),
                String(decoding: suffix[ShareToken.length...], as: UTF8.self)
            )
        }
    }

    /// `keys` in LMDB's key order, each once.
    package static func sortedUnique(_ keys: [[UInt8]]) -> [[UInt8]] {
        var out: [[UInt8]] = []
        out.reserveCapacity(keys.count)
        for key in keys.sorted(by: { KeyOrder.compare($0, $1) < 0 }) where out.last != key { out.append(key) }
        return out
    }

    /// Whether the participant row `rowKey` (token ‖ participant id) exists and its invitation is
    /// sealed to `address`.
    private func currentInvitation(_ txn: borrowing some ReadModelStore & ~Copyable, _ rowKey: [UInt8], to address: AddressHash)
        throws -> Bool
    {
        try message(ParticipantState.self, txn, participants, rowKey)?.address == address
    }

    /// Journal entries that make a fold of the address journal (as the history journal's).
    package static let addressFoldThreshold = 1_024

    /// Indexes an invitation under its address: `entry` is its `rm_addresses` key (address key ‖
    /// token ‖ participant id). Written into `rm_addresses` directly, each invitation would dirty a
    /// page at a random place (the keyed hash leads the key): about one page and a half per share
    /// action of a workload whose invitations go to email addresses. Instead it is appended to the
    /// address journal under the event's position (the journal's right edge), and every
    /// ``addressFoldThreshold``-th entry moves the journal, sorted, into `rm_addresses`, keeping the
    /// entries whose invitation still goes to that address (a removed or erased invitation's entry
    /// is dropped). ``invitations(_:_:to:)`` reads both. The fold is decided by the journal's size
    /// alone, so the same events leave the same bytes.
    package func journalAddress(_ txn: borrowing some ReadModelStore & ~Copyable, position: UInt64, entry: [UInt8]) throws {
        try putRaw(txn, addressJournal, BigEndian.bytes(of: position) + entry, [])
        guard try txn.entryCount(addressJournal) >= ReadModels.addressFoldThreshold else { return }
        var entries: [[UInt8]] = []
        try txn.visit(addressJournal, from: nil) { key, _ in
            if key.count > 8 { entries.append(Array(key[8...])) }
            return true
        }
        for entry in ReadModels.sortedUnique(entries) {
            guard let (address, rowKey) = ReadModels.splitAddressEntry(entry),
                try currentInvitation(txn, rowKey, to: address)
            else { continue }
            try putRaw(txn, addresses, entry, [])
        }
        try txn.clear(addressJournal)
    }

    /// The address and the participant row key of an `rm_addresses` invitation entry (container ‖ 0
    /// ‖ `E`/`P` ‖ 32-byte hash ‖ token ‖ participant id); nil for bytes that are not one.
    package static func splitAddressEntry(_ entry: [UInt8]) -> (AddressHash, [UInt8])? {
        guard let zero = entry.firstIndex(of: 0), entry.count > zero + 2 + AddressHash.byteCount + ShareToken.length else {
            return nil
        }
        let kind: AddressHash.Kind
        switch entry[zero + 1] {
        case UInt8(ascii: "E"): kind = .email
        case UInt8(ascii: "P"): kind = .phone
        default: return nil
        }
        let hashStart = zero + 2
        guard let address = AddressHash(kind, entry[hashStart..<hashStart + AddressHash.byteCount]) else { return nil }
        return (address, Array(entry[(hashStart + AddressHash.byteCount)...]))
    }

    /// The addresses of the sealed invitations bound to `user` in `container` (any status), by keyed
    /// hash, without repeats.
    package func boundAddresses(_ txn: borrowing some ReadModelStore & ~Copyable, _ container: String, user: String) throws
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
    package struct AddressMatch {
        package var email = ""
        package var phone = ""
        package var emailHash: [UInt8]?
        package var phoneHash: [UInt8]?

        /// Whether the invitation `state` went to this email address or phone number. A row whose
        /// address was forgotten matches nobody.
        package func matches(_ state: ParticipantState) -> Bool {
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

        package init(email: String = "", phone: String = "", emailHash: [UInt8]? = nil, phoneHash: [UInt8]? = nil) {
            (self.email, self.phone, self.emailHash, self.phoneHash) = (email, phone, emailHash, phoneHash)
        }

        /// The addresses a sealed user row was registered with, by the keyed hashes it keeps (the
        /// plaintext stays in the row's box: ``email`` and ``phone`` are empty).
        package init(hashesOf state: UserState) {
            emailHash = state.emailHash.isEmpty ? nil : Array(state.emailHash)
            phoneHash = state.phoneHash.isEmpty ? nil : Array(state.phoneHash)
        }

        /// Whether it names any address at all.
        package var isEmpty: Bool { email.isEmpty && phone.isEmpty && emailHash == nil && phoneHash == nil }
    }

    /// The match for an email address and a phone number (either may be empty), with their keyed
    /// hashes when there is a key store.
    package func addressMatch(_ container: String, email: String, phone: String) -> AddressMatch {
        AddressMatch(
            email: email, phone: phone,
            emailHash: email.isEmpty ? nil : lookupHash(container, email: email),
            phoneHash: phone.isEmpty ? nil : lookupHash(container, phone: phone))
    }

    /// A participant's invitation address as an answer shows it: the plaintext of a row written
    /// before invitations were sealed, else the opened box; `erased` when the address was forgotten
    /// or the box's key is gone.
    package func lookup(of state: ParticipantState, container: String) -> (lookup: PBLookupInfo, erased: Bool) {
        if state.forgottenAtMicros != 0 { return (PBLookupInfo(), true) }
        guard state.hasSealedLookup else { return (state.lookupInfo, false) }
        guard let fields = personalData?.open(state.sealedLookup, container: container) else {
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
