import Foundation
import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// `records/modify` with `atomic` (CloudKit's default, true): a zone's record operations are all or
/// nothing; the failed one answers its error, the others `ATOMIC_ERROR`; zones are independent;
/// `atomic: false` applies each on its own; a share among several operations cannot be atomic.
@Suite("Server: atomic records/modify")
struct AtomicModifyTests {
    static func create(_ name: String, zone: String, parent: String? = nil) -> [String: Any] {
        var record: [String: Any] = [
            "recordName": name, "recordType": "Note", "zoneID": ["zoneName": zone],
            "fields": ["title": ["value": name, "type": "STRING"]],
        ]
        if let parent { record["parent"] = ["recordName": parent] }
        return ["operationType": "create", "record": record]
    }

    static func codes(_ reply: ServerHarness.Reply) -> [String] {
        ((reply.json["records"] as? [[String: Any]]) ?? []).map { $0["serverErrorCode"] as? String ?? "OK" }
    }

    static func makeZones(_ server: ServerHarness, _ names: [String]) async throws {
        let operations = names.map { ["operationType": "create", "zone": ["zoneID": ["zoneName": $0]]] }
        #expect(try await server.post("zones/modify", as: "_alice", ["operations": operations]).status == 200)
    }

    static func exists(_ server: ServerHarness, _ name: String, zone: String) throws -> Bool {
        let id = RecordID(recordName: name, zoneID: RecordZoneID(zoneName: zone))
        return (try? server.ledger.container(ServerHarness.container, userRecordName: "_alice").record(for: id)) != nil
    }

    @Test func aFailedOperationUndoesTheOthersOfItsZoneOnly() async throws {
        try await ServerHarness.run { server in
            try await Self.makeZones(server, ["A", "B"])
            // No `atomic` key: CloudKit's default is true. In zone A the second record's parent is
            // missing; zone B has nothing wrong.
            let reply = try await server.post(
                "records/modify", as: "_alice",
                [
                    "operations": [
                        Self.create("a1", zone: "A"), Self.create("b1", zone: "B"),
                        Self.create("a2", zone: "A", parent: "missing"), Self.create("a3", zone: "A"),
                    ]
                ])
            #expect(reply.status == 200, "\(reply.text)")
            #expect(Self.codes(reply) == ["ATOMIC_ERROR", "OK", "VALIDATING_REFERENCE_ERROR", "ATOMIC_ERROR"], "\(reply.text)")
            #expect(try !Self.exists(server, "a1", zone: "A") && !Self.exists(server, "a3", zone: "A"))
            #expect(try Self.exists(server, "b1", zone: "B"))

            // The same request with every operation sound: all saved.
            let sound = try await server.post(
                "records/modify", as: "_alice",
                ["atomic": true, "operations": [Self.create("a1", zone: "A"), Self.create("a2", zone: "A", parent: "a1")]])
            #expect(Self.codes(sound) == ["OK", "OK"], "\(sound.text)")
            #expect(try Self.exists(server, "a2", zone: "A"))

            let report = try LedgerAudit(server.ledger).audit(scratchPath: server.directory.child("audit-scratch"))
            #expect(report.ok, "\(report.problems)")
        }
    }

    /// Atomic commands queued behind a paused writer, so that they commit in one group with others:
    /// a failed one (its nested transaction aborted) and a sound one (kept) between plain saves;
    /// every plain save lands, the log's chain and the read models audit clean.
    @Test func atomicCommandsShareAGroupCommit() async throws {
        try await ServerHarness.run { server in
            try await Self.makeZones(server, ["A", "B"])
            let alice = server.ledger.container(ServerHarness.container, userRecordName: "_alice")
            func record(_ name: String, _ zone: String, parent: String? = nil) -> Record {
                let zoneID = RecordZoneID(zoneName: zone)
                return Record(
                    recordType: "Note", recordID: RecordID(recordName: name, zoneID: zoneID),
                    parent: parent.map { RecordID(recordName: $0, zoneID: zoneID) })
            }
            server.ledger.log.setWriterPaused(true)
            let batches: [[RecordChange]] = [
                [.save(record("p1", "B"))],
                [.save(record("f1", "A")), .save(record("f2", "A", parent: "missing"))],
                [.save(record("p2", "B"))],
                [.save(record("k1", "A")), .save(record("k2", "A", parent: "k1"))],
                [.save(record("p3", "B"))],
            ]
            let results = Task {
                try await withThrowingTaskGroup(of: (Int, [Result<Record?, LedgerError>]).self) { group in
                    for (index, changes) in batches.enumerated() {
                        group.addTask { (index, try await alice.modifyRecords(changes)) }
                    }
                    return try await group.reduce(into: [Int: [Result<Record?, LedgerError>]]()) { $0[$1.0] = $1.1 }
                }
            }
            while server.ledger.writerQueueDepth < batches.count { await Task.yield() }
            server.ledger.log.setWriterPaused(false)
            let answered = try await results.value
            let failed = try #require(answered[1])
            if case .failure(let error) = failed[0] { #expect(error.code == .batchRequestFailed) } else { Issue.record("f1 was saved") }
            if case .failure(let error) = failed[1] { #expect(error.code == .referenceViolation) } else { Issue.record("f2 was saved") }
            for name in ["p1", "p2", "p3", "k1", "k2"] {
                #expect(try Self.exists(server, name, zone: name.hasPrefix("p") ? "B" : "A"), "\(name)")
            }
            #expect(try !Self.exists(server, "f1", zone: "A") && !Self.exists(server, "f2", zone: "A"))
            let report = try LedgerAudit(server.ledger).audit(scratchPath: server.directory.child("audit-scratch"))
            #expect(report.ok, "\(report.problems)")
        }
    }

    @Test func notAtomicAppliesEachOperationOnItsOwn() async throws {
        try await ServerHarness.run { server in
            try await Self.makeZones(server, ["A"])
            let reply = try await server.post(
                "records/modify", as: "_alice",
                [
                    "atomic": false,
                    "operations": [Self.create("a1", zone: "A"), Self.create("a2", zone: "A", parent: "missing")],
                ])
            #expect(Self.codes(reply) == ["OK", "VALIDATING_REFERENCE_ERROR"], "\(reply.text)")
            #expect(try Self.exists(server, "a1", zone: "A") && !Self.exists(server, "a2", zone: "A"))
        }
    }

    @Test func atomicRefusesAShareAmongSeveralOperations() async throws {
        try await ServerHarness.run { server in
            try await Self.makeZones(server, ["A"])
            #expect(try await server.post("records/modify", as: "_alice", ["operations": [Self.create("root", zone: "A")]]).status == 200)
            let head = try server.ledger.log.head().position.rawValue
            let share: [String: Any] = [
                "operationType": "create",
                "record": ["recordType": "cloudkit.share", "zoneID": ["zoneName": "A"], "forRecord": ["recordName": "root"]],
            ]
            let refused = try await server.post(
                "records/modify", as: "_alice", ["atomic": true, "operations": [Self.create("other", zone: "A"), share]])
            #expect(refused.status == 400 && refused.json["serverErrorCode"] as? String == "BAD_REQUEST", "\(refused.text)")
            #expect(try server.ledger.log.head().position.rawValue == head)
            // Without `atomic`, the same request is applied one operation at a time.
            let applied = try await server.post("records/modify", as: "_alice", ["operations": [Self.create("other", zone: "A"), share]])
            #expect(Self.codes(applied) == ["OK", "OK"], "\(applied.text)")
        }
    }
}
