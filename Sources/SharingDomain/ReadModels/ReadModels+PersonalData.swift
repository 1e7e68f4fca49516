import EventLog
import Foundation

/// What the domain needs of the ledger's key store (crypto-shredding): sealing personal fields
/// under a person's key, opening them, and keyed hashes of addresses for lookups. The store itself
/// (its key file, its registry per ledger) lives with the ledger; the domain only holds one.
package protocol PersonalDataKeys: AnyObject, Sendable {
    /// `fields` sealed under the key of `subject` (made when there is none yet).
    func seal(_ fields: Shareledger_Events_V1_PersonalFields, container: String, subject: String) throws(LedgerError)
        -> Shareledger_Events_V1_SealedPersonalData
    /// The fields of `sealed`; nil when its key is gone (the person was forgotten) or it does not open.
    func open(_ sealed: Shareledger_Events_V1_SealedPersonalData, container: String) -> Shareledger_Events_V1_PersonalFields?
    /// The keyed hash of a normalized address of `kind` (`e` email, `p` phone) in `container`.
    func lookupHash(_ kind: Character, container: String, normalized: String) -> [UInt8]?
}

extension ReadModels {
    /// `pending` with its personal fields sealed under their person's key, when these read models
    /// have a key store (``personalData``); unchanged otherwise, and for events without personal fields
    /// this release seals. Today: `UserRegistered`'s email address, phone number and name (the
    /// user's key), share titles (the owner's key), and the email address or phone number of an
    /// invitation or a participant lookup (the key of that address, ``AddressHash/subject``).
    /// A `PersonalDataForgotten` of a user gets the keyed hashes of the addresses the user registered
    /// with, whose keys go with the user's.
    package func sealingPersonalData(
        of pending: consuming PendingEvent, container: String, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws -> PendingEvent {
        guard sealsNewEvents, let keys = personalData else { return pending }
        func sealedTitle(_ title: String, owner: String) throws(LedgerError) -> Shareledger_Events_V1_SealedPersonalData {
            var fields = Shareledger_Events_V1_PersonalFields()
            fields.title = title
            return try keys.seal(fields, container: container, subject: owner)
        }
        // One switch: an event of any other type is handed back as it came (moved, not copied out of
        // the enum to be looked at).
        switch pending.event {
        case .personalDataForgotten(var e) where !e.userRecordName.isEmpty && e.addresses.isEmpty:
            guard let state = try user(txn, container, e.userRecordName) else { return pending }
            for address in registeredAddresses(of: state, container: container) {
                switch address.kind {
                case .email: e.emailHash = Data(address.hash)
                case .phone: e.phoneHash = Data(address.hash)
                }
            }
            return PendingEvent(stream: pending.stream, event: .personalDataForgotten(e))
        case .shareCreated(var e) where !e.title.isEmpty:
            e.sealedTitle = try sealedTitle(e.title, owner: e.ownerName)
            e.title = ""
            return PendingEvent(stream: pending.stream, event: .shareCreated(e))
        case .shareTitleChanged(var e) where !e.title.isEmpty:
            guard let owner = try share(txn, e.token)?.ownerName else { return pending }
            e.sealedTitle = try sealedTitle(e.title, owner: owner)
            e.title = ""
            return PendingEvent(stream: pending.stream, event: .shareTitleChanged(e))
        case .participantAdded(var e) where !e.hasSealedLookup:
            guard let sealed = try sealedLookup(&e.lookupInfo, container: container, keys) else { return pending }
            e.sealedLookup = sealed
            if e.lookupInfo == PBLookupInfo() { e.clearLookupInfo() }
            return PendingEvent(stream: pending.stream, event: .participantAdded(e))
        case .shareParticipantFetched(var e) where !e.hasSealedLookup:
            guard let sealed = try sealedLookup(&e.lookupInfo, container: container, keys) else { return pending }
            e.sealedLookup = sealed
            if e.lookupInfo == PBLookupInfo() { e.clearLookupInfo() }
            return PendingEvent(stream: pending.stream, event: .shareParticipantFetched(e))
        case .userRegistered(var e) where !e.hasSealed && (!e.emailAddress.isEmpty || !e.phoneNumber.isEmpty || e.hasName):
            var fields = Shareledger_Events_V1_PersonalFields()
            fields.emailAddress = e.emailAddress
            fields.phoneNumber = e.phoneNumber
            if e.hasName { fields.name = e.name }
            e.sealed = try keys.seal(fields, container: container, subject: e.userRecordName)
            if !fields.emailAddress.isEmpty, let hash = lookupHash(container, email: fields.emailAddress) {
                e.sealed.emailHash = Data(hash)
            }
            if !fields.phoneNumber.isEmpty, let hash = lookupHash(container, phone: fields.phoneNumber) {
                e.sealed.phoneHash = Data(hash)
            }
            e.emailAddress = ""
            e.phoneNumber = ""
            e.clearName()
            return PendingEvent(stream: pending.stream, event: .userRegistered(e))
        default:
            return pending
        }
    }

    /// The email address or phone number of `lookup` sealed under the key of that address, with its
    /// keyed hash; the plaintext is taken out of `lookup`. Nil (and `lookup` unchanged) when it has
    /// neither.
    private func sealedLookup(_ lookup: inout PBLookupInfo, container: String, _ keys: any PersonalDataKeys) throws
        -> Shareledger_Events_V1_SealedPersonalData?
    {
        guard let address = addressHash(container, of: lookup) else { return nil }
        var fields = Shareledger_Events_V1_PersonalFields()
        fields.emailAddress = lookup.emailAddress
        fields.phoneNumber = lookup.phoneNumber
        var sealed = try keys.seal(fields, container: container, subject: address.subject)
        switch address.kind {
        case .email: sealed.emailHash = Data(address.hash)
        case .phone: sealed.phoneHash = Data(address.hash)
        }
        lookup.emailAddress = ""
        lookup.phoneNumber = ""
        return sealed
    }

    /// The addresses a user registered with, by keyed hash: those of a sealed row as stored, those of
    /// a row written before crypto-shredding hashed now (empty without a key store).
    package func registeredAddresses(of state: UserState, container: String) -> [AddressHash] {
        if !state.emailHash.isEmpty || !state.phoneHash.isEmpty {
            return AddressHash.pair(email: state.emailHash, phone: state.phoneHash)
        }
        var out: [AddressHash] = []
        if !state.emailAddress.isEmpty, let address = addressHash(container, email: state.emailAddress) { out.append(address) }
        if !state.phoneNumber.isEmpty, let address = addressHash(container, phone: state.phoneNumber) { out.append(address) }
        return out
    }

    /// What a user row says of the person: the fields (plaintext in rows written before
    /// crypto-shredding, else the opened box), or nil when they are erased (forgotten, or the box's
    /// key is gone). `erased` is false for a user who never gave any.
    package func personalFields(of state: UserState, container: String) -> (fields: Shareledger_Events_V1_PersonalFields?, erased: Bool) {
        if state.forgottenAtMicros != 0 { return (nil, true) }
        if state.hasSealed {
            guard let fields = personalData?.open(state.sealed, container: container) else { return (nil, true) }
            return (fields, false)
        }
        var fields = Shareledger_Events_V1_PersonalFields()
        fields.emailAddress = state.emailAddress
        fields.phoneNumber = state.phoneNumber
        fields.name.givenName = state.givenName
        fields.name.familyName = state.familyName
        fields.name.middleName = state.middleName
        fields.name.nickname = state.nickname
        return (fields, false)
    }

    /// A share's title: its plaintext (rows written before crypto-shredding) or its opened box;
    /// `erased` when the box's key is gone (the owner was forgotten).
    package func title(of share: ShareState) -> (title: String, erased: Bool) {
        guard share.hasSealedTitle else { return (share.title, false) }
        guard let fields = personalData?.open(share.sealedTitle, container: share.container) else { return ("", true) }
        return (fields.title, false)
    }

    /// The personal fields of a registration event: its plaintext fields (written before
    /// crypto-shredding) or its opened box; nil when the box's key is gone.
    package func personalFields(of e: Shareledger_Events_V1_UserRegistered, container: String) -> Shareledger_Events_V1_PersonalFields? {
        guard e.hasSealed else {
            var fields = Shareledger_Events_V1_PersonalFields()
            fields.emailAddress = e.emailAddress
            fields.phoneNumber = e.phoneNumber
            if e.hasName { fields.name = e.name }
            return fields
        }
        return personalData?.open(e.sealed, container: container)
    }
}
