import Foundation
import NIOHTTP1
import ShareLedger
import TestSupport
import Testing

/// `records/changes` and `zones/changes` with sync tokens: the owner through the private database,
/// a participant who accepted through the shared one.
@Suite("Server: records/changes and zones/changes")
struct SyncTests {
    typealias JSON = [String: Any]

    static func records(_ reply: ServerHarness.Reply) -> [JSON] { reply.json["records"] as? [JSON] ?? [] }
    static func changed(_ reply: ServerHarness.Reply) -> [String] {
        records(reply).filter { $0["deleted"] as? Bool != true }.compactMap { $0["recordName"] as? String }
    }
    static func deleted(_ reply: ServerHarness.Reply) -> [String] {
        records(reply).filter { $0["deleted"] as? Bool == true }.compactMap { $0["recordName"] as? String }
    }
    static func zoneNames(_ reply: ServerHarness.Reply, deleted: Bool) -> [String] {
        (reply.json["zones"] as? [JSON] ?? []).filter { ($0["deleted"] as? Bool ?? false) == deleted }
            .compactMap { ($0["zoneID"] as? JSON)?["zoneName"] as? String }
    }

    static func create(_ server: ServerHarness, _ names: [String], parent: String? = nil) async throws {
        let operations: [JSON] = names.map { name in
            var record: JSON = ["recordName": name, "recordType": "Note", "zoneID": ["zoneName": "Z"], "fields": ["title": ["value": name]]]
            if let parent { record["parent"] = ["recordName": parent] }
            return ["operationType": "create", "record": record]
        }
        let reply = try await server.post("records/modify", as: "_alice", ["operations": operations])
        #expect(reply.status == 200 && !reply.text.contains("serverErrorCode"), "\(reply.text)")
    }

    static func delete(_ server: ServerHarness, _ name: String) async throws {
        let reply = try await server.post(
            "records/modify", as: "_alice",
            ["operations": [["operationType": "forceDelete", "record": ["recordName": name, "zoneID": ["zoneName": "Z"]]]]])
        #expect(reply.status == 200 && !reply.text.contains("serverErrorCode"), "\(reply.text)")
    }

    @Test func theOwnerSyncsAZoneWithTokensAndPages() async throws {
        try await ServerHarness.run { server in
            try await AtomicModifyTests.makeZones(server, ["Z"])
            try await Self.create(server, ["a", "b", "c"])
            let first = try await server.post("records/changes", as: "_alice", ["zoneID": ["zoneName": "Z"]])
            #expect(first.status == 200, "\(first.text)")
            #expect(Self.changed(first) == ["a", "b", "c"] && first.json["moreComing"] as? Bool == false, "\(first.text)")
            #expect((first.json["zoneID"] as? JSON)?["ownerRecordName"] as? String == "_alice")
            let token = try #require(first.json["syncToken"] as? String)

            try await Self.delete(server, "b")
            try await Self.create(server, ["d"])
            let second = try await server.post("records/changes", as: "_alice", ["zoneID": ["zoneName": "Z"], "syncToken": token])
            #expect(Self.changed(second) == ["d"] && Self.deleted(second) == ["b"], "\(second.text)")
            #expect(Self.records(second).first { $0["deleted"] as? Bool == true }?.keys.sorted() == ["deleted", "recordName"])

            // resultsLimit pages, moreComing until the last.
            let page = try await server.post("records/changes", as: "_alice", ["zoneID": ["zoneName": "Z"], "resultsLimit": 2])
            #expect(Self.changed(page).count == 2 && page.json["moreComing"] as? Bool == true, "\(page.text)")
            let rest = try await server.post(
                "records/changes", as: "_alice",
                ["zoneID": ["zoneName": "Z"], "resultsLimit": 2, "syncToken": page.json["syncToken"] as? String ?? ""])
            #expect(Self.changed(rest).count == 1 && rest.json["moreComing"] as? Bool == false, "\(rest.text)")

            let missing = try await server.post("records/changes", as: "_alice", ["zoneID": ["zoneName": "Nope"]])
            #expect(missing.status == 404 && missing.json["serverErrorCode"] as? String == "ZONE_NOT_FOUND", "\(missing.text)")
            let noZone = try await server.post("records/changes", as: "_alice", [:])
            #expect(noZone.status == 400, "\(noZone.text)")
        }
    }

    @Test func aBadSyncTokenIsAClearError() async throws {
        try await ServerHarness.run { server in
            try await AtomicModifyTests.makeZones(server, ["Z", "Y"])
            try await Self.create(server, ["a"])
            let first = try await server.post("records/changes", as: "_alice", ["zoneID": ["zoneName": "Z"]])
            let token = try #require(first.json["syncToken"] as? String)
            var tampered = Array(token)
            tampered[10] = tampered[10] == "A" ? "B" : "A"
            for bad in ["garbage", String(tampered), String(token.dropLast())] {
                let reply = try await server.post("records/changes", as: "_alice", ["zoneID": ["zoneName": "Z"], "syncToken": bad])
                #expect(reply.status == 400 && reply.json["serverErrorCode"] as? String == "BAD_REQUEST", "\(reply.text)")
                #expect((reply.json["reason"] as? String)?.hasPrefix("changeTokenExpired") == true, "\(reply.text)")
            }
            // Another zone's token.
            let other = try await server.post("records/changes", as: "_alice", ["zoneID": ["zoneName": "Y"], "syncToken": token])
            #expect(other.status == 400 && (other.json["reason"] as? String)?.hasPrefix("changeTokenExpired") == true, "\(other.text)")
            let zones = try await server.post("zones/changes", as: "_alice", ["syncToken": token])
            #expect(zones.status == 400 && (zones.json["reason"] as? String)?.hasPrefix("changeTokenExpired") == true, "\(zones.text)")
        }
    }

    @Test func aParticipantSyncsTheSharedZoneThroughTheSharedDatabase() async throws {
        try await ServerHarness.run { server in
            try await AtomicModifyTests.makeZones(server, ["Z"])
            try await Self.create(server, ["root"])
            try await Self.create(server, ["child"], parent: "root")
            try await Self.create(server, ["unshared"])
            let alice = server.ledger.container(ServerHarness.container, userRecordName: "_alice")
            let bob = server.ledger.container(ServerHarness.container, userRecordName: "_bob")
            let share = try await alice.share(rootRecord: RecordID(recordName: "root", zoneID: RecordZoneID(zoneName: "Z")))
            _ = try await alice.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_bob")), permission: .readOnly, to: share.url)
            let zone: JSON = ["zoneName": "Z", "ownerRecordName": "_alice"]
            let before = try await server.post("records/changes", database: "shared", as: "_bob", ["zoneID": zone])
            #expect(before.status == 404 && before.json["serverErrorCode"] as? String == "ZONE_NOT_FOUND", "\(before.text)")
            let bobStart = try await server.post("zones/changes", database: "shared", as: "_bob", [:])
            #expect(Self.zoneNames(bobStart, deleted: false).isEmpty, "\(bobStart.text)")

            _ = try await bob.accept(try await bob.shareMetadata(for: share.url))
            try await server.ledger.waitForResidualTasks(timeout: .seconds(120))
            let joined = try await server.post(
                "zones/changes", database: "shared", as: "_bob", ["syncToken": bobStart.json["syncToken"] as? String ?? ""])
            #expect(Self.zoneNames(joined, deleted: false) == ["Z"], "\(joined.text)")

            let first = try await server.post("records/changes", database: "shared", as: "_bob", ["zoneID": zone])
            let sharesFirst = Self.records(first).filter { $0["recordType"] as? String == "cloudkit.share" }
            #expect(first.status == 200 && Set(Self.changed(first)) == ["root", "child", share.recordID.recordName], "\(first.text)")
            #expect(sharesFirst.first?["shortGUID"] as? String == share.token.text, "the share record comes with the zone: \(first.text)")
            try await Self.delete(server, "child")
            try await Self.delete(server, "unshared")
            try await Self.create(server, ["more"], parent: "root")
            let second = try await server.post(
                "records/changes", database: "shared", as: "_bob", ["zoneID": zone, "syncToken": first.json["syncToken"] as? String ?? ""])
            #expect(Self.changed(second) == ["more"] && Self.deleted(second) == ["child"], "\(second.text)")

            // Not through the private database, which holds only Bob's own zones.
            let privately = try await server.post("records/changes", database: "private", as: "_bob", ["zoneID": zone])
            #expect(privately.status == 404 && privately.json["serverErrorCode"] as? String == "ZONE_NOT_FOUND", "\(privately.text)")
            // And the owner does not reach her own zone through the shared database.
            let ownShared = try await server.post("records/changes", database: "shared", as: "_alice", ["zoneID": ["zoneName": "Z"]])
            #expect(ownShared.status == 404, "\(ownShared.text)")
        }
    }

    @Test func zoneChangesInThePrivateDatabase() async throws {
        try await ServerHarness.run { server in
            try await AtomicModifyTests.makeZones(server, ["Z", "Quiet", "Gone"])
            let first = try await server.post("zones/changes", as: "_alice", [:])
            #expect(first.status == 200 && Set(Self.zoneNames(first, deleted: false)) == ["Z", "Quiet", "Gone"], "\(first.text)")
            #expect(first.json["moreComing"] as? Bool == false)
            let token = try #require(first.json["syncToken"] as? String)
            try await Self.create(server, ["a"])
            let deleted = try await server.post(
                "zones/modify", as: "_alice", ["operations": [["operationType": "delete", "zone": ["zoneID": ["zoneName": "Gone"]]]]])
            #expect(deleted.status == 200, "\(deleted.text)")
            let second = try await server.post("zones/changes", as: "_alice", ["syncToken": token])
            #expect(Self.zoneNames(second, deleted: false) == ["Z"] && Self.zoneNames(second, deleted: true) == ["Gone"], "\(second.text)")
            let page = try await server.post("zones/changes", as: "_alice", ["resultsLimit": 1])
            #expect(Self.zoneNames(page, deleted: false).count == 1 && page.json["moreComing"] as? Bool == true, "\(page.text)")
            let publicDatabase = try await server.post("zones/changes", database: "public", as: "_alice", [:])
            #expect(publicDatabase.status == 400, "\(publicDatabase.text)")
        }
    }
}
