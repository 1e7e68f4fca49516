import Crypto
import EventLog
import Foundation
import LMDB
import SharingDomain
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import SwiftProtobuf

/// Sealing personal fields under a person's key, opening them, and the keyed hashes of addresses.
extension PersonalDataVault {
    // MARK: - Sealing

    private static func associatedData(_ container: String, _ subject: String) -> [UInt8] {
        Array(container.utf8) + [0] + Array(subject.utf8)
    }

    /// `fields` sealed under the key of (container, subject), made first if there is none.
    package func seal(_ fields: Shareledger_Events_V1_PersonalFields, container: String, subject: String) throws(LedgerError)
        -> Shareledger_Events_V1_SealedPersonalData
    {
        var sealed = Shareledger_Events_V1_SealedPersonalData()
        sealed.subject = subject
        // Checked first: a kept box means the key exists (boxes go with their key), and a hit needs
        // neither the key nor the encoding (the writer seals the same address again and again).
        // An address's subject starts with `#`, which no user record name holds (``AddressHash/subject``).
        let reusable =
            !fields.hasName && fields.title.isEmpty && fields.unknownFields.data.isEmpty && subject.utf8.first == UInt8(ascii: "#")
        let cacheKey = SealedKey(
            container: container, subject: subject, emailAddress: fields.emailAddress, phoneNumber: fields.phoneNumber)
        if reusable, let box = state.withLock({ $0.sealedBoxes[cacheKey] }) {
            sealed.box = box
            return sealed
        }
        guard let key = try key(container: container, user: subject, create: true) else {
            throw LedgerError(.storageFailure, "no key could be made for sealing personal data")
        }
        do {
            var options = BinaryEncodingOptions()
            options.useDeterministicOrdering = true
            let plaintext: [UInt8] = try fields.serializedBytes(options: options)
            let nonceBytes = randomBytes(16)
            let nonce = try AES.GCM.Nonce(data: nonceBytes.prefix(12))
            let box = try AES.GCM.seal(
                plaintext, using: key, nonce: nonce, authenticating: PersonalDataVault.associatedData(container, subject))
            sealed.box = Data(box.combined ?? Data())
            if reusable {
                state.withLock { state in
                    // Kept only while the key still exists (as in ``open(_:container:)``).
                    guard state.keys[PersonalDataVault.subject(container, subject)] != nil else { return }
                    if state.sealedBoxes.count >= PersonalDataVault.openedCapacity { state.sealedBoxes.removeAll(keepingCapacity: true) }
                    state.sealedBoxes[cacheKey] = sealed.box
                }
            }
            return sealed
        } catch {
            throw LedgerError(.storageFailure, "sealing personal data failed: \(error)")
        }
    }

    /// The fields in `sealed`, or nil when its key is destroyed (the person was forgotten) or the box
    /// does not open (damaged, or sealed under another key store).
    package func open(_ sealed: Shareledger_Events_V1_SealedPersonalData, container: String) -> Shareledger_Events_V1_PersonalFields? {
        let cacheKey = OpenedKey(container: container, subject: sealed.subject, box: sealed.box)
        if let fields = state.withLock({ $0.opened[cacheKey] }) { return fields }
        guard let key = try? key(container: container, user: sealed.subject, create: false) else { return nil }
        guard let box = try? AES.GCM.SealedBox(combined: sealed.box),
            let plaintext = try? AES.GCM.open(
                box, using: key, authenticating: PersonalDataVault.associatedData(container, sealed.subject)),
            let fields = try? Shareledger_Events_V1_PersonalFields(serializedBytes: plaintext)
        else { return nil }
        state.withLock { state in
            // Kept only while the key still exists: a destroy that ran since the open above has
            // already dropped this subject's entries, and must not see this one come back.
            guard state.keys[PersonalDataVault.subject(container, sealed.subject)] != nil else { return }
            if state.opened.count >= PersonalDataVault.openedCapacity { state.opened.removeAll(keepingCapacity: true) }
            state.opened[cacheKey] = fields
        }
        return fields
    }

    // MARK: - Keyed hashes

    /// HMAC-SHA256 under the lookup key of `kind` (`e` or `p`), the container and the normalized
    /// value: the key of an `rm_user_lookup` entry. Nil without a lookup key (a read-only ledger
    /// whose key store was never made).
    package func lookupHash(_ kind: Character, container: String, normalized: String) -> [UInt8]? {
        var message: [UInt8] = []
        message.reserveCapacity(2 + container.utf8.count + normalized.utf8.count)
        message += String(kind).utf8
        message += container.utf8
        message.append(0)
        message += normalized.utf8
        let (kept, template) = state.withLock { ($0.hashes[message], $0.lookupMAC) }
        if let kept { return kept }
        guard var mac = template else { return nil }
        mac.update(data: message)
        let hash = Array(mac.finalize())
        state.withLock { state in
            if state.hashes.count >= PersonalDataVault.openedCapacity { state.hashes.removeAll(keepingCapacity: true) }
            state.hashes[message] = hash
        }
        return hash
    }

    /// Whether `event`'s payload holds personal data in plaintext: a registration or title written
    /// before crypto-shredding, an invitation's or lookup's email or phone written before invitations
    /// were sealed, or anything written with sealing off (``ShareLedger/Configuration/sealsPersonalData``).
    /// `audit` counts them.
    package static func holdsPlaintextPersonalData(_ event: DomainEvent) -> Bool {
        switch event {
        case .userRegistered(let e): return !e.emailAddress.isEmpty || !e.phoneNumber.isEmpty || e.hasName
        case .participantAdded(let e): return !e.lookupInfo.emailAddress.isEmpty || !e.lookupInfo.phoneNumber.isEmpty
        case .shareParticipantFetched(let e): return !e.lookupInfo.emailAddress.isEmpty || !e.lookupInfo.phoneNumber.isEmpty
        case .shareCreated(let e): return !e.title.isEmpty
        case .shareTitleChanged(let e): return !e.title.isEmpty
        default: return false
        }
    }
}
