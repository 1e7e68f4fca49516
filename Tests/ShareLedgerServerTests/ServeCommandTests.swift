import Foundation
import TestSupport
import Testing

/// `share-ledger serve` as the operator runs it: the binary, its tokens made with `share-ledger
/// token`, /metrics through the process-wide Prometheus bootstrap, and a clean stop on SIGTERM.
@Suite("Server: the serve command")
struct ServeCommandTests {
    /// Runs `executable` to completion; its standard output goes through a file (a read from a pipe
    /// can be interrupted by SIGCHLD, which Foundation's readDataToEndOfFile turns into a trap).
    static func capture(_ executable: URL, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let directory = TemporaryDirectory()
        let path = directory.child("stdout")
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        try output.close()
        return (process.terminationStatus, try String(contentsOfFile: path, encoding: .utf8))
    }

    static func run(_ arguments: [String]) throws -> (status: Int32, output: String) {
        try capture(builtProduct("share-ledger"), arguments)
    }

    static func get(_ url: String, query: String = "") async throws -> (status: Int, body: String) {
        // curl is not on every machine; Python's urllib is what the other client test uses.
        let text = try capture(
            URL(fileURLWithPath: "/usr/bin/env"),
            [
                "python3", "-c",
                "import sys,urllib.request,urllib.error\ntry:\n r=urllib.request.urlopen(sys.argv[1]);print(r.status);print(r.read().decode())\nexcept urllib.error.HTTPError as e:\n print(e.code);print(e.read().decode())",
                url + query,
            ]
        ).output
        let lines = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
        return (Int(lines.first ?? "") ?? 0, lines.count > 1 ? String(lines[1]) : "")
    }

    @Test(.enabled(if: PythonClientTests.python != nil, "python3 is not installed"))
    func serveStopsCleanlyOnSIGTERM() async throws {
        let directory = TemporaryDirectory()
        let path = directory.path
        #expect(try Self.run(["user", "register", "_alice", "--container", "iCloud.t", "--path", path, "--json"]).status == 0)
        let api = try Self.run(["token", "create", "--container", "iCloud.t", "--path", path, "--json"])
        let web = try Self.run(["token", "create", "--container", "iCloud.t", "--user", "_alice", "--path", path, "--json"])
        func token(_ output: String) -> String {
            ((try? JSONSerialization.jsonObject(with: Data(output.utf8))) as? [String: Any])?["token"] as? String ?? ""
        }
        let listed = try Self.run(["token", "list", "--path", path, "--json"])
        #expect(listed.status == 0 && !listed.output.contains(token(api.output)) && !listed.output.contains("tokenSHA256"))

        let server = Process()
        server.executableURL = builtProduct("share-ledger")
        server.arguments = ["serve", "--path", path, "--port", "0", "--json"]
        let outputPath = directory.child("serve.out")
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        server.standardOutput = output
        server.standardError = FileHandle.nullDevice
        try server.run()
        defer { if server.isRunning { server.terminate() } }
        // The first line says where it listens: wait for it (or for the process to end).
        var line = Data()
        while server.isRunning, !line.contains(UInt8(ascii: "\n")) {
            try await Task.sleep(for: .milliseconds(10))
            line = FileManager.default.contents(atPath: outputPath) ?? Data()
        }
        let listening = try #require((try? JSONSerialization.jsonObject(with: line)) as? [String: Any])
        let base = try #require(listening["listening"] as? String)

        #expect(try await Self.get(base + "/healthz").status == 200)
        let caller = try await Self.get(
            base + "/database/1/iCloud.t/production/public/users/caller",
            query: "?ckAPIToken=\(token(api.output))&ckWebAuthToken=\(token(web.output))")
        #expect(caller.status == 200 && caller.body.contains("_alice"), "\(caller)")
        let metrics = try await Self.get(base + "/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.body.contains("shareledger_http_requests_total") && metrics.body.contains("shareledger_ledger_events"))

        kill(server.processIdentifier, SIGTERM)
        let exited = AsyncStream.makeStream(of: Int32.self)
        server.terminationHandler = { exited.continuation.yield($0.terminationStatus) }
        if !server.isRunning { exited.continuation.yield(server.terminationStatus) }
        var iterator = exited.stream.makeAsyncIterator()
        #expect(await iterator.next() == 0)
        // The ledger was closed cleanly: it audits clean.
        let audit = try Self.run(["audit", "--path", path, "--json"])
        #expect(audit.status == 0, "\(audit.output)")
    }
}
