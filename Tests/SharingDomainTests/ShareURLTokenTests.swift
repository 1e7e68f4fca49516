import Foundation
import SharingDomain
import Testing

/// A share URL's token read from the URL's text (``ShareURL/plainToken(in:)``) is the token read
/// through Foundation's scheme, host and path (``ShareURL/tokenThroughFoundation(in:)``), for every
/// URL whose text it calls plain; the others are left to Foundation.
@Suite("Share URL tokens")
struct ShareURLTokenTests {
    static let token = "0FGla26YtxqPeVFDDjx2Ds3DAb"

    /// URL texts of many shapes: schemes, hosts (with a user, a port, an IPv6 literal, an empty one),
    /// paths (trailing, doubled and lone slashes, escapes, parameters), queries and fragments.
    static let texts: [String] = {
        var texts: [String] = []
        let schemes = ["https", "http", "HTTPS", "Http", "ftp", "httpx", "shttp"]
        let hosts = [
            "share.localhost", "example.com", "EXAMPLE.com", "a-b.c", "127.0.0.1", "user@host", "host:8443", "[::1]", "", "ho%73t",
            "xn--bcher-kva.example",
        ]
        let paths = [
            "/share/\(token)", "/share/\(token)/", "//share//\(token)", "/\(token)", "/share/", "/", "", "/a/b/\(token)",
            "/share/%30FGla26YtxqPeVFDDjx2Ds3DAb", "/share/0FGla26Ytx%71PeVFDDjx2Ds3DAb", "/%73hare/\(token)", "/share/\(token);v=1", "/share/short", "/share/\(token)x", "/share/\(token)%2F",
            "/share/\(token)/ ", "/share//", "/s/\(token.lowercased())",
        ]
        let tails = ["", "?a=b", "#Title", "?q#f", "#", "?"]
        for scheme in schemes {
            for host in hosts {
                for path in paths {
                    for tail in tails { texts.append("\(scheme)://\(host)\(path)\(tail)") }
                }
            }
        }
        texts += ["https:/share/\(token)", "https:share/\(token)", "https://", "//host/share/\(token)", "share/\(token)"]
        return texts
    }()

    @Test func plainReadingsAgreeWithFoundation() {
        var plain = 0
        var compared = 0
        for text in Self.texts {
            guard let url = URL(string: text) else { continue }
            compared += 1
            let foundation = ShareURL.tokenThroughFoundation(in: url)
            if case .read(let token) = ShareURL.plainToken(in: url.absoluteString) {
                plain += 1
                #expect(token == foundation, "\(text)")
            }
            #expect(ShareURL.token(in: url) == foundation, "\(text)")
        }
        // Most texts are compared; the plain reading covers the usual shapes.
        #expect(compared > 4_000)
        #expect(plain > 1_000)
        #expect(ShareURL.plainToken(in: "https://share.localhost/share/\(Self.token)#Groceries") == .read(ShareToken(Self.token)))
    }
}
