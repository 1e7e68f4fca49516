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
    /// The signatures seen within the window (each is accepted once).
    let replayGuard: SignatureReplayGuard

    struct Signature: Sendable {
        var keyID: String
        var date: String
        var signature: String
    }

    /// The caller of a request to `container`.
    ///
    /// - Parameters:
    ///   - environment: `development` or `production` (a server key is bound to one).
    ///   - database: `public`, `private` or `shared` (a server key reaches `public` only, unless
    ///     registered for more).
    ///   - subpath: The request's path from `/database/...` (what a server-to-server signature covers).
    func authenticate(
        container: String, environment: String, database: String, apiToken: String?, webAuthToken: String?,
        signature: Signature?, subpath: String, body: [UInt8], now: Date
    ) throws(WireError) -> Caller {
        // The caller refreshed the credentials (``ServerCredentials/refresh(force:)``) for this request.
        if let signature {
            return try checkSignature(
                signature, container: container, environment: environment, database: database, subpath: subpath, body: body,
                now: now)
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
        _ signature: Signature, container: String, environment: String, database: String, subpath: String, body: [UInt8],
        now: Date
    )
        throws(WireError) -> Caller
    {
        let failed = WireError(.authenticationFailed, "the server-to-server signature does not verify")
        guard let (entry, key) = credentials.serverKey(id: signature.keyID, now: now), entry.container == container,
            let user = entry.userRecordName
        else {
            throw WireError(.authenticationFailed, "the server-to-server key id is not registered for this container")
        }
        if let bound = entry.environment, bound != environment {
            throw WireError(.authenticationFailed, "this server-to-server key is registered for the \(bound) environment")
        }
        guard let date = Self.parseDate(signature.date), abs(date.timeIntervalSince(now)) <= signatureWindow else {
            throw WireError(
                .authenticationFailed,
                "X-Apple-CloudKit-Request-ISO8601Date must be yyyy-MM-ddTHH:mm:ssZ within \(CheckedConversion.int64(clamping: signatureWindow)) s of the server's clock"
            )
        }
        guard let bytes = Data(base64Encoded: signature.signature) else { throw failed }
        let parsed =
            (try? P256.Signing.ECDSASignature(derRepresentation: bytes))
            ?? (try? P256.Signing.ECDSASignature(rawRepresentation: bytes))
        guard let parsed else { throw failed }
        // Apple's samples hash the body, an empty one included; some clients (MistKit) leave the
        // hash out of a request without a body. Both name the same request.
        var messages = [Self.signedMessage(date: signature.date, body: body, subpath: subpath)]
        if body.isEmpty { messages.append(Array("\(signature.date)::\(subpath)".utf8)) }
        guard messages.contains(where: { key.isValidSignature(parsed, for: SHA256.hash(data: $0)) }) else { throw failed }
        guard database == "public" || (entry.extraDatabases ?? []).contains(database) else {
            throw WireError(
                .accessDenied,
                "this server-to-server key reaches the public database only; register it with --allow-private-databases "
                    + "to let it act in its user's private and shared databases")
        }
        // Once per signature: `r` (the first half of the raw form) cannot be changed without the
        // private key, whatever encoding or `s` a replayer sends.
        let replayKey = entry.id + ":" + Hex.encode(parsed.rawRepresentation.prefix(32))
        switch replayGuard.admit(replayKey, expiry: date.addingTimeInterval(signatureWindow), now: now) {
        case .fresh: break
        case .replayed:
            throw WireError(.authenticationFailed, "this signature was used before; sign every request anew")
        case .full:
            throw WireError(.throttled, "too many signed requests within the signature window; retry later")
        }
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
