import Dispatch
import Foundation
import ShareLedger
import ShareLedgerServer
import Synchronization

/// The `http` fuzz target: one input is one request body for one endpoint of `share-ledger serve`,
/// run through the server's own parsers and the ledger (``EndpointFuzzing``). The first byte picks
/// the endpoint (its value modulo their count) and the database (its high bits); the rest is the
/// body. A request may be answered with any 2xx or 4xx; a 5xx answer or a trap is a failure.
///
/// The seeds (``seeds``) are bodies of every endpoint with numbers at and beyond every bound (the
/// extremes of Int64, Double and the TIMESTAMP range, as numbers and as strings, NaN and infinities
/// as strings); `Fuzz/http.dict` gives libFuzzer the same tokens to splice in.
package final class HTTPBodyFuzzing: Sendable {
    /// The container and user every request acts in.
    package static let container = "iCloud.fuzz"
    package static let user = "_alice"

    let endpoints: EndpointFuzzing

    /// A fuzzer over `ledger`, which ``prepare(_:)`` has prepared.
    package init(ledger: ShareLedger) {
        endpoints = EndpointFuzzing(ledger: ledger, container: Self.container, userRecordName: Self.user)
    }

    /// Registers the users the requests name (`_alice`, who acts, and `_bob`) and alice's zone `Z`.
    package static func prepare(_ ledger: ShareLedger) async throws {
        try await ledger.registerUser(user, in: container, emailAddress: "alice@example.com")
        try await ledger.registerUser("_bob", in: container, emailAddress: "bob@example.com", phoneNumber: "+15550100")
        _ = try await ledger.container(container, userRecordName: user).save(RecordZone(zoneID: RecordZoneID(zoneName: "Z")))
    }

    /// The endpoint, database and body an input stands for.
    package static func request(_ input: [UInt8]) -> (subpath: String, database: String, body: [UInt8]) {
        let selector = Int(input.first ?? 0)
        let subpaths = EndpointFuzzing.subpaths
        let databases = EndpointFuzzing.databases
        return (subpaths[selector % subpaths.count], databases[(selector >> 4) % databases.count], Array(input.dropFirst()))
    }

    /// Runs one input and returns the HTTP status the server would answer.
    package func answer(_ input: [UInt8]) async -> Int {
        let (subpath, database, body) = Self.request(input)
        return await endpoints.run(subpath: subpath, database: database, body: body)
    }

    /// Runs one input; a 5xx answer stops the process (libFuzzer saves the input).
    package func run(_ input: [UInt8]) async {
        let status = await answer(input)
        precondition(status < 500, "\(Self.request(input).subpath) answered \(status) to a request body")
    }

    /// The input for `subpath` in the private database with `body`.
    package static func input(_ subpath: String, _ body: String) -> [UInt8] {
        let index = EndpointFuzzing.subpaths.firstIndex(of: subpath) ?? 0
        return [UInt8(index)] + Array(body.utf8)
    }

    /// Numbers at and beyond every bound a request may carry, as JSON text.
    package static let edgeNumbers: [String] = [
        "0", "-0", "-1", "9007199254740992", "9007199254740993", "8640000000000000", "-8640000000000000", "8640000000000001",
        "-8640000000000001", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "-9223372036854775809",
        "9300000000000000", "1e308", "-1e308", "1.7976931348623157e308", "5e-324", "1e-400", "1.5", "8.64e15", "9.3e18",
        "\"9223372036854775807\"", "\"9300000000000000\"", "\"nan\"", "\"inf\"", "\"-infinity\"", "\"1e999\"", "\"\"",
        "400", "401", "-400", "4294967296", "2147483648",
    ]

    /// The seed inputs: a body of every endpoint, with each edge number in every numeric place.
    package static var seeds: [(name: String, input: [UInt8])] {
        var out: [(String, [UInt8])] = []
        for (index, number) in edgeNumbers.enumerated() {
            for type in ["INT64", "DOUBLE", "TIMESTAMP", "INT64_LIST", "DOUBLE_LIST", "TIMESTAMP_LIST"] {
                let value = type.hasSuffix("_LIST") ? "[0,\(number)]" : number
                out.append(
                    (
                        "modify-\(type.lowercased())-\(index)",
                        input(
                            "records/modify",
                            #"{"zoneID":{"zoneName":"Z"},"operations":[{"operationType":"create","record":{"recordName":"r\#(index)","recordType":"N","fields":{"f":{"type":"\#(type)","value":\#(value)}}}}]}"#)
                    ))
            }
            out.append(("untyped-\(index)", input("records/modify", #"{"zoneID":{"zoneName":"Z"},"operations":[{"operationType":"create","record":{"recordName":"u\#(index)","recordType":"N","fields":{"f":{"value":\#(number)}}}}]}"#)))
            out.append(("lookup-\(index)", input("records/lookup", #"{"zoneID":{"zoneName":"Z"},"records":[{"recordName":\#(number)}],"desiredKeys":[\#(number)]}"#)))
            out.append(("resolve-\(index)", input("records/resolve", #"{"shortGUIDs":[{"value":\#(number),"shouldFetchRootRecord":\#(number)}]}"#)))
            out.append(("accept-\(index)", input("records/accept", #"{"shortGUIDs":[{"value":"abc","rootRecordDesiredKeys":[\#(number)]}]}"#)))
            out.append(("zones-\(index)", input("zones/modify", #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":\#(number)}}}]}"#)))
            out.append(("email-\(index)", input("users/lookup/email", #"{"users":[{"emailAddress":\#(number)},{"emailAddress":"bob@example.com"}]}"#)))
            out.append(("caller-\(index)", input("users/caller", #"{"n":\#(number)}"#)))
            out.append(("list-\(index)", input("zones/list", #"{"resultsLimit":\#(number)}"#)))
            out.append(("changes-\(index)", input("records/changes", #"{"zoneID":{"zoneName":"Z"},"resultsLimit":\#(number),"syncToken":\#(number)}"#)))
            out.append(("zonechanges-\(index)", input("zones/changes", #"{"resultsLimit":\#(number),"syncToken":\#(number)}"#)))
            out.append(("phone-\(index)", input("users/lookup/phone", #"{"users":[{"phoneNumber":\#(number)},{"phoneNumber":"+15550100"}]}"#)))
            out.append(("participants-\(index)", input("users/lookup/participants", #"{"lookupInfos":[{"phoneNumber":\#(number)},{"userRecordName":"_bob"}]}"#)))
            out.append(("approve-\(index)", input("shares/accessRequests/approve", #"{"shortGUID":\#(number),"users":[{"userRecordName":"_bob"}]}"#)))
            out.append(("onetime-\(index)", input("shares/oneTimeParticipants/add", #"{"shortGUID":"abc","permission":\#(number)}"#)))
        }
        return out
    }
}

/// The fuzz target's fuzzer: a ledger in `SHARELEDGER_FUZZ_LEDGER` (default: a new directory under
/// the temporary directory), prepared once per process. Inputs run one at a time; the fuzzing
/// engine's thread waits for each (it is not a thread of Swift's concurrency pool).
package enum HTTPBodyFuzzTarget {
    private static let fuzzer: HTTPBodyFuzzing = {
        let path =
            ProcessInfo.processInfo.environment["SHARELEDGER_FUZZ_LEDGER"]
            ?? NSTemporaryDirectory() + "/shareledger-fuzz-http-\(getpid())"
        var configuration = ShareLedger.Configuration(path: path, createIfMissing: true, durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        do {
            let ledger = try ShareLedger.open(configuration)
            let prepared = wait { () async -> (any Error)? in
                do {
                    try await HTTPBodyFuzzing.prepare(ledger)
                    return nil
                } catch {
                    return error
                }
            }
            if let prepared { preconditionFailure("the fuzz ledger could not be prepared: \(prepared)") }
            return HTTPBodyFuzzing(ledger: ledger)
        } catch {
            preconditionFailure("the fuzz ledger at \(path) could not be opened: \(error)")
        }
    }()

    /// Runs one input (see ``HTTPBodyFuzzing``).
    package static func run(_ input: [UInt8]) {
        let fuzzer = self.fuzzer
        wait { await fuzzer.run(input) }
    }

    /// Runs `body` to its end and returns its result, blocking the calling thread.
    private static func wait<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<T?>(nil)
        Task {
            let value = await body()
            result.withLock { $0 = value }
            done.signal()
        }
        done.wait()
        return result.withLock { $0! }
    }
}
