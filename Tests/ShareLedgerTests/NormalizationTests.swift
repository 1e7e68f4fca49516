import Crypto
import Foundation
import PropertyBased
import Synchronization
@testable import ShareLedger
import Testing

/// The byte-level normalizations (`ASCIIText`) give exactly Foundation's answers, which the lookup
/// keys of every ledger already written depend on; other text still goes through Foundation.
@Suite("Email and phone normalization")
struct NormalizationTests {
    /// Foundation's spelling of the rules, as `ReadModels` had them before the fast paths.
    static func foundationEmail(_ email: String) -> String { email.trimmingCharacters(in: .whitespaces).lowercased() }

    static func foundationPhone(_ phone: String) -> String {
        let trimmed = phone.trimmingCharacters(in: .whitespaces)
        return (trimmed.hasPrefix("+") ? "+" : "") + trimmed.filter { $0.isASCII && $0.isWholeNumber && $0.asciiValue.map { (48...57).contains($0) } == true }
    }

    /// Characters that matter to the rules: blanks, other ASCII whitespace that is not trimmed,
    /// capitals, digits, `+`, `@`, and a few non-ASCII ones (which must take Foundation's path).
    static let alphabet: [Character] = [
        " ", "\t", "\n", "\r", "\u{0B}", "\u{0C}", "A", "Z", "a", "z", "M", "0", "5", "9", "+", "@", ".", "-", "(", ")",
        "\u{00A0}", "É", "ß", "\u{2003}", "İ",
    ]

    @Test("ASCII and non-ASCII text normalizes as Foundation does")
    func matchesFoundation() async {
        await propertyCheck(count: 400, input: Gen.int(in: 0..<NormalizationTests.alphabet.count).array(of: 0...24)) {
            indexes in
            let text = String(indexes.map { NormalizationTests.alphabet[$0] })
            #expect(ReadModels.normalizeEmail(text) == NormalizationTests.foundationEmail(text))
            #expect(ReadModels.normalizePhone(text) == NormalizationTests.foundationPhone(text))
        }
        for text in ["  Alice@Example.COM\t", "+1 (555) 010-9999 ", "\t+", "", "   ", "ÉLISE@example.com", "+ 44 20"] {
            #expect(ReadModels.normalizeEmail(text) == NormalizationTests.foundationEmail(text))
            #expect(ReadModels.normalizePhone(text) == NormalizationTests.foundationPhone(text))
        }
        #expect(ASCIIText.trimmedLowercased("ÉLISE") == nil)
        #expect(ASCIIText.phoneDigits("+44\u{00A0}20") == nil)
    }

    @Test("A lookup hash from the kept, keyed HMAC equals a freshly keyed one")
    func lookupHashMatchesHMAC() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("shareledger-norm-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let vault = try PersonalDataVault.forLedger(at: directory.path, writable: true, random: SeededRandom(seed: 7))
        let key = try #require(vault.state.withLock { $0.lookupKey })
        for (container, value) in [("iCloud.a", "alice@example.com"), ("iCloud.b", "+15550100"), ("c", "")] {
            let expected = Array(HMAC<SHA256>.authenticationCode(for: Array("e".utf8) + Array(container.utf8) + [0] + Array(value.utf8), using: key))
            #expect(vault.lookupHash("e", container: container, normalized: value) == expected)
            // Twice: the kept HMAC is copied, never consumed.
            #expect(vault.lookupHash("e", container: container, normalized: value) == expected)
        }
    }
}
