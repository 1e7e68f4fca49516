import Foundation
import PropertyBased
@testable import ShareLedger
@testable import ShareLedgerAudit
import TestSupport
import Testing

/// The sharing domain's invariants over random command sequences (the actions of
/// ``ReplayPropertyTests``, valid and refused): checked on the read models and by walking the whole
/// event history, so that a state that was wrong only for a while is caught too.
@Suite("Domain invariants under random commands")
struct DomainInvariantPropertyTests {
    /// A participant's acceptance status as the history says it is.
    enum Status: String, Sendable { case pending, accepted, removed }

    /// What walking the history found wrong.
    struct Walk {
        var violations: [String] = []
        /// token → participant id → status, for the live shares.
        var statuses: [String: [String: Status]] = [:]
        /// token → (zone key, root record name or "" for a zone-wide share), for the live shares.
        var shares: [String: (zone: String, root: String)] = [:]
        var owners: [String: String] = [:]
        var transitions: Set<String> = []
        var maxActive = 0
    }

    /// Walks every event of the log, applying the allowed transitions and recording any other.
    static func walk(_ ledger: ShareLedger) throws -> Walk {
        var w = Walk()
        var after = LogPosition.start
        while true {
            let chunk = try ledger.log.events(after: after, limit: 1_000)
            guard let last = chunk.last else { break }
            after = last.position
            for envelope in chunk {
                guard
                    let event = try DomainEvent.decode(
                        type: envelope.eventType, schemaVersion: envelope.schemaVersion, payload: envelope.payload,
                        position: envelope.position.rawValue)
                else { continue }
                apply(event, at: envelope.position.rawValue, container: envelope.container, &w)
            }
        }
        return w
    }

    static func apply(_ event: DomainEvent, at position: UInt64, container: String, _ w: inout Walk) {
        func move(_ token: String, _ id: String, to new: Status, allowed: [Status?]) {
            let old = w.statuses[token]?[id]
            w.transitions.insert("\(old?.rawValue ?? "none")→\(new.rawValue)")
            if !allowed.contains(old) {
                w.violations.append("position \(position): participant \(id) of \(token) moved \(old?.rawValue ?? "none") → \(new.rawValue)")
            }
            w.statuses[token, default: [:]][id] = new
            let active = w.statuses[token]!.values.filter { $0 != .removed }.count
            w.maxActive = max(w.maxActive, active)
            if active > 100 { w.violations.append("position \(position): \(token) has \(active) participants") }
        }
        switch event {
        case .shareCreated(let e):
            let zone = "\(container)/\(e.ownerName)/\(e.zoneName)"
            for (token, other) in w.shares where other.zone == zone {
                if other.root.isEmpty || e.rootRecordName.isEmpty || other.root == e.rootRecordName {
                    w.violations.append("position \(position): share \(e.token) on \(zone)/\(e.rootRecordName) beside live share \(token)")
                }
            }
            w.shares[e.token] = (zone, e.rootRecordName)
            w.owners[e.token] = e.ownerParticipantID
            w.statuses[e.token] = [:]
            move(e.token, e.ownerParticipantID, to: .accepted, allowed: [nil])
        case .shareDeleted(let e):
            w.shares[e.token] = nil
            w.statuses[e.token] = nil
        case .participantAdded(let e):
            guard w.shares[e.token] != nil else { return w.violations.append("position \(position): added to a dead share") }
            // New, invited again after removal, or a pending invitation bound to an account.
            move(e.token, e.participantID, to: .pending, allowed: [nil, .removed, .pending])
        case .shareAccepted(let e):
            move(e.token, e.participantID, to: .accepted, allowed: [.pending])
        case .participantRemoved(let e):
            if w.owners[e.token] == e.participantID { w.violations.append("position \(position): the owner of \(e.token) was removed") }
            move(e.token, e.participantID, to: .removed, allowed: [.pending, .accepted])
        case .participantVerified(let e):
            move(e.token, e.participantID, to: .pending, allowed: [.pending])
        case .participantUpdated(let e):
            let old = w.statuses[e.token]?[e.participantID]
            if old == nil || old == .removed || w.owners[e.token] == e.participantID {
                w.violations.append("position \(position): update of \(e.participantID) in state \(old?.rawValue ?? "none")")
            }
        default:
            break
        }
    }

    @Test("random command sequences: one share per record or zone, at most 100 participants, only allowed status moves, read models equal a rebuild")
    func invariants() async throws {
        let seen = TransitionsSeen()
        let body: @Sendable ([Int]) async throws -> Void = { numbers in
            let f = try await SharingFixture(seed: UInt64(numbers.count) &* 7919)
            try await f.ledger.registerUser("_dave", in: SharingFixture.container, phoneNumber: "+44 20 7946 0000")
            for user in ReplayPropertyTests.users.prefix(3) {
                for zone in ReplayPropertyTests.zones {
                    _ = try await f.as_(user).save(RecordZone(zoneID: RecordZoneID(zoneName: zone)))
                }
                let zone = RecordZoneID(zoneName: "Z0")
                _ = try await f.as_(user).save(Record(recordType: "Item", recordID: RecordID(recordName: "r0", zoneID: zone)))
                _ = try await f.as_(user).save(
                    Record(recordType: "Item", recordID: RecordID(recordName: "r1", zoneID: zone), parent: RecordID(recordName: "r0", zoneID: zone)))
                _ = try await f.as_(user).share(rootRecord: RecordID(recordName: "r0", zoneID: zone), publicPermission: user == "_carol" ? .readWrite : .none)
            }
            // Every status move once for sure: Bob invited, removed while pending, invited again.
            let first = try f.alice.ownedShares()[0].url
            let invited = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly, to: first)
            let bob = try #require(invited.participants.first { $0.userIdentity.userRecordID?.recordName == "_bob" })
            _ = try await f.alice.removeParticipant(bob.participantID, from: first)
            _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly, to: first)
            var codes: [String: Int] = [:]
            var index = 0
            while index + 2 < numbers.count {
                await ReplayPropertyTests.perform(f, numbers[index], numbers[index + 1], numbers[index + 2], codes: &codes)
                index += 3
            }

            let walk = try Self.walk(f.ledger)
            #expect(walk.violations.isEmpty, "\(walk.violations.prefix(5))")
            seen.add(walk.transitions)

            // The read models agree with the history: the live shares, and each participant's status.
            var live = 0
            // `_ghost` never registers: it owns nothing, and asking is notAuthenticated.
            for owner in ReplayPropertyTests.users where owner != "_ghost" {
                let shares = try f.as_(owner).ownedShares()
                live += shares.count
                // One share per record: distinct roots; a zone-wide share alone in its zone; no root
                // below another share's root.
                let byZone = Dictionary(grouping: shares, by: { $0.recordID.zoneID.zoneName })
                for (zone, inZone) in byZone {
                    if inZone.contains(where: \.isZoneWide) { #expect(inZone.count == 1, "zone \(zone) of \(owner)") }
                    let roots = inZone.compactMap { $0.hierarchicalRootRecordID?.recordName }
                    #expect(Set(roots).count == roots.count, "zone \(zone) of \(owner): \(roots)")
                    for root in roots {
                        var parent = try f.as_(owner).record(for: RecordID(recordName: root, zoneID: RecordZoneID(zoneName: zone))).parent
                        var steps = 0
                        while let current = parent, steps < 50 {
                            #expect(!roots.contains(current.recordName), "\(root) lies below the shared \(current.recordName)")
                            parent = try? f.as_(owner).record(for: current).parent
                            steps += 1
                        }
                    }
                }
                for share in shares {
                    var modelled: [String: String] = [:]
                    for participant in share.participants where participant.acceptanceStatus != Share.Participant.AcceptanceStatus.removed {
                        modelled[participant.participantID] = participant.acceptanceStatus.description
                    }
                    #expect(modelled.count <= 100)
                    let walked = (walk.statuses[share.token.text] ?? [:]).filter { $0.value != .removed }.mapValues(\.rawValue)
                    #expect(walked == modelled, "share \(share.token)")
                }
            }
            #expect(live == walk.shares.count)
            let comparison = try LedgerAudit(f.ledger).verifyReadModels(scratchPath: f.dir.child("rebuilt"))
            #expect(comparison.matches, "differences: \(comparison.differences)")
            await f.ledger.close()
        }
        // Fixed sequences first (coverage below rests on them), then random ones.
        for numbers in fixedSequences(count: 24, length: 60...180) { try await body(numbers) }
        await propertyCheck(count: 12, input: Gen.int(in: 0...1_000_000).array(of: 60...180)) { numbers in try await body(numbers) }
        // The sequences reached the interesting moves, or the property proves little.
        for move in ["none→pending", "pending→accepted", "accepted→removed", "pending→removed", "removed→pending"] {
            #expect(seen.value.contains(move), "never seen: \(move) (seen \(seen.value.sorted()))")
        }
    }

    @Test("the walk catches a move the domain never makes")
    func walkCatchesBadMoves() {
        var w = Walk()
        var created = Shareledger_Events_V1_ShareCreated()
        created.token = "t"
        created.ownerParticipantID = "owner"
        created.zoneName = "Z"
        created.ownerName = "_alice"
        Self.apply(.shareCreated(created), at: 1, container: "c", &w)
        var accepted = Shareledger_Events_V1_ShareAccepted()
        accepted.token = "t"
        accepted.participantID = "p"
        Self.apply(.shareAccepted(accepted), at: 2, container: "c", &w)  // accepted without an invitation
        var removed = Shareledger_Events_V1_ParticipantRemoved()
        removed.token = "t"
        removed.participantID = "owner"
        Self.apply(.participantRemoved(removed), at: 3, container: "c", &w)  // the owner removed
        var second = created
        second.token = "u"
        Self.apply(.shareCreated(second), at: 4, container: "c", &w)  // a second zone-wide share
        #expect(w.violations.count == 3, "\(w.violations)")
    }
}

/// The status moves seen across property runs.
final class TransitionsSeen: @unchecked Sendable {
    // @unchecked: `moves` is guarded by `lock`.
    private let lock = NSLock()
    private var moves = Set<String>()
    func add(_ other: Set<String>) {
        lock.lock()
        moves.formUnion(other)
        lock.unlock()
    }
    var value: Set<String> {
        lock.lock()
        defer { lock.unlock() }
        return moves
    }
}
