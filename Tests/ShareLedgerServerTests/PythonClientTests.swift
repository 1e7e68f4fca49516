import Foundation
import ShareLedger
import ShareLedgerAudit
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
            let run = try await runProcess(
                URL(fileURLWithPath: try #require(Self.python)),
                [packageRoot.appendingPathComponent("Tests/ShareLedgerServerTests/python/share_life.py").path],
                environment: [
                    "SL_BASE_URL": server.baseURL, "SL_CONTAINER": ServerHarness.container, "SL_API_TOKEN": server.apiToken,
                    "SL_OWNER_TOKEN": server.webTokens["_alice"] ?? "", "SL_PARTICIPANT_TOKEN": server.webTokens["_bob"] ?? "",
                    "SL_PARTICIPANT_EMAIL": "bob@example.com", "SL_OWNER_NAME": "_alice",
                ])
            #expect(run.exited(0), "\(run.summary)")
            let report = try LedgerAudit(server.ledger).audit(scratchPath: server.directory.child("audit-scratch"))
            #expect(report.ok, "\(report.problems)")
        }
    }
}
