import Foundation
import ShareLedger
import ShareLedgerAudit
@testable import ShareLedgerServer
import Synchronization
import TestSupport
import Testing

/// Graceful shutdown with a request in flight: the request is held inside the server (a test hook,
/// before its endpoint runs) until shutdown has begun, then let go. It must still be answered, its
/// change committed, and the ledger closed cleanly (it audits clean when opened again). Every wait is
/// on state, none on time.
@Suite("Server: graceful shutdown")
struct GracefulShutdownTests {
    @Test(.timeLimit(.minutes(2)))  // a safety net for a regression that would hang; no wait here is on time
    func inFlightRequestIsAnsweredAndTheLedgerClosesCleanly() async throws {
        let arrived = AsyncStream.makeStream(of: Void.self)
        let shutdownBegan = AsyncStream.makeStream(of: Void.self)
        var hooks = LedgerServer.TestHooks()
        hooks.beforeEndpoint = { subpath in
            guard subpath == "zones/modify" else { return }
            arrived.continuation.yield()
            // Held here until the server has begun its graceful shutdown.
            var iterator = shutdownBegan.stream.makeAsyncIterator()
            _ = await iterator.next()
        }
        hooks.shutdownBegan = { shutdownBegan.continuation.finish() }
        let kept = Mutex<TemporaryDirectory?>(nil)

        try await ServerHarness.run(hooks: hooks) { server in
            kept.withLock { $0 = server.directory }
            let headBefore = try server.ledger.log.head().position.rawValue
            let request = Task {
                try await server.post(
                    "zones/modify", as: "_alice",
                    ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Late"]]]]])
            }
            var arrivals = arrived.stream.makeAsyncIterator()
            _ = await arrivals.next()
            // The request is in the server, not yet at the ledger: begin the graceful shutdown.
            await server.shutdown()
            let reply = try await request.value
            #expect(reply.status == 200, "\(reply.text)")
            let zones = try #require(reply.json["zones"] as? [[String: Any]])
            #expect((zones.first?["zoneID"] as? [String: Any])?["zoneName"] as? String == "Late")
            #expect(try server.ledger.log.head().position.rawValue > headBefore)
        }

        // The harness has closed the ledger once the server returned: open it again and audit.
        let directory = try #require(kept.withLock { $0 })
        let ledger = try ShareLedger.open(ShareLedger.Configuration(path: directory.path))
        let zones = try ledger.container(ServerHarness.container, userRecordName: "_alice").recordZones()
        #expect(zones.contains { $0.zoneID.zoneName == "Late" })
        let report = try LedgerAudit(ledger).audit(scratchPath: directory.child("audit-scratch"))
        #expect(report.ok, "\(report.problems)")
        await ledger.close()
    }
}
