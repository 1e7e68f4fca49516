import Foundation
@testable import ShareLedger
import TestSupport
import Testing

@Suite("Share tokens and URLs")
struct ShareTokenTests {
    @Test("100,000 generated tokens: 26 characters, '0' then base 62, all distinct, all parse back")
    func generatedTokens() throws {
        let alphabet = Set("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
        var seen = Set<String>()
        var lastDigits = Set<Character>()
        for _ in 0..<100_000 {
            let token = ShareToken.generate()
            #expect(token.text.count == ShareToken.length)
            #expect(token.text.first == "0")
            #expect(token.text.allSatisfy(alphabet.contains))
            #expect(ShareToken(token.text) == token)
            #expect(ShareToken(("/" + token.text).dropFirst()) == token, "a substring parses as the string does")
            seen.insert(token.text)
            lastDigits.insert(token.text.last!)
        }
        #expect(seen.count == 100_000, "no collisions")
        #expect(lastDigits.count == 62, "every digit occurs in the last place")
    }

    @Test("participant ids are version-4 UUIDs: 10,000 from the system source all distinct, every random bit seen both ways")
    func participantIDs() async throws {
        let dir = TemporaryDirectory()
        let ledger = try ShareLedger.open(Fixtures.configuration(dir.path))
        var seen = Set<String>()
        var ones = [UInt8](repeating: 0, count: 16)
        var zeros = [UInt8](repeating: 0, count: 16)
        for _ in 0..<10_000 {
            let text = ledger.newParticipantID()
            let id = try #require(UUID(uuidString: text))
            #expect(id.uuidString == text)
            let bytes = withUnsafeBytes(of: id.uuid) { Array($0) }
            #expect(bytes[6] >> 4 == 4, "version 4")
            #expect(bytes[8] >> 6 == 0b10, "RFC 9562 variant")
            for index in 0..<16 {
                ones[index] |= bytes[index]
                zeros[index] |= ~bytes[index]
            }
            seen.insert(text)
        }
        #expect(seen.count == 10_000)
        // The 122 random bits each take both values; the 6 fixed bits do not.
        var expectedOnes = [UInt8](repeating: 0xFF, count: 16)
        var expectedZeros = [UInt8](repeating: 0xFF, count: 16)
        (expectedOnes[6], expectedZeros[6]) = (0x4F, 0xBF)
        (expectedOnes[8], expectedZeros[8]) = (0xBF, 0x7F)
        #expect(ones == expectedOnes && zeros == expectedZeros)
        await ledger.close()
    }

    @Test("a seeded generator gives repeatable tokens; distinct seeds give distinct tokens")
    func seeded() {
        var a = SplitMix64(state: 42)
        var b = SplitMix64(state: 42)
        var c = SplitMix64(state: 43)
        let first = ShareToken.generate(using: &a)
        #expect(first == ShareToken.generate(using: &b))
        #expect(first != ShareToken.generate(using: &c))
    }

    @Test("text that is not a token is refused", arguments: [
        "", "0", String(repeating: "0", count: 25), String(repeating: "0", count: 27),
        "1" + String(repeating: "0", count: 25),          // must start with 0
        "0" + String(repeating: "a", count: 24) + "-",    // outside the alphabet
        "0" + String(repeating: "a", count: 24) + "é",    // non-ASCII
        "0" + String(repeating: "a", count: 24) + " ",
    ])
    func refusesNonTokens(text: String) {
        #expect(ShareToken(text) == nil)
        #expect(ShareToken(("/" + text).dropFirst()) == nil)
    }

    @Test("a token carries at least 128 random bits, spread over every place")
    func entropy() {
        #expect(ShareToken.entropyBits >= 128)
        // Every character of the alphabet shows up in every random place over 20,000 tokens.
        var seen = Array(repeating: Set<Character>(), count: ShareToken.length)
        for _ in 0..<20_000 {
            for (index, character) in ShareToken.generate().text.enumerated() { seen[index].insert(character) }
        }
        #expect(seen[0] == ["0"])
        #expect(seen.dropFirst().allSatisfy { $0.count == 62 })
    }

    @Test("URLs carry the token in the path and the mangled title in the fragment")
    func urls() throws {
        var generator = SplitMix64(state: 7)
        let token = ShareToken.generate(using: &generator)
        let url = try #require(ShareURL.make(host: "share.example.com", token: token, title: "Nora's log"))
        #expect(url.absoluteString == "https://share.example.com/share/\(token.text)#Nora_s_log")
        #expect(ShareURL.token(in: url) == token)
        #expect(ShareURL.mangle("Trip: Tokyo 2026!") == "Trip__Tokyo_2026_")
        #expect(ShareURL.token(in: URL(string: "HTTP://h/share/\(token.text)?x=1#t")!) == token)
        #expect(ShareURL.token(in: URL(string: "https://www.icloud.com/notes/\(token.text)")!) == token)
    }

    @Test("a share URL written directly is the one URLComponents writes, for plain and other hosts and any title")
    func urlsAsComponentsWriteThem() throws {
        var generator = SplitMix64(state: 11)
        let titles = [
            nil, "", "Nora's log", "Trip: Tokyo 2026!", "Café au lait", "e\u{301}t\u{E9}", "日本の旅", "👩‍👩‍👧 family",
            "tab\tnew\nline", "100% #1 ?q=a&b", String(repeating: "x", count: 300),
        ]
        let hosts = ["share.example.com", "Share.Example.COM", "127.0.0.1", "a-b.c", "münchen.example", "h_1.example"]
        for host in hosts {
            for title in titles {
                let token = ShareToken.generate(using: &generator)
                var components = URLComponents()
                components.scheme = "https"
                components.host = host
                components.path = "/share/\(token.text)"
                if let title, !title.isEmpty {
                    components.fragment = String(
                        title.unicodeScalars.map { scalar -> Character in
                            scalar.isASCII && CharacterSet.alphanumerics.contains(scalar) ? Character(scalar) : "_"
                        })
                }
                let made = ShareURL.make(host: host, token: token, title: title)
                #expect(made?.absoluteString == components.url?.absoluteString, "host \(host), title \(title ?? "nil")")
                #expect(made == components.url)
                #expect(made.flatMap(ShareURL.token(in:)) == token)
            }
        }
    }

    @Test("the token is the last of two or more non-empty path components, as a split on / finds it")
    func tokenIsTheLastComponent() throws {
        let token = ShareToken.generate().text
        let paths = [
            "/share/\(token)", "//share//\(token)//", "/\(token)", "/a/b/c/\(token)", "/a/\(token)/", "/\(token)/\(token)",
            "/", "", "/a/b", "/share/\(token)x", "/share/%30\(token.dropFirst())",
        ]
        for path in paths {
            let url = try #require(URL(string: "https://h" + path))
            let components = url.path.split(separator: "/", omittingEmptySubsequences: true)
            let expected = components.count >= 2 ? components.last.flatMap { ShareToken($0) } : nil
            #expect(ShareURL.token(in: url) == expected, "path \(path)")
        }
    }

    @Test("URLs that cannot be share URLs give no token", arguments: [
        "ftp://h/share/0abcdefghijklmnopqrstuvwxy", "https:///share/0abcdefghijklmnopqrstuvwxy",
        "https://h/0abcdefghijklmnopqrstuvwxy", "https://h/share/0abcdefghijklmnopqrstuvwxy/extra",
        "https://h/share/", "https://h/share/0abc", "mailto:a@b.c", "file:///share/0abcdefghijklmnopqrstuvwxy",
    ])
    func refusesNonShareURLs(text: String) throws {
        let url = try #require(URL(string: text))
        #expect(ShareURL.token(in: url) == nil)
    }

    @Test("an oversized URL is refused unread")
    func oversized() throws {
        let token = ShareToken.generate()
        let url = try #require(URL(string: "https://h/share/\(token.text)?" + String(repeating: "a", count: 3_000)))
        #expect(ShareURL.token(in: url) == nil)
    }
}
