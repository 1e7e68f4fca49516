import ByteKeys
import EventLog
import Foundation

/// Whether `value` is an ASCII letter or digit (`0-9A-Za-z`): a token's characters, and what a share
/// URL's fragment keeps of a title.
private func isASCIILetterOrDigit(_ value: UInt32) -> Bool {
    (0x30...0x39).contains(value) || (0x41...0x5A).contains(value) || (0x61...0x7A).contains(value)
}

/// The unguessable token of a share's URL: random characters from a cryptographically secure
/// source, never derived from ids.
///
/// Written as CloudKit's observed short tokens look: `0` followed by 25 characters of `0-9A-Za-z`,
/// 26 characters in all. Each of the 25 is drawn uniformly (rejection sampling on random bytes), so a
/// token carries 25 × log2(62) ≈ 148.8 bits, more than the 128 the ledger promises.
public struct ShareToken: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The 26-character text form.
    public let text: String

    /// The length of the text form.
    public static let length = 26
    /// Random bits in a token: 25 × log2(62).
    public static let entropyBits = 25 * log2(62.0)
    private static let alphabet = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz".utf8)

    /// A new token from the system's cryptographically secure random source (`getrandom` on Linux,
    /// `arc4random` on Apple platforms).
    public static func generate() -> ShareToken {
        var system = SystemRandomNumberGenerator()
        return generate(using: &system)
    }

    /// A new token from `generator`. Production code uses ``generate()``; tests pass a seeded
    /// generator for repeatable tokens.
    public static func generate(using generator: inout some RandomNumberGenerator) -> ShareToken {
        var characters = [UInt8]()
        characters.reserveCapacity(length)
        characters.append(UInt8(ascii: "0"))
        while characters.count < length {
            var word = generator.next() as UInt64
            for _ in 0..<8 where characters.count < length {
                let byte = UInt8(truncatingIfNeeded: word)
                word >>= 8
                // 248 = 4 × 62: bytes below it map onto the alphabet without bias.
                if byte < 248 { characters.append(alphabet[Int(byte % 62)]) }
            }
        }
        return ShareToken(validated: String(decoding: characters, as: UTF8.self))
    }

    private init(validated text: String) {
        self.text = text
    }

    /// Parses the text form; `nil` unless it has a token's shape (`0` and 25 of `0-9A-Za-z`).
    public init?(_ text: some StringProtocol) {
        guard ShareToken.hasShape(text.utf8) else { return nil }
        self.text = String(text)
    }

    /// Parses the text form; `nil` unless it has a token's shape (`0` and 25 of `0-9A-Za-z`).
    public init?(_ text: String) {
        // The common case, without the generic entry point's unspecialized walk.
        guard ShareToken.hasShape(text.utf8) else { return nil }
        self.text = text
    }

    /// Parses the text form; `nil` unless it has a token's shape (`0` and 25 of `0-9A-Za-z`).
    public init?(_ text: Substring) {
        guard ShareToken.hasShape(text.utf8) else { return nil }
        self.text = String(text)
    }

    /// Whether `bytes` have a token's shape: `0` and 25 of `0-9A-Za-z`. Read as one buffer (a native
    /// string's bytes without a copy), not through the collection's indices.
    private static func hasShape(_ bytes: some Collection<UInt8>) -> Bool {
        withBytes(bytes) { bytes in
            bytes.count == ShareToken.length && bytes.first == UInt8(ascii: "0")
                && bytes.dropFirst().allSatisfy { isASCIILetterOrDigit(UInt32($0)) }
        }
    }

    /// The text form.
    public var description: String { text }

    /// Decodes the text form, refusing anything that is not a token.
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let token = ShareToken(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a share token"))
        }
        self = token
    }

    /// Encodes the text form.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(text)
    }
}

/// A share's URL: `https://<host>/share/<token>#<Mangled_Title>`.
///
/// As in CloudKit, the last path component is the token and the fragment (the title, for people to
/// read) is ignored when a URL is resolved; the host is the server's (configurable, like CloudKit's
/// `displayedHostname`).
public enum ShareURL {
    /// The longest URL text the parser looks at; longer input is refused unread.
    public static let maxLength = 2_048

    /// The URL of `token` on `host`, with `title` (if any) mangled into the fragment: every character
    /// other than an ASCII letter or digit becomes `_` (`Nora's log` → `Nora_s_log`).
    public static func make(host: String, token: ShareToken, title: String? = nil) -> URL? {
        let fragment = title.flatMap { $0.isEmpty ? nil : mangle($0) }
        guard isPlainHost(host) else {
            // A host with characters a URL must escape: URLComponents escapes them.
            var components = URLComponents()
            components.scheme = "https"
            components.host = host
            components.path = "/share/\(token.text)"
            components.fragment = fragment
            return components.url
        }
        // Nothing here needs escaping (a plain host, the token's and the mangled title's letters and
        // digits): the text is the URL, as URLComponents would have written it, built directly.
        var text = "https://"
        text.reserveCapacity(16 + host.utf8.count + ShareToken.length + (fragment?.utf8.count ?? 0))
        text += host
        text += "/share/"
        text += token.text
        if let fragment {
            text += "#"
            text += fragment
        }
        return URL(string: text)
    }

    /// Whether `host` is a non-empty run of ASCII letters, digits, dots and hyphens: a host name or
    /// an IPv4 address, which a URL holds as it is.
    static func isPlainHost(_ host: String) -> Bool {
        !host.isEmpty && host.utf8.allBytes(isPlainHostByte)
    }

    /// Whether `byte` may be in a plain host (``isPlainHost(_:)``): an ASCII letter, digit, dot or hyphen.
    private static func isPlainHostByte(_ byte: UInt8) -> Bool {
        isASCIILetterOrDigit(UInt32(byte)) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
    }

    /// Where the token is in a URL's path: the last of two or more non-empty components (`/`-separated);
    /// nil when there is no such component.
    private static func lastComponent<Path: BidirectionalCollection<UInt8>>(of path: Path) -> ClosedRange<Path.Index>? {
        let slash = UInt8(ascii: "/")
        guard let lastByte = path.lastIndex(where: { $0 != slash }) else { return nil }
        let start = path[..<lastByte].lastIndex(of: slash).map { path.index(after: $0) } ?? path.startIndex
        guard path[..<start].contains(where: { $0 != slash }) else { return nil }
        return start...lastByte
    }

    /// The title as it appears in a URL's fragment.
    public static func mangle(_ title: String) -> String {
        // Per Unicode scalar: the ASCII letters and digits (the ASCII members of
        // `CharacterSet.alphanumerics`) stay, everything else is one `_`.
        var bytes: [UInt8] = []
        bytes.reserveCapacity(title.utf8.count)
        for scalar in title.unicodeScalars {
            bytes.append(isASCIILetterOrDigit(scalar.value) ? UInt8(truncatingIfNeeded: scalar.value) : UInt8(ascii: "_"))
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The token of a share URL, or `nil` when `url` cannot be one of this ledger's share URLs
    /// (not http(s), no host, too long, or a last path component that is not a token).
    public static func token(in url: URL) -> ShareToken? {
        let text = url.absoluteString
        guard text.utf8.count <= maxLength else { return nil }
        if case .read(let token) = plainToken(in: text) { return token }
        return tokenThroughFoundation(in: url)
    }

    /// ``token(in:)`` read from the URL's text alone, when that text is plain: `http` or `https`
    /// (any case), `://`, a host of ASCII letters, digits, dots and hyphens only (no user, port or
    /// IPv6 literal), then a path without `%` or `;` (nothing Foundation would decode or cut off)
    /// and any query or fragment. What it reads is then what Foundation's reading gives;
    /// ``PlainReading/notPlain`` sends the caller to Foundation. Asking a `URL` for its scheme, host
    /// and path parses and allocates each time, several thousand instructions per call, and every
    /// call given a share URL starts here.
    package static func plainToken(in text: String) -> PlainReading {
        var text = text
        return text.withUTF8 { bytes -> PlainReading in
            let slash = UInt8(ascii: "/")
            // The scheme, lowercased letter by letter (ASCII letters only: `| 0x20`).
            func lowered(_ at: Int) -> UInt8 { bytes[at] | 0x20 }
            guard bytes.count > 7, lowered(0) == UInt8(ascii: "h"), lowered(1) == UInt8(ascii: "t"), lowered(2) == UInt8(ascii: "t"),
                lowered(3) == UInt8(ascii: "p")
            else { return .notPlain }
            var index = 4
            if lowered(index) == UInt8(ascii: "s") { index += 1 }
            guard index + 3 <= bytes.count, bytes[index] == UInt8(ascii: ":"), bytes[index + 1] == slash, bytes[index + 2] == slash
            else { return .notPlain }
            index += 3
            // The host: up to the path, query or fragment.
            let hostStart = index
            while index < bytes.count, bytes[index] != slash, bytes[index] != UInt8(ascii: "?"), bytes[index] != UInt8(ascii: "#") {
                guard isPlainHostByte(bytes[index]) else { return .notPlain }
                index += 1
            }
            guard index > hostStart else { return .notPlain }
            // The path: up to the query or fragment.
            let pathStart = index
            while index < bytes.count, bytes[index] != UInt8(ascii: "?"), bytes[index] != UInt8(ascii: "#") {
                guard bytes[index] != UInt8(ascii: "%"), bytes[index] != UInt8(ascii: ";") else { return .notPlain }
                index += 1
            }
            let path = UnsafeBufferPointer(rebasing: bytes[pathStart..<index])
            guard let token = lastComponent(of: path) else { return .read(nil) }
            return .read(ShareToken(String(decoding: UnsafeBufferPointer(rebasing: path[token]), as: UTF8.self)))
        }
    }

    /// What ``plainToken(in:)`` made of a URL's text.
    package enum PlainReading: Equatable {
        /// The text is plain: its token, or nil when it names none.
        case read(ShareToken?)
        /// The text is not plain: Foundation reads it.
        case notPlain
    }

    /// ``token(in:)`` through Foundation's reading of `url`'s scheme, host and path.
    package static func tokenThroughFoundation(in url: URL) -> ShareToken? {
        let text = url.absoluteString
        guard text.utf8.count <= maxLength,
            let scheme = url.scheme?.lowercased(), scheme == "https" || scheme == "http",
            let host = url.host, !host.isEmpty
        else { return nil }
        let path = url.path
        guard let token = lastComponent(of: path.utf8) else { return nil }
        return ShareToken(path[token])
    }
}
