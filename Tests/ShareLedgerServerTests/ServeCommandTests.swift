import Foundation
import TestSupport
import Testing

/// `share-ledger serve` as the operator runs it: the binary, its tokens made with `share-ledger
/// token`, /metrics through the process-wide Prometheus bootstrap, and a clean stop on SIGTERM.
@Suite("Server: the serve command")
struct ServeCommandTests {
    /// Runs `executable` to completion, awaited off the cooperative pool (TestSupport's runner).
    static func capture(_ executable: URL, _ arguments: [String]) async throws -> (status: Int32, output: String) {
        let run = try await runProcess(executable, arguments)
        return (run.status, run.stdout)
    }

    static func run(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        try await capture(builtProduct("share-ledger"), arguments)
    }

    static func get(_ url: String, query: String = "", bearer: String = "") async throws -> (status: Int, body: String) {
        // curl is not on every machine; Python's urllib is what the other client test uses.
        let text = try await capture(
            URL(fileURLWithPath: "/usr/bin/env"),
            [
                "python3", "-c",
                "import sys,urllib.request,urllib.error\nq=urllib.request.Request(sys.argv[1])\nif sys.argv[2]: q.add_header('Authorization','Bearer '+sys.argv[2])\ntry:\n r=urllib.request.urlopen(q);print(r.status);print(r.read().decode())\nexcept urllib.error.HTTPError as e:\n print(e.code);print(e.read().decode())",
                url + query, bearer,
            ]
        ).output
        let lines = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
        return (Int(lines.first ?? "") ?? 0, lines.count > 1 ? String(lines[1]) : "")
    }

    @Test(.enabled(if: PythonClientTests.python != nil, "python3 is not installed"))
    func serveStopsCleanlyOnSIGTERM() async throws {
        let directory = TemporaryDirectory()
        let path = directory.path
        #expect(try await Self.run(["user", "register", "_alice", "--container", "iCloud.t", "--path", path, "--json"]).status == 0)
        let api = try await Self.run(["token", "create", "--container", "iCloud.t", "--path", path, "--json"])
        let web = try await Self.run(["token", "create", "--container", "iCloud.t", "--user", "_alice", "--path", path, "--json"])
        func token(_ output: String) -> String {
            ((try? JSONSerialization.jsonObject(with: Data(output.utf8))) as? [String: Any])?["token"] as? String ?? ""
        }
        let listed = try await Self.run(["token", "list", "--path", path, "--json"])
        #expect(listed.status == 0 && !listed.output.contains(token(api.output)) && !listed.output.contains("tokenSHA256"))

        let operatorToken = try await Self.run(["token", "create", "--operator", "on call", "--path", path, "--json"])
        #expect(operatorToken.status == 0 && token(operatorToken.output).hasPrefix("slo_"), "\(operatorToken.output)")
        let listedAgain = try await Self.run(["token", "list", "--path", path])
        #expect(listedAgain.output.contains("operatorToken  operator on call") && !listedAgain.output.contains(token(operatorToken.output)))

        let outputPath = directory.child("serve.out")
        let server = try ChildProcess(builtProduct("share-ledger"), ["serve", "--path", path, "--port", "0", "--json"], stdout: outputPath)
        defer { server.send(SIGKILL) }  // if the test gives up before its end
        // The first line says where it listens: wait for it (or for the process to end).
        var line = Data()
        try await waitUntil("serve printed where it listens") {
            line = FileManager.default.contents(atPath: outputPath) ?? Data()
            return !server.isRunning || line.contains(UInt8(ascii: "\n"))
        }
        let listening = try #require((try? JSONSerialization.jsonObject(with: line)) as? [String: Any])
        let base = try #require(listening["listening"] as? String)

        #expect(try await Self.get(base + "/healthz").status == 200)
        let caller = try await Self.get(
            base + "/database/1/iCloud.t/production/public/users/caller",
            query: "?ckAPIToken=\(token(api.output))&ckWebAuthToken=\(token(web.output))")
        #expect(caller.status == 200 && caller.body.contains("_alice"), "\(caller)")
        // The report pages: an operator token made with `token create --operator` opens them; none gets 401.
        #expect(try await Self.get(base + "/reports").status == 401)
        let index = try await Self.get(base + "/reports", bearer: token(operatorToken.output))
        #expect(index.status == 200 && index.body.contains("action=\"/reports/share\""), "\(index)")
        let metrics = try await Self.get(base + "/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.body.contains("shareledger_http_requests_total") && metrics.body.contains("shareledger_ledger_events"))

        server.send(SIGTERM)
        let ended = await server.exit()
        #expect(ended.exited(0), "\(ended.summary)")
        // The ledger was closed cleanly: it audits clean.
        let audit = try await Self.run(["audit", "--path", path, "--json"])
        #expect(audit.status == 0, "\(audit.output)")
    }
}
