import Crypto
import Foundation
import Logging
import ShareLedger
import Synchronization

/// The credentials `share-ledger serve` accepts, kept in one JSON file in the ledger directory
/// (``fileName``, mode 0600) and managed with `share-ledger token create/revoke/list`:
///
/// - **API tokens**, one or more per container (CloudKit's `ckAPIToken`): a request without a valid
///   one is refused, and a container with none is unknown to the server.
/// - **Web auth tokens** (CloudKit's `ckWebAuthToken`): name the user a request acts as, in one
///   container, until they expire.
/// - **Server-to-server keys**: an ECDSA P-256 public key under a key id, for back-end callers that
///   sign each request; each key acts as one user of one container.
/// - **Operator tokens**: open the report pages under `/reports` (read-only, every container);
///   they name an operator, not a user, and reach nothing under `/database/1/`.
///
/// The file holds only the SHA-256 of each token, never the token: the token is shown once, when it
/// is made. The server reads the file again when it changes (checked at most once a second), so a
/// token made or revoked while it runs takes effect without a restart.
public final class ServerCredentials: Sendable {
    /// The file's name in the ledger directory.
    public static let fileName = "server-credentials.json"

    /// What kind of credential.
    public enum Kind: String, Sendable, Codable, CaseIterable {
        /// A container's API token (`ckAPIToken`).
        case apiToken
        /// A user's web auth token (`ckWebAuthToken`).
        case webAuthToken
        /// A server-to-server key (`X-Apple-CloudKit-Request-KeyID`).
        case serverKey
        /// An operator's token for the report pages (`Authorization: Bearer`, or the password of
        /// HTTP Basic authentication); never a user's credential.
        case operatorToken
    }

    /// One credential as the file stores it (no secret: a token's SHA-256, a key's public half).
    public struct Entry: Sendable, Codable, Hashable {
        /// The credential's id: what `token revoke` takes, what log lines name; for a server key, its key id.
        public var id: String
        /// What kind of credential.
        public var kind: Kind
        /// The container it is for (empty for an operator token, which reads every container).
        public var container: String
        /// The user it acts as (web auth tokens and server keys); for an operator token, the operator's name.
        public var userRecordName: String?
        /// The SHA-256 (hex) of the token (API and web auth tokens).
        public var tokenSHA256: String?
        /// The PEM of the P-256 public key (server keys).
        public var publicKeyPEM: String?
        /// When it was made.
        public var createdAt: Date
        /// When it stops working (nil: never).
        public var expiresAt: Date?
        /// The environment a server key may be used in (`development` or `production`); nil in
        /// entries made before keys were bound to one: either.
        public var environment: String?
        /// The databases a server key may use besides `public` (only `private` and `shared` mean
        /// anything); nil or empty: the public database only, as Apple scopes server keys.
        public var extraDatabases: [String]?
    }

    /// A token just made: ``token`` is shown this once and stored nowhere.
    public struct IssuedToken: Sendable, Codable, Hashable {
        /// The stored entry.
        public var entry: Entry
        /// The token itself.
        public var token: String
    }

    private struct FileContents: Codable {
        var version = 1
        var credentials: [Entry] = []
    }

    private struct Loaded {
        var modified: Date?
        var size: Int?
        var checkedAt: ContinuousClock.Instant?
        var entries: [Entry] = []
        var byTokenHash: [String: Entry] = [:]
        var serverKeys: [String: (Entry, P256.Signing.PublicKey)] = [:]
        var containers: Set<String> = []
        /// Whether the last read of a changed file failed (so that the warning is logged once).
        var lastRefreshFailed = false
    }

    /// The file's path.
    public let path: String
    private let state = Mutex(Loaded())

    /// The credentials of the ledger at `ledgerPath` (the file need not exist yet).
    public init(ledgerPath: String) {
        self.path = URL(fileURLWithPath: ledgerPath).appendingPathComponent(ServerCredentials.fileName).path
    }

    // MARK: - Managing (the CLI)

    /// Makes an API token for `container`.
    public func createAPIToken(container: String, expiresAt: Date? = nil) throws(ServerError) -> IssuedToken {
        try issue(kind: .apiToken, container: container, user: nil, expiresAt: expiresAt)
    }

    /// Makes a web auth token naming `userRecordName` in `container`, valid until `expiresAt`.
    public func createWebAuthToken(
        container: String, userRecordName: String, expiresAt: Date
    ) throws(ServerError)
        -> IssuedToken
    {
        try issue(kind: .webAuthToken, container: container, user: userRecordName, expiresAt: expiresAt)
    }

    /// Makes an operator token named `name` (who holds it, for `token list`): it opens the report
    /// pages under `/reports` for every container, read-only, and nothing else.
    ///
    /// - Throws: ``ServerError/Code/invalidArguments`` when `name` is empty or longer than 255 bytes.
    public func createOperatorToken(name: String, expiresAt: Date? = nil) throws(ServerError) -> IssuedToken {
        guard !name.isEmpty, name.utf8.count <= 255 else {
            throw ServerError(.invalidArguments, "the operator's name must be 1 to 255 bytes")
        }
        let token = "slo_" + Self.randomHex(bytes: 32)
        let entry = Entry(
            id: Self.randomHex(bytes: 8), kind: .operatorToken, container: "", userRecordName: name,
            tokenSHA256: Self.sha256Hex(token), publicKeyPEM: nil, createdAt: Date(), expiresAt: expiresAt)
        try update { $0.credentials.append(entry) }
        return IssuedToken(entry: entry, token: token)
    }

    /// The environments of CloudKit Web Services' URLs.
    public static let environments: Set<String> = ["development", "production"]

    /// Registers a server-to-server key: the PEM of an ECDSA P-256 public key; requests signed with
    /// its private key act as `userRecordName` in `container`, in `environment` only. Returns the
    /// entry; its ``Entry/id`` (64 hex digits, Apple's form) is the key id callers send in
    /// `X-Apple-CloudKit-Request-KeyID`.
    ///
    /// - Parameters:
    ///   - container: The container the key acts in.
    ///   - userRecordName: The user its requests act as.
    ///   - publicKeyPEM: The PEM of the key's ECDSA P-256 public key.
    ///   - environment: `development` or `production`: the one environment its requests may name.
    ///   - expiresAt: When the key stops working; nil for never.
    ///   - allowingPrivateDatabases: As Apple does, a server key reaches the public database only;
    ///     true lets it use the private and shared databases of `userRecordName` too (an explicit
    ///     choice: whoever holds the private key then reads and writes that user's data).
    public func registerServerKey(
        container: String, userRecordName: String, publicKeyPEM: String, environment: String = "development",
        allowingPrivateDatabases: Bool = false, expiresAt: Date? = nil
    ) throws(ServerError) -> Entry {
        guard (try? P256.Signing.PublicKey(pemRepresentation: publicKeyPEM)) != nil else {
            throw ServerError(.invalidArguments, "the public key is not the PEM of an ECDSA P-256 public key")
        }
        guard Self.environments.contains(environment) else {
            throw ServerError(.invalidArguments, "the environment must be development or production")
        }
        let entry = Entry(
            id: Self.randomHex(bytes: 32), kind: .serverKey, container: container, userRecordName: userRecordName,
            tokenSHA256: nil, publicKeyPEM: publicKeyPEM, createdAt: Date(), expiresAt: expiresAt, environment: environment,
            extraDatabases: allowingPrivateDatabases ? ["private", "shared"] : nil)
        try update { $0.credentials.append(entry) }
        return entry
    }

    /// Removes the credential with `id`.
    ///
    /// - Throws: ``ServerError/Code/unknownCredential`` when there is none.
    public func revoke(id: String) throws(ServerError) {
        var found = false
        try update { contents in
            let before = contents.credentials.count
            contents.credentials.removeAll { $0.id == id }
            found = contents.credentials.count < before
        }
        guard found else {
            throw ServerError(.unknownCredential, "there is no credential \(id); list them with `share-ledger token list`")
        }
    }

    /// Every credential, in the order they were made.
    public func list() throws(ServerError) -> [Entry] {
        try readFile().credentials
    }

    private func issue(kind: Kind, container: String, user: String?, expiresAt: Date?) throws(ServerError) -> IssuedToken {
        guard !container.isEmpty, container.utf8.count <= 255 else {
            throw ServerError(.invalidArguments, "the container identifier must be 1 to 255 bytes")
        }
        // API tokens in Apple's form, 64 lower-case hex digits (clients such as MistKit check it);
        // tokens made before, `sla_` and 64 hex digits, keep working (the file holds only hashes).
        let token = (kind == .apiToken ? "" : "slw_") + Self.randomHex(bytes: 32)
        let entry = Entry(
            id: Self.randomHex(bytes: 8), kind: kind, container: container, userRecordName: user,
            tokenSHA256: Self.sha256Hex(token), publicKeyPEM: nil, createdAt: Date(), expiresAt: expiresAt)
        try update { $0.credentials.append(entry) }
        return IssuedToken(entry: entry, token: token)
    }

    private func readFile() throws(ServerError) -> FileContents {
        guard FileManager.default.fileExists(atPath: path) else { return FileContents() }
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw ServerError(
                .unreadableFile, "\(path) cannot be read: make it readable by the user that runs share-ledger, or "
                    + "remove it and make new tokens with `share-ledger token create`")
        }
        do {
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            return try decoder.decode(FileContents.self, from: data)
        } catch {
            throw ServerError(
                .unreadableFile, "\(path) is not a credentials file ShareLedger can read (damaged or edited by hand): "
                    + "restore it from a backup, or remove it and make new tokens with `share-ledger token create`")
        }
    }

    /// Reads, changes and writes the file (a new file renamed over the old one, mode 0600).
    private func update(_ change: (inout FileContents) -> Void) throws(ServerError) {
        var contents = try readFile()
        change(&contents)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        let temporary = path + ".tmp-\(Self.randomHex(bytes: 4))"
        do {
            let data = try encoder.encode(contents)
            guard FileManager.default.createFile(atPath: temporary, contents: data, attributes: [.posixPermissions: 0o600])
            else { throw CocoaError(.fileWriteUnknown) }
            // rename(2) replaces the old file in one step: a reader sees the old or the new, never half.
            guard rename(temporary, path) == 0 else { throw CocoaError(.fileWriteUnknown) }
        } catch {
            try? FileManager.default.removeItem(atPath: temporary)
            throw ServerError(.unreadableFile, "could not write \(path): is the ledger directory writable?")
        }
        state.withLock { $0.checkedAt = nil }
    }

    // MARK: - Checking (the server)

    /// What ``loadForServing()`` found.
    public enum LoadOutcome: Sendable, Hashable {
        /// There is no credentials file: no container has a token or key, and every request is refused
        /// until `share-ledger token create` makes one (the running server then reads the new file).
        case missing
        /// The file was read; it holds this many credentials.
        case loaded(credentials: Int)
    }

    /// Reads the file now, for a server about to start: a file that exists but cannot be read (not
    /// JSON, not this format, no permission) is an error naming the file, not an empty set of
    /// credentials that would answer every request "unknown container".
    ///
    /// - Throws: ``ServerError/Code/unreadableFile`` when the file exists and cannot be read.
    @discardableResult
    public func loadForServing() throws(ServerError) -> LoadOutcome {
        let exists = FileManager.default.fileExists(atPath: path)
        let contents = try readFile()
        refresh(force: true)
        return exists ? .loaded(credentials: contents.credentials.count) : .missing
    }

    /// Reads the file again if it changed since the last look (at most once a second, or now when
    /// `force`). A file that cannot be read keeps the credentials loaded before, and logs a warning
    /// (once, until the file is readable again) when a logger is given.
    func refresh(force: Bool = false, logger: Logger? = nil) {
        let now = ContinuousClock.now
        let due = state.withLock { loaded in
            guard force || loaded.checkedAt.map({ now - $0 >= .seconds(1) }) ?? true else { return false }
            loaded.checkedAt = now
            return true
        }
        guard due else { return }
        let attributes = try? FileManager.default.attributesOfItem(atPath: path)
        let modified = attributes?[.modificationDate] as? Date
        let size = (attributes?[.size] as? NSNumber)?.intValue
        let unchanged = state.withLock { $0.modified == modified && $0.size == size && !force }
        guard !unchanged else { return }
        let contents: FileContents
        do throws(ServerError) {
            contents = try readFile()
        } catch {
            // Keep the credentials loaded before; say so once per change of the file.
            let first = state.withLock { loaded in
                defer {
                    loaded.lastRefreshFailed = true
                    loaded.modified = modified
                    loaded.size = size
                }
                return !loaded.lastRefreshFailed
            }
            if first {
                logger?.warning(
                    "the credentials file cannot be read; the credentials read before stay in use until it is fixed",
                    metadata: ["file": "\(path)", "error": "\(error.message)"])
            }
            return
        }
        var loaded = Loaded(modified: modified, size: size, checkedAt: now, entries: contents.credentials)
        for entry in contents.credentials {
            // An operator token names no container: it makes none known to `/database/1/`.
            if entry.kind != .operatorToken { loaded.containers.insert(entry.container) }
            if let hash = entry.tokenSHA256 { loaded.byTokenHash[hash] = entry }
            if let pem = entry.publicKeyPEM, let key = try? P256.Signing.PublicKey(pemRepresentation: pem) {
                loaded.serverKeys[entry.id] = (entry, key)
            }
        }
        state.withLock { $0 = loaded }
    }

    /// Whether any credential names `container` (a container with none is unknown to the server).
    func knows(container: String) -> Bool {
        state.withLock { $0.containers.contains(container) }
    }

    /// The live (not expired) entry of `token` of `kind`, if any.
    func entry(forToken token: String, kind: Kind, now: Date) -> Entry? {
        let hash = Self.sha256Hex(token)
        return state.withLock { loaded in
            guard let entry = loaded.byTokenHash[hash], entry.kind == kind, entry.expiresAt.map({ $0 > now }) ?? true
            else { return nil }
            return entry
        }
    }

    /// The live server key with `id`, if any.
    func serverKey(id: String, now: Date) -> (Entry, P256.Signing.PublicKey)? {
        state.withLock { loaded in
            guard let found = loaded.serverKeys[id], found.0.expiresAt.map({ $0 > now }) ?? true else { return nil }
            return found
        }
    }

    static func sha256Hex(_ text: String) -> String {
        Hex.encode(SHA256.hash(data: Array(text.utf8)))
    }

    static func randomHex(bytes: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return Hex.encode((0..<bytes).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }
}
