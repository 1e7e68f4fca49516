import EventLog
import Crypto
import Foundation

/// Placeholders for personal data in error messages, log lines and metrics labels.
///
/// The rule of the house: email addresses, phone numbers, people's names, share titles, record field
/// values and any other text a person typed never appear in a ``EventLog/LedgerError``'s message, a log line
/// or a metrics label, at any log level (`--verbose` included). A message that must refer to such a
/// value uses ``redact(_:as:)`` instead, which gives a placeholder such as `<email #3f2a91c0d4e1>`:
///
/// ```swift
/// throw LedgerError(.invalidArguments, "the email \(PersonalData.redact(email, as: .emailAddress)) belongs to user \(other) already")
/// ```
///
/// The placeholder names the kind of value and a short keyed hash of it (HMAC-SHA256 under a key drawn
/// at random when the process starts and never stored), so two mentions of the same value in one process
/// can be told apart from mentions of another value, while the value itself cannot be recovered, not
/// even by hashing guesses: the key dies with the process. Email addresses are hashed lowercased and
/// trimmed, phone numbers by their digits, so that the spellings the ledger treats as one address get
/// one placeholder.
///
/// Identifiers are not personal data and stay as they are: user record names (`_alice`), container
/// identifiers, zone and record names, share URLs and tokens, participant ids.
public enum PersonalData {
    /// What kind of personal value a placeholder stands for.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// An email address.
        case emailAddress = "email"
        /// A phone number.
        case phoneNumber = "phone"
        /// A person's name or part of one (given, family, middle name, nickname).
        case name = "name"
        /// Free text a person typed, such as a share title.
        case text = "text"
        /// The value of a record field.
        case fieldValue = "value"
    }

    /// The process's hashing key: random, never stored, never logged.
    private static let key = SymmetricKey(size: .bits256)

    /// Hex digits of the keyed hash in a placeholder (48 bits: distinct values of one request, such as
    /// the 400 lookups of a participant fetch, get distinct placeholders).
    package static let hashDigits = 12

    /// A placeholder for `value`, e.g. `<email #3f2a91c0d4e1>`: stable within this process for equal
    /// values of the same kind, never revealing the value. An empty value gives `<empty email>`.
    public static func redact(_ value: String, as kind: Kind) -> String {
        let canonical = canonical(value, kind)
        guard !canonical.isEmpty else { return "<empty \(kind.rawValue)>" }
        var message = Data(kind.rawValue.utf8)
        message.append(0)
        message.append(contentsOf: canonical.utf8)
        let mac = HMAC<SHA256>.authenticationCode(for: message, using: key)
        let hex = Hex.encode(mac.prefix(hashDigits / 2))
        return "<\(kind.rawValue) #\(hex)>"
    }

    /// The spelling that is hashed: the one the ledger matches by.
    private static func canonical(_ value: String, _ kind: Kind) -> String {
        switch kind {
        case .emailAddress:
            return value.trimmingCharacters(in: .whitespaces).lowercased()
        case .phoneNumber:
            let digits = value.filter { $0.isASCII && $0.isNumber }
            return digits.isEmpty ? value.trimmingCharacters(in: .whitespaces) : digits
        case .name, .text, .fieldValue:
            return value
        }
    }
}
