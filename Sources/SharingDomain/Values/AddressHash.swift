import EventLog
import Foundation

/// An email address or phone number named by its keyed hash (crypto-shredding): HMAC-SHA256 under
/// the key store's lookup key of `e` or `p`, the container, a 0 byte and the normalized address
/// (`PersonalDataKeys.lookupHash(_:container:normalized:)`).
///
/// Invitations and participant lookups go to addresses, and an invitee may have no account, so no
/// user key: what they hold of the address is sealed under a key of the address itself, whose
/// subject in the key store is ``subject`` (`#E` or `#P` and the hash in hex). Matching an invitation
/// to an account compares these hashes; forgetting a user destroys the keys of the addresses they
/// registered with, and an address nobody registered can be forgotten on its own.
package struct AddressHash: Hashable, Sendable {
    /// What kind of address.
    package enum Kind: Sendable {
        case email, phone

        /// The letter of the hashed message (`e`, `p`).
        package var hashLetter: Character { self == .email ? "e" : "p" }
        /// The letter of read-model keys and subjects (`E`, `P`), as in `rm_user_lookup`'s hashed keys.
        package var letter: Character { self == .email ? "E" : "P" }
    }

    /// Bytes of a keyed hash.
    package static let byteCount = 32

    package var kind: Kind
    /// The 32 bytes of the HMAC.
    package var hash: [UInt8]

    /// An address hash from stored bytes: nil unless they are 32.
    package init?(_ kind: Kind, _ hash: some Collection<UInt8>) {
        guard hash.count == AddressHash.byteCount else { return nil }
        self.kind = kind
        self.hash = Array(hash)
    }

    /// The subject of the address's key: `#E` or `#P`, then the hash as 64 lowercase hex digits. A
    /// user record name cannot hold `#`, so no subject of an address is ever a user's.
    package var subject: String {
        (kind == .email ? "#E" : "#P") + Hex.encode(hash)
    }

    /// The address a key-store subject names, or nil when it names a user.
    package init?(subject: String) {
        let bytes = Array(subject.utf8)
        guard bytes.count == 2 + 2 * AddressHash.byteCount, bytes[0] == UInt8(ascii: "#") else { return nil }
        switch bytes[1] {
        case UInt8(ascii: "E"): kind = .email
        case UInt8(ascii: "P"): kind = .phone
        default: return nil
        }
        guard let hash = Hex.decode(bytes[2...], allowingUppercase: false) else { return nil }
        self.hash = hash
    }

    /// The addresses named by an email hash and a phone hash as stored (each empty or 32 bytes).
    package static func pair(email: Data, phone: Data) -> [AddressHash] {
        [AddressHash(.email, email), AddressHash(.phone, phone)].compactMap { $0 }
    }
}

extension Shareledger_Events_V1_SealedPersonalData {
    /// The address a sealed lookup names: its one keyed hash, when its subject is that address's.
    package var address: AddressHash? {
        guard let address = AddressHash.pair(email: emailHash, phone: phoneHash).first,
            emailHash.isEmpty || phoneHash.isEmpty, address.subject == subject
        else { return nil }
        return address
    }
}

extension Shareledger_Events_V1_PersonalDataForgotten {
    /// The addresses whose keys this erasure destroys.
    package var addresses: [AddressHash] { AddressHash.pair(email: emailHash, phone: phoneHash) }
}
