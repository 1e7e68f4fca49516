import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import ShareLedger
import ShareLedgerAudit
import ShareLedgerReports

/// The report pages for operators under `/reports`: an index with lookup forms, a share's access
/// timeline, a person's access and a container's access review, drawn by ShareLedgerReports from the
/// served ledger (read only).
///
/// Only an operator token (``ServerCredentials/Kind/operatorToken``) opens them, presented as
/// `Authorization: Bearer TOKEN` or as the password of HTTP Basic authentication (what a browser
/// asks for after a 401). Any other credential gets 403; none, or an unknown one, gets 401 and no
/// content of the ledger. Emails and phones appear only with `contact=1` on a share's page.
struct OperatorPages: Sendable {
    let server: LedgerServer

    /// The paths served, with the page each draws.
    static let paths: [String: Page] = [
        "/reports": .index, "/reports/share": .share, "/reports/user": .user, "/reports/access-review": .accessReview,
    ]

    enum Page: String, Sendable {
        case index, share, user, accessReview = "access-review"
    }

    /// A refusal or a bad request: a status and a message for the operator (no personal data).
    struct Failure: Error {
        var status: HTTPResponse.Status
        var message: String
    }

    private static let keyIDHeader = HTTPField.Name("X-Apple-CloudKit-Request-KeyID")!

    func respond(_ request: Request, page: Page, context: ServerRequestContext) async -> Response {
        let start = ContinuousClock.now
        var credentialID: String?
        let response: Response
        do {
            credentialID = try authenticate(request)
            let query = Self.form(request.uri.query)
            response = await Self.offTheEventLoop { [self] in
                do {
                    switch page {
                    case .index: return Self.html(Self.indexPage())
                    case .share: return Self.html(try sharePage(query))
                    case .user: return Self.html(try userPage(query))
                    case .accessReview: return try accessReview(query)
                    }
                } catch {
                    return Self.refusal(error)
                }
            }
        } catch {
            response = Self.refusal(error)
        }
        let status = Int(response.status.code)
        server.metrics.recordRequest(endpoint: "reports/\(page.rawValue)", status: status, items: 0, duration: ContinuousClock.now - start)
        var metadata: Logger.Metadata = ["http.method": "\(request.method.rawValue)", "page": "\(page.rawValue)", "http.status": "\(status)"]
        if let credentialID { metadata["credential"] = "\(credentialID)" }
        context.logger.log(level: status >= 500 ? .error : .info, "report page", metadata: metadata)
        return response
    }

    /// Where the pages are read and drawn: one at a time, on a queue of their own. A page replays
    /// histories and verifies the whole chain (time in proportion to the log), which must not hold
    /// the event loop that answers the CloudKit requests, nor run many at once.
    private static let queue = DispatchQueue(label: "share-ledger.report-pages")

    static func offTheEventLoop(_ work: @escaping @Sendable () -> Response) async -> Response {
        await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: work()) }
        }
    }

    // MARK: - Credentials

    /// The id of the operator token the request presents.
    func authenticate(_ request: Request) throws(Failure) -> String {
        server.credentials.refresh(logger: server.logger)
        let now = Date()
        let presented = Self.presentedToken(request.headers[.authorization])
        if let presented, let entry = server.credentials.entry(forToken: presented, kind: .operatorToken, now: now) {
            return entry.id
        }
        // Another kind of credential, presented anywhere a client might: refused as such.
        let query = Self.form(request.uri.query)
        let others = [presented, query["ckAPIToken"], query["ckWebAuthToken"]].compactMap { $0 }
        let otherKinds: [ServerCredentials.Kind] = [.apiToken, .webAuthToken]
        let known =
            others.contains { token in otherKinds.contains { server.credentials.entry(forToken: token, kind: $0, now: now) != nil } }
            || (request.headers[Self.keyIDHeader].flatMap { server.credentials.serverKey(id: $0, now: now) } != nil)
        if known {
            throw Failure(
                status: .forbidden,
                message: "the report pages take an operator token only (`share-ledger token create --operator NAME`), "
                    + "never an API token, a user's web auth token or a server-to-server key")
        }
        throw Failure(
            status: .unauthorized,
            message: presented == nil
                ? "the report pages need an operator token: send Authorization: Bearer TOKEN, or give it as the password "
                    + "when the browser asks (make one with `share-ledger token create --operator NAME`)"
                : "the operator token is not valid (revoked or expired?)")
    }

    /// The token of `Authorization: Bearer TOKEN`, or the password of `Authorization: Basic ...`.
    static func presentedToken(_ header: String?) -> String? {
        guard let header else { return nil }
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2 else { return nil }
        let scheme = parts[0].lowercased()
        let value = parts[1].trimmingCharacters(in: .whitespaces)
        if scheme == "bearer" { return value.isEmpty ? nil : value }
        guard scheme == "basic", let data = Data(base64Encoded: value), let text = String(data: data, encoding: .utf8),
            let colon = text.firstIndex(of: ":")
        else { return nil }
        let password = String(text[text.index(after: colon)...])
        return password.isEmpty ? nil : password
    }

    // MARK: - Pages

    static func indexPage() -> String {
        let body = """
            <h1>ShareLedger reports</h1>
            <p>Read-only pictures of the served ledger. People appear by user record name; emails and phones only when asked for.</p>
            <h2>A share's access timeline</h2>
            <form method="get" action="/reports/share">
            <label>Share URL or token <input name="url" size="60" required></label>
            <label><input type="checkbox" name="contact" value="1"> show emails and phones</label>
            <button type="submit">Show</button>
            </form>
            <h2>A person's access</h2>
            <form method="get" action="/reports/user">
            <label>User record name <input name="name" required></label>
            <label>Container <input name="container" required></label>
            <button type="submit">Show</button>
            </form>
            <h2>An access review</h2>
            <form method="get" action="/reports/access-review">
            <label>Container <input name="container" required></label>
            <label>From (position or ISO 8601 time) <input name="from"></label>
            <label>To <input name="to"></label>
            <select name="format"><option value="html">HTML</option><option value="csv">CSV</option></select>
            <button type="submit">Review</button>
            </form>
            """
        return HTML.page(title: "ShareLedger reports", body: body)
    }

    func sharePage(_ query: Query) throws(Failure) -> String {
        let text = try Self.required(query, "url")
        let url: URL
        if let parsed = URL(string: text), ShareURL.token(in: parsed) != nil {
            url = parsed
        } else if let token = ShareToken(text), let made = ShareURL.make(host: server.ledger.configuration.shareURLHost, token: token) {
            url = made
        } else {
            throw Failure(status: .badRequest, message: "url must be a share URL or a share's token")
        }
        var options = ShareReport.Options(
            asOf: try Self.bound(query, "as-of"), from: try Self.bound(query, "from"), to: try Self.bound(query, "to"),
            showContact: try Self.flag(query, "contact"))
        options.now = Date()
        return try read { () throws(LedgerError) in try ShareReport.make(ledger: server.ledger, url: url, options: options).html() }
    }

    func userPage(_ query: Query) throws(Failure) -> String {
        let name = try Self.required(query, "name")
        let container = try Self.required(query, "container")
        var options = ShareReport.Options(
            asOf: try Self.bound(query, "as-of"), from: try Self.bound(query, "from"), to: try Self.bound(query, "to"))
        options.now = Date()
        return try read { () throws(LedgerError) in
            try UserReport.make(ledger: server.ledger, user: name, container: container, options: options).html()
        }
    }

    func accessReview(_ query: Query) throws(Failure) -> Response {
        let container = try Self.required(query, "container")
        let from = try Self.bound(query, "from") ?? .position(LogPosition(1))
        let to = try Self.bound(query, "to") ?? .position(LogPosition(UInt64.max))
        let format = query["format"] ?? "html"
        guard format == "html" || format == "csv" else {
            throw Failure(status: .badRequest, message: "format must be html or csv")
        }
        let review = try read { () throws(LedgerError) in
            try AccessReview.make(ledger: server.ledger, container: container, from: from, to: to)
        }
        guard format == "csv" else { return Self.html(review.html()) }
        var headers = Self.commonHeaders
        headers[.contentType] = "text/csv; charset=utf-8"
        headers[.contentDisposition] = "attachment; filename=\"access-review.csv\""
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: review.csv())))
    }

    // MARK: - Parameters and answers

    typealias Query = [String: String]

    /// The fields of a query as an HTML form sends them (`+` for a space, percent escapes); the
    /// first of repeated names counts.
    static func form(_ query: String?) -> Query {
        var fields: Query = [:]
        for pair in (query ?? "").split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ text: Substring) -> String? {
                String(text).replacingOccurrences(of: "+", with: " ").removingPercentEncoding
            }
            guard let name = decode(parts[0]), let value = parts.count == 2 ? decode(parts[1]) : "" else { continue }
            if fields[name] == nil { fields[name] = value }
        }
        return fields
    }

    static func required(_ query: Query, _ name: String) throws(Failure) -> String {
        guard let value = query[name], !value.isEmpty else {
            throw Failure(status: .badRequest, message: "\(name) is required")
        }
        guard value.utf8.count <= ShareURL.maxLength else {
            throw Failure(status: .badRequest, message: "\(name) is longer than \(ShareURL.maxLength) bytes")
        }
        return value
    }

    /// A position or an ISO 8601 time; nil when the parameter is absent or empty.
    static func bound(_ query: Query, _ name: String) throws(Failure) -> HistoryBound? {
        guard let value = query[name], !value.isEmpty else { return nil }
        if let position = UInt64(value) { return .position(LogPosition(position)) }
        if let date = ISO8601DateFormatter().date(from: value) { return .time(date) }
        throw Failure(status: .badRequest, message: "\(name) must be a log position or an ISO 8601 time (2026-01-31T12:00:00Z)")
    }

    static func flag(_ query: Query, _ name: String) throws(Failure) -> Bool {
        switch query[name] {
        case nil, "", "0", "false": return false
        case "1", "true", "on": return true
        default: throw Failure(status: .badRequest, message: "\(name) must be 1 or 0")
        }
    }

    /// Runs a report over the ledger; its errors as answers (no such share: 404, a bad bound: 400).
    private func read<T>(_ body: () throws(LedgerError) -> T) throws(Failure) -> T {
        do {
            return try body()
        } catch {
            switch error.code {
            case .unknownItem: throw Failure(status: .notFound, message: "nothing in the ledger matches: \(error.message)")
            case .invalidArguments: throw Failure(status: .badRequest, message: error.message)
            default:
                server.logger.error("report page: the ledger could not be read", metadata: ["code": "\(error.code)"])
                throw Failure(status: .internalServerError, message: "the ledger could not be read; see the server's log")
            }
        }
    }

    /// No caching, no framing, no script and no resource from anywhere (the pages need none).
    static var commonHeaders: HTTPFields {
        var headers = HTTPFields()
        headers[.cacheControl] = "no-store"
        headers[.contentSecurityPolicy] = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'"
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        return headers
    }

    static func html(_ page: String) -> Response {
        var headers = commonHeaders
        headers[.contentType] = "text/html; charset=utf-8"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: page)))
    }

    static func refusal(_ error: any Error) -> Response {
        let failure = error as? Failure ?? Failure(status: .internalServerError, message: "the page failed; see the server's log")
        var headers = commonHeaders
        headers[.contentType] = "text/plain; charset=utf-8"
        if failure.status == .unauthorized {
            headers[.wwwAuthenticate] = "Basic realm=\"share-ledger reports\", charset=\"UTF-8\""
        }
        return Response(status: failure.status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: failure.message + "\n")))
    }
}
