import Foundation
import LMDB
import PropertyBased
@testable import ShareLedger
@testable import ShareLedgerAudit
import TestSupport
import Synchronization
import Testing

/// Replaying the log reproduces the read models: random sequences of valid and invalid share
/// actions, then a rebuild of every read model from the log into a scratch ledger, compared entry
/// by entry with the live ones.
@Suite("Replay reproduces the read models")
struct ReplayPropertyTests {
    static let users = ["_alice", "_bob", "_carol", "_dave", "_ghost"]
    static let emails = ["alice@example.com", "bob@example.com", "carol@example.com", "eve@nowhere.org", "frank@nowhere.org"]
    static let records = ["r0", "r1", "r2", "r3", "r4"]
    static let zones = ["Z0", "Z1"]

    /// Runs one random action described by three numbers; refused actions are part of the test.
    static func perform(_ f: SharingFixture, _ op: Int, _ a: Int, _ b: Int, codes: inout [String: Int]) async {
        let user = users[a % users.count]
        let container = f.as_(user)
        let zone = RecordZoneID(zoneName: zones[b % zones.count])
        let owner = users[b % 3]
        let ownerZone = RecordZoneID(zoneName: zones[a % zones.count], ownerName: owner)
        let record = RecordID(recordName: records[b % records.count], zoneID: zone)
        // Shares: the URL of a live share of any user (or a made-up one).
        let urls = (try? (0..<3).flatMap { try f.as_(users[$0]).ownedShares().map(\.url) }) ?? []
        let url = urls.isEmpty || b % 7 == 6 ? URL(string: "https://share.localhost/share/0AAAAAAAAAAAAAAAAAAAAAAAAA")! : urls[b % urls.count]
        let permission: Share.Participant.Permission = [.none, .readOnly, .readWrite, .unknown][(a / 3) % 4]
        let outcome: LedgerError.Code? = await errorCode { () async throws -> Void in
            switch op % 20 {
            case 0: _ = try await container.save(RecordZone(zoneID: zone))
            case 1, 2:
                var new = Record(recordType: "Item", recordID: record, fields: ["n": .int64(Int64(a))])
                if b % 3 != 0 { new.parent = RecordID(recordName: records[a % records.count], zoneID: zone) }
                if let existing = try? container.record(for: record) {
                    new.recordChangeTag = existing.recordChangeTag
                }
                _ = try await container.save(new)
            case 3: try await container.deleteRecord(withID: record)
            case 4:
                // Share an existing record (often refused), or a new one (usually fine).
                var root = record
                if b % 2 == 1 {
                    root = RecordID(recordName: "fresh\(a % 50)", zoneID: zone)
                    _ = try? await container.save(Record(recordType: "Item", recordID: root))
                }
                _ = try await container.share(rootRecord: root, title: "t\(a)", publicPermission: a % 4 == 0 ? .readOnly : .none)
            case 5: _ = try await container.share(recordZoneID: zone, publicPermission: permission)
            case 6, 7:
                let lookup = b % 2 == 0 ? LookupInfo(emailAddress: emails[a % emails.count]) : LookupInfo(userRecordID: RecordID(userRecordName: users[a % users.count]))
                _ = try await f.as_(owner).addParticipant(lookup, permission: permission, role: a % 5 == 0 ? .administrator : .privateUser, to: url)
            case 8, 9: _ = try await container.accept(try await container.shareMetadata(for: url))
            case 10: _ = try await container.shareMetadatas(for: [url], shouldFetchRootRecord: a % 2 == 0, rootRecordDesiredKeys: a % 3 == 0 ? [] : nil)
            case 11:
                let share = try f.as_(owner).share(for: url)
                if let target = share.participants.first(where: { $0.role != .owner }) {
                    if a % 2 == 0 {
                        _ = try await f.as_(owner).removeParticipant(target.participantID, from: url)
                    } else {
                        _ = try await f.as_(owner).setPermission(permission, forParticipant: target.participantID, in: url)
                    }
                }
            case 12:
                // Leave a share the user is in (or, without one, the random URL: refused).
                let mine = (try? container.participatingShares()) ?? []
                try await container.leaveShare(mine.isEmpty ? url : mine[b % mine.count].url)
            case 13: _ = try await f.as_(owner).setPublicPermission(permission, for: url)
            case 14:
                if a % 3 == 0 { try await f.as_(owner).deleteShare(url) } else { try await container.deleteRecordZone(withID: ownerZone) }
            case 16:
                if a % 5 == 0 {
                    // A one-time URL participant, and its URL accepted by the acting user (or not).
                    let share = try await f.as_(owner).addParticipant(.oneTimeURLParticipant(), to: url)
                    let id = share.participants.first {
                        $0.userIdentity.userRecordID == nil && share.oneTimeURL(for: $0.participantID) != nil
                    }?.participantID
                    if b % 2 == 0, let id, let oneTime = share.oneTimeURL(for: id) {
                        _ = try await container.accept(try await container.shareMetadata(for: oneTime))
                    }
                } else {
                    _ = try await f.as_(owner).setAllowsAccessRequests(a % 3 != 0, for: url)
                }
            case 17:
                // Ask to join (often refused: requests off, blocked, unknown URL: all alike), mostly a
                // share that takes requests when there is one.
                let open = (try? (0..<3).flatMap { try f.as_(users[$0]).ownedShares().filter(\.allowsAccessRequests).map(\.url) }) ?? []
                let target = open.isEmpty || a % 4 == 0 ? url : open[b % open.count]
                if let result = try await container.requestShareAccess(for: [target])[target] { try result.get() }
            case 18:
                // Answer a pending request, when some share has one.
                let pending = (try? (0..<3).flatMap { try f.as_(users[$0]).ownedShares().filter { !$0.requesters.isEmpty } }) ?? []
                var share = pending.isEmpty ? try f.as_(owner).share(for: url) : pending[b % pending.count]
                let owner = share.owner.userIdentity.userRecordID?.recordName ?? owner
                if pending.isEmpty, a % 3 != 0 {
                    // No request anywhere: let someone who is not in the share ask first (answering is the action).
                    let members = Set(share.participants.filter { $0.acceptanceStatus != .removed }.compactMap(\.userIdentity.userRecordID?.recordName))
                    if let stranger = users.prefix(4).first(where: { !members.contains($0) }) {
                        _ = try? await f.as_(owner).setAllowsAccessRequests(true, for: share.url)
                        _ = try? await f.as_(stranger).requestShareAccess(for: [share.url])
                        share = try f.as_(owner).share(for: share.url)
                    }
                }
                let url = share.url
                if let requester = share.requesters.first {
                    if a % 2 == 0 {
                        _ = try await f.as_(owner).approveRequesters([requester], permission: permission, for: url)
                    } else {
                        _ = try await f.as_(owner).denyRequesters([requester], for: url)
                    }
                } else {
                    _ = try await f.as_(owner).denyRequesters([requesterValue(user)], for: url)
                }
            case 19:
                let blocking = (try? (0..<3).flatMap { try f.as_(users[$0]).ownedShares().filter { !$0.blockedIdentities.isEmpty } }) ?? []
                let share = blocking.isEmpty || a % 3 != 0 ? try f.as_(owner).share(for: url) : blocking[b % blocking.count]
                let owner = share.owner.userIdentity.userRecordID?.recordName ?? owner
                let url = share.url
                if a % 3 != 0 || share.blockedIdentities.isEmpty {
                    _ = try await f.as_(owner).blockIdentities([identityValue(user)], for: url)
                } else {
                    _ = try await f.as_(owner).unblockIdentities([share.blockedIdentities[b % share.blockedIdentities.count]], for: url)
                }
            default:
                if a % 2 == 0 {
                    try await f.ledger.completeResidualTasks(limit: 1 + b % 3)
                } else {
                    let v = try await container.requestParticipantVerification(for: url, lookupInfo: LookupInfo(emailAddress: emails[3 + b % 2]))
                    _ = try await container.verifyParticipant(for: url, code: v.code)
                }
            }
        }
        codes["\(op % 20):" + (outcome?.name ?? "ok"), default: 0] += 1
    }

    @Test("random valid and invalid share actions: a rebuild from the log gives byte-identical read models")
    func replayReproducesReadModels() async throws {
        let codes = Counts()
        let body: @Sendable ([Int]) async throws -> Void = { numbers in
            let f = try await SharingFixture(seed: UInt64(numbers.count))
            try await f.ledger.registerUser("_dave", in: SharingFixture.container, phoneNumber: "+44 20 7946 0000")
            // A starting state for the actions to work on: zones and a small hierarchy per user.
            for user in Self.users.prefix(3) {
                for zone in Self.zones { _ = try await f.as_(user).save(RecordZone(zoneID: RecordZoneID(zoneName: zone))) }
                let zone = RecordZoneID(zoneName: "Z0")
                _ = try await f.as_(user).save(Record(recordType: "Item", recordID: RecordID(recordName: "r0", zoneID: zone)))
                _ = try await f.as_(user).save(
                    Record(recordType: "Item", recordID: RecordID(recordName: "r1", zoneID: zone), parent: RecordID(recordName: "r0", zoneID: zone)))
                _ = try await f.as_(user).share(rootRecord: RecordID(recordName: "r0", zoneID: zone), publicPermission: user == "_carol" ? .readWrite : .none)
            }
            var local: [String: Int] = [:]
            var index = 0
            while index + 2 < numbers.count {
                await Self.perform(f, numbers[index], numbers[index + 1], numbers[index + 2], codes: &local)
                index += 3
            }
            codes.add(local)
            let comparison = try LedgerAudit(f.ledger).verifyReadModels(scratchPath: f.dir.child("rebuilt"))
            #expect(comparison.matches, "differences: \(comparison.differences)")
            let stats = try f.ledger.statistics()
            #expect(stats.acceptedParticipants <= stats.participants)
            // Invariants the read models must keep.
            for user in Self.users.prefix(3) {
                for share in try f.as_(user).ownedShares() {
                    #expect(share.participants.filter { $0.acceptanceStatus != .removed }.count <= 100)
                    #expect(share.owner.userIdentity.userRecordID?.recordName == user)
                }
            }
            await f.ledger.close()
        }
        // Fixed sequences first (coverage below rests on them), then random ones.
        for numbers in fixedSequences(count: 30, length: 30...150) { try await body(numbers) }
        await propertyCheck(count: 40, input: Gen.int(in: 0...1_000_000).array(of: 30...150)) { numbers in try await body(numbers) }
        // The generator must reach both successes and refusals, or the property proves little.
        let totals = codes.value
        // Every kind of action succeeded at least once, and refusals of several kinds happened.
        for op in 0..<20 {
            #expect(totals.keys.contains("\(op):ok"), "action \(op) never succeeded: \(totals)")
        }
        #expect(Set(totals.keys.map { $0.split(separator: ":")[1] }).count >= 6, "outcomes seen: \(totals)")
    }

    @Test("a corrupted read model is caught by the comparison")
    func corruptionIsCaught() async throws {
        let f = try await SharingFixture()
        try await f.makeHierarchy()
        #expect(try LedgerAudit(f.ledger).verifyReadModels(scratchPath: f.dir.child("r1")).matches)
        // Change one read-model value behind the ledger's back.
        try f.ledger.log.store.environment.write { txn in
            try txn.put(f.ledger.log.store.models.counters, key: Array("shares".utf8), value: [0, 0, 0, 0, 0, 0, 0, 9])
        }
        let comparison = try LedgerAudit(f.ledger).verifyReadModels(scratchPath: f.dir.child("r2"))
        #expect(!comparison.matches)
        #expect(comparison.differences.map(\.database) == ["rm_counters"])
        await f.ledger.close()
    }
}

/// Outcome counts gathered across property runs.
final class Counts: Sendable {
    private let counts = Mutex<[String: Int]>([:])
    func add(_ other: [String: Int]) { counts.withLock { c in other.forEach { c[$0.key, default: 0] += $0.value } } }
    var value: [String: Int] { counts.withLock { $0 } }
}
