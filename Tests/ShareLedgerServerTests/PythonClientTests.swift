import Foundation
import ShareLedger
import TestSupport
import Testing

/// The same life from another language: Tests/ShareLedgerServerTests/python/share_life.py, written
/// from docs/openapi.yaml only, with Python's standard library (urllib). Skipped without python3.
@Suite("Server: a Python client")
struct PythonClientTests {
    static let python: String? = ["/usr/bin/python3", "/usr/local/bin/python3"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    @Test(.enabled(if: python != nil, "python3 is not installed"))
    func shareLifeFromPython() async throws {
        try await ServerHarness.run { server in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: try #require(Self.python))
            process.arguments = [packageRoot.appendingPathComponent("Tests/ShareLedgerServerTests/python/share_life.py").path]
            process.environment = [
                "SL_BASE_URL": server.baseURL, "SL_CONTAINER": ServerHarness.container, "SL_API_TOKEN": server.apiToken,
                "SL_OWNER_TOKEN": server.webTokens["_alice"] ?? "", "SL_PARTICIPANT_TOKEN": server.webTokens["_bob"] ?? "",
                "SL_PARTICIPANT_EMAIL": "bob@example.com", "SL_OWNER_NAME": "_alice",
            ]
            // Output through a file: a read from a pipe can be interrupted by SIGCHLD (a trap in Foundation).
            let errorsPath = server.directory.child("python.err")
            _ = FileManager.default.createFile(atPath: errorsPath, contents: nil)
            let errors = try FileHandle(forWritingTo: URL(fileURLWithPath: errorsPath))
            process.standardError = errors
            process.standardOutput = FileHandle.nullDevice
            let finished = AsyncStream.makeStream(of: Int32.self)
            process.terminationHandler = { finished.continuation.yield($0.terminationStatus) }
            try process.run()
            var iterator = finished.stream.makeAsyncIterator()
            let status = await iterator.next()
            try errors.close()
            let message = (try? String(contentsOfFile: errorsPath, encoding: .utf8)) ?? ""
            #expect(status == 0, "\(message)")
            let report = try server.ledger.audit(scratchPath: server.directory.child("audit-scratch"))
            #expect(report.ok, "\(report.problems)")
        }
    }
}
