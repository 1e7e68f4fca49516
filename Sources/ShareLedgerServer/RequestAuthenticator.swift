import Crypto
import Foundation
import ShareLedger

/// Who a request acts as, once its credentials are checked.
struct Caller: Sendable {
    /// The user the request acts as.
    var userRecordName: String
    /// The id of the credential that named the user (log lines name this, never a token).
    var credentialID: String
    /// How the caller proved who it is.
    var method: ServerCredentials.Kind
}

/// Checks a request's credentials in CloudKit Web Services' forms: `ckAPIToken` plus
/// `ckWebAuthToken` query parameters, or a server-to-server signature in the
/// `X-Apple-CloudKit-Request-*` headers.
struct RequestAuthenticator: Sendable {
    let credentials: ServerCredentials
    /// How far a signed request's date may be from the server's clock.
    let signatureWindow: TimeInterval
    /// Where `AUTHENTICATION_REQUIRED` sends the user to sign in.
    let signInURL: String

    struct Signature: Sendable {
        var keyID: String
        var date: String
        var signature: String
    }

    /// The caller of a request to `container`.
    ///
    /// - Parameters:
    ///   - subpath: The request's path from `/database/...` (what a server-to-server signature covers).
    func authenticate(
        container: String, apiToken: String?, webAuthToken: String?, signature: Signature?, subpath: String, body: [UInt8],
        now: Date
    ) throws(WireError) -> Caller {
        // The caller refreshed the credentials (``ServerCredentials/refresh(force:)``) for this request.
        if let signature {
            return try checkSignature(signature, container: container, subpath: subpath, body: body, now: now)
        }
        guard let apiToken, !apiToken.isEmpty else {
            throw WireError(
                .authenticationRequired, "this request needs ckAPIToken and ckWebAuthToken, or a server-to-server signature",
                redirectURL: signInURL)
        }
        guard let api = credentials.entry(forToken: apiToken, kind: .apiToken, now: now), api.container == container else {
            throw WireError(.authenticationFailed, "the API token is not valid for this container")
        }
        guard let webAuthToken, !webAuthToken.isEmpty else {
            throw WireError(
                .authenticationRequired, "this request needs a signed-in user: add ckWebAuthToken", redirectURL: signInURL)
        }
        guard let web = credentials.entry(forToken: webAuthToken, kind: .webAuthToken, now: now), web.container == container,
            let user = web.userRecordName
        else {
            throw WireError(.authenticationFailed, "the web auth token is not valid for this container (revoked or expired?)")
        }
        return Caller(userRecordName: user, credentialID: web.id, method: .webAuthToken)
    }

    private func checkSignature(
        _ signature: Signature, container: String, subpath: String, body: [UInt8], now: Date
    )
        throws(WireError) -> Caller
    {
        let failed = WireError(.authenticationFailed, "the server-to-server signature does not verify")
        guard let (entry, key) = credentials.serverKey(id: signature.keyID, now: now), entry.container == container,
            let user = entry.userRecordName
        else {
            throw WireError(.authenticationFailed, "the server-to-server key id is not registered for this container")
        }
        guard let date = Self.parseDate(signature.date), abs(date.timeIntervalSince(now)) <= signatureWindow else {
            throw WireError(
                .authenticationFailed,
                "X-Apple-CloudKit-Request-ISO8601Date must be yyyy-MM-ddTHH:mm:ssZ within \(CheckedConversion.int64(clamping: signatureWindow)) s of the server's clock"
            )
        }
        guard let bytes = Data(base64Encoded: signature.signature) else { throw failed }
        let message = Self.signedMessage(date: signature.date, body: body, subpath: subpath)
        let digest = SHA256.hash(data: message)
        let parsed =
            (try? P256.Signing.ECDSASignature(derRepresentation: bytes))
            ?? (try? P256.Signing.ECDSASignature(rawRepresentation: bytes))
        guard let parsed, key.isValidSignature(parsed, for: digest) else { throw failed }
        return Caller(userRecordName: user, credentialID: entry.id, method: .serverKey)
    }

    /// What a server-to-server caller signs: `date:base64(sha256(body)):subpath`.
    static func signedMessage(date: String, body: [UInt8], subpath: String) -> [UInt8] {
        let bodyHash = Data(SHA256.hash(data: body)).base64EncodedString()
        return Array("\(date):\(bodyHash):\(subpath)".utf8)
    }

    static func parseDate(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }
}
