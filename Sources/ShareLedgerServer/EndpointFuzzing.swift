import ShareLedger

/// Request bodies run through the endpoints as `serve` runs them (the JSON parser, each endpoint's
/// reading of its keys and values, the ledger call, the rendering of the answer), without sockets or
/// credentials: what the `http` fuzz target and its corpus test call. `package` access: not API.
package struct EndpointFuzzing: Sendable {
    /// The endpoints' subpaths, in a fixed order, so that a fuzz input can pick one by a byte.
    package static let subpaths: [String] = Endpoints.all.keys.sorted()
    /// The databases, in a fixed order.
    package static let databases: [String] = ["private", "shared", "public"]

    let ledger: ShareLedger
    let container: String
    let userRecordName: String

    /// Requests to `container` acting as `userRecordName` of `ledger`.
    package init(ledger: ShareLedger, container: String, userRecordName: String) {
        self.ledger = ledger
        self.container = container
        self.userRecordName = userRecordName
    }

    /// Runs `body` as the request of endpoint `subpath` in `database`, renders the answer, and returns
    /// the HTTP status the server would answer with (404 for an unknown endpoint or database).
    package func run(subpath: String, database: String, body: [UInt8]) async -> Int {
        guard let endpoint = Endpoints.all[subpath], let scope = DatabaseRequest.Database(rawValue: database) else { return 404 }
        do throws(WireError) {
            let json = try JSONValue.parse(body)
            _ = try json.object("the request body")
            let request = DatabaseRequest(
                container: ledger.container(container, userRecordName: userRecordName), environment: "development",
                database: scope, caller: Caller(userRecordName: userRecordName, credentialID: "fuzz", method: .webAuthToken),
                body: json, maxItems: 400, shareURLHost: ledger.configuration.shareURLHost)
            _ = try await endpoint.handler(request).bytes
            return 200
        } catch {
            _ = error.dictionary(uuid: nil).bytes
            return error.status
        }
    }
}
