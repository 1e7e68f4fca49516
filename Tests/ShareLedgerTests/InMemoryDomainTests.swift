import ByteKeys
import Foundation
import LMDB
import PropertyBased
import Synchronization
@testable import ShareLedger
@testable import ShareLedgerAudit
import TestSupport
import Testing

/// The sharing domain is pure: the same rules and projections run on the LMDB writer's transaction
/// and on ``InMemorySharingDomain``. Random commands (valid and invalid, built from what the state
/// holds) go to both; every step must get the same decision (the same answer, or the same error
/// code and message), the logs the same events, and the read models the same bytes.
@Suite("The sharing domain without LMDB")
struct InMemoryDomainTests {
    static let container = "iCloud.com.example.pure"
    static let users = ["_alice", "_bob", "_carol", "_dave"]
    static let emails = ["alice@example.com", "bob@example.com", "nobody@example.org"]
    static let zones = ["Z0", "Z1"]
    static let records = ["r0", "r1", "r2", "r3"]
    static let now: Int64 = 1_800_000_000_000_000

    /// Both sides, driven by one command at a time.
    struct Pair {
        let ledger: ShareLedger
        let memory = InMemorySharingDomain()

        /// Runs `steps` as `actor` on both sides and checks they agree step by step.
        func run(_ actor: String, signedIn: Bool = true, _ steps: [DomainAction]) async throws -> [Result<StepOutput, LedgerError>] {
            let command = DomainCommand(
                metadata: CommandMetadata(container: InMemoryDomainTests.container, actor: actor), signedIn: signedIn,
                steps: steps, bytes: 256 * steps.count)
            // The in-memory answers, presented from the in-memory state as the ledger presents its own.
            let presenter = Presenter(models: memory.models, urlHost: ledger.configuration.shareURLHost)
            let expected = try memory.run(command, recordedAt: InMemoryDomainTests.now).map { result in
                result.flatMap { answer in
                    Result { () throws(LedgerError) -> StepOutput in
                        do {
                            return try presenter.present(answer, container: InMemoryDomainTests.container, viewer: actor, memory.store)
                        } catch {
                            throw LedgerError.wrap(error, while: "presenting")
                        }
                    }
                }
            }
            let answers = try await ledger.submit(command).results
            let actual = try ledger.read("presenting") { txn in
                answers.map { result in
                    result.flatMap { answer in
                        Result { () throws(LedgerError) -> StepOutput in
                            do {
                                return try ledger.presenter.present(answer, container: InMemoryDomainTests.container, viewer: actor, txn)
                            } catch {
                                throw LedgerError.wrap(error, while: "presenting")
                            }
                        }
                    }
                }
            }
            #expect(actual.count == expected.count)
            for (lmdb, memory) in zip(actual, expected) {
                switch (lmdb, memory) {
                case (.success(let a), .success(let b)):
                    #expect("\(a)" == "\(b)", "\(steps): answers differ")
                case (.failure(let a), .failure(let b)):
                    #expect(a.code == b.code && a.message == b.message, "\(steps): \(a) vs \(b)")
                default:
                    Issue.record("\(steps): LMDB \(lmdb), in memory \(memory)")
                }
            }
            return expected
        }

        /// Every read model's entries and every event, on both sides, must be the same bytes.
        func expectSameState() throws {
            let models = ledger.models
            for (live, memory) in zip(models.all, ReadModels.unattached.all) {
                let lmdb = try ReadModelRebuild.dump(ledger.log.store.environment, live)
                let mem = self.memory.store.entries(memory)
                #expect(lmdb.count == mem.count, "\(live.name): \(lmdb.count) vs \(mem.count) entries")
                #expect(zip(lmdb, mem).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }, "\(live.name) differs")
            }
            let events = try ledger.log.events(after: .start, limit: .max)
            #expect(events.count == memory.events.count)
            for (stored, (position, stream, event)) in zip(events, memory.events) {
                #expect(stored.position.rawValue == position && stored.stream == stream && stored.eventType == event.typeName)
                #expect(stored.payload == (try event.payload()), "event \(position) \(event.typeName)")
            }
        }
    }

    static func makePair(_ dir: TemporaryDirectory, sealing: Bool = false) async throws -> Pair {
        var configuration = ShareLedger.Configuration(
            path: dir.child("ledger"), durability: .unsafeNoSync, clock: FixedClock(micros: now))
        // The in-memory domain has no key store: both sides write plaintext, as they did before
        // crypto-shredding (which CryptoShreddingTests covers), so their bytes can be compared.
        // With `sealing`, the LMDB side seals: only decisions and (opened) answers can be compared.
        configuration.sealsPersonalData = sealing
        configuration.residualTaskWorker = nil
        return Pair(ledger: try ShareLedger.open(configuration))
    }

    /// One random action from three numbers, its references drawn from what the in-memory state holds.
    static func action(_ pair: Pair, _ op: Int, _ a: Int, _ b: Int, random: inout SplitMix64) throws -> (String, DomainAction) {
        let user = a % 17 == 0 ? "_dave" : users[a % 3]
        let owner = users[b % 3]
        let zoneName = zones[b % zones.count]
        let zone = RecordZoneID(zoneName: zoneName, ownerName: b % 5 == 0 ? owner : RecordZoneID.defaultOwnerName)
        let recordName = records[a % records.count]
        let store = pair.memory.store
        let models = pair.memory.models
        // A live share's token (from the state), now and then an unknown one.
        let live = store.entries(models.shares).map { String(decoding: $0.0, as: UTF8.self) }
        let token = live.isEmpty || b % 9 == 8 ? ShareToken.generate(using: &random).text : live[b % live.count]
        let permission: Share.Participant.Permission = [.none, .readOnly, .readWrite, .unknown][(a / 3) % 4]
        let participants = ((try? models.participants(store, token)) ?? []).filter { $0.state.role != .owner }
        let participantID = participants.isEmpty ? UUID().uuidString : participants[a % participants.count].id
        // Most of the time the share's real owner manages it and one of its participants acts on it.
        let share = try models.share(store, token)
        let manager = a % 4 == 0 ? owner : share?.ownerName ?? owner
        let member = participants.isEmpty || a % 4 == 0 ? user : participants[b % participants.count].state.userRecordName
        let tag: String? = a % 4 == 0 ? "999" : (try? models.share(store, token)).flatMap { $0.map { String($0.changeTag) } }
        // Four in nineteen numbers pick an access-request step; the others the steps before them, as before.
        switch op % 19 < 15 ? op % 15 : op % 19 {
        case 0: return (user, .saveZone(zone, capabilities: b % 4 == 0 ? 1 : 15))
        case 1, 2:
            let zoneState = try models.zone(store, container, owner: zone.ownerName == RecordZoneID.defaultOwnerName ? user : owner, zone: zoneName)
            let existing = try zoneState.flatMap { try models.record(store, zoneID: $0.zoneID, recordName) }
            var record = Record(recordType: "Item", recordID: RecordID(recordName: recordName, zoneID: zone), fields: ["n": .int64(Int64(a))])
            if b % 3 != 0 { record.parent = RecordID(recordName: records[b % records.count], zoneID: zone) }
            if let existing, a % 7 != 0 { record.recordChangeTag = String(existing.changeTag) }
            return (user, .saveRecord(record))
        case 3: return (user, .deleteRecord(RecordID(recordName: recordName, zoneID: zone)))
        case 4:
            let candidate = ShareToken.generate(using: &random).text
            return (user, .createShare(ShareCreation(
                zoneID: zone, rootRecordName: b % 4 == 0 ? nil : recordName, title: "t\(a)",
                publicPermission: a % 5 == 0 ? .readOnly : .none, tokenCandidate: candidate,
                shareRecordName: "share-\(candidate)", ownerParticipantID: UUID(uuid: uuid(&random)).uuidString)))
        case 5, 6:
            let lookup = b % 2 == 0
                ? LookupInfo(emailAddress: emails[a % emails.count]) : LookupInfo(userRecordID: RecordID(userRecordName: users[a % users.count]))
            return (manager, .addParticipant(
                token: token, lookup: lookup, role: a % 5 == 0 ? .administrator : .privateUser, permission: permission,
                newParticipantID: UUID(uuid: uuid(&random)).uuidString, ifChangeTag: b % 6 == 0 ? tag : nil))
        case 7: return (user, .fetchMetadata(tokenText: token, shouldFetchRootRecord: a % 2 == 0, desiredKeys: a % 3 == 0 ? [] : nil))
        case 8, 9: return (member.isEmpty ? user : member, .accept(token: token, metadataContainer: b % 11 == 0 ? "iCloud.other" : container, newParticipantID: UUID(uuid: uuid(&random)).uuidString))
        case 10:
            return a % 3 == 0
                ? (manager, .removeParticipant(token: token, participantID: participantID, ifChangeTag: nil))
                : (manager, .updateParticipant(
                    token: token, participantID: participantID, role: b % 3 == 0 ? .administrator : nil,
                    permission: b % 2 == 0 ? .readOnly : .readWrite, ifChangeTag: b % 5 == 0 ? tag : nil))
        case 11: return (member.isEmpty ? user : member, .leaveShare(token: token))
        case 12:
            return a % 2 == 0
                ? (manager, .setPublicPermission(token: token, permission: permission, ifChangeTag: nil))
                : (manager, .setTitle(token: token, title: "title \(b)", ifChangeTag: tag))
        case 13:
            if a % 3 == 0 { return (manager, .deleteShare(token: token, ifChangeTag: nil)) }
            if a % 3 == 1 { return (user, .deleteZone(zone)) }
            let code = ShareLedger.sha256("CODE\(b % 3)")
            return b % 2 == 0
                ? (user, .requestVerification(token: token, lookup: LookupInfo(emailAddress: emails[2]), codeSHA256: code, expiresAtMicros: now + 60_000_000))
                : (user, .verify(token: token, codeSHA256: code))
        case 15:
            return (manager, .setAllowsAccessRequests(token: token, allowed: a % 3 != 0, ifChangeTag: b % 6 == 0 ? tag : nil))
        case 16:
            // Mostly a share that takes requests, when there is one.
            let open = live.filter { (try? models.share(store, $0))??.allowsAccessRequests == true }
            return (user, .requestAccess(tokenText: open.isEmpty || a % 4 == 0 ? token : open[b % open.count]))
        case 17:
            // Mostly a pending request, when there is one, answered by the share's owner.
            let pending = store.entries(models.access).filter { $0.0.count > 26 && $0.0[26] == ReadModels.AccessKind.request.rawValue }
            let (target, requester, answerer): (String, String, String)
            if let entry = pending.isEmpty || a % 5 == 0 ? nil : pending[b % pending.count] {
                target = String(decoding: entry.0[..<26], as: UTF8.self)
                requester = String(decoding: entry.0[27...], as: UTF8.self)
                answerer = try models.share(store, target)?.ownerName ?? owner
            } else if pending.isEmpty && a % 5 != 0 {
                // Nothing to answer yet: ask (so that later steps find requests to answer).
                let open = live.filter { (try? models.share(store, $0))??.allowsAccessRequests == true }
                return (user, .requestAccess(tokenText: open.isEmpty ? token : open[b % open.count]))
            } else {
                (target, requester, answerer) = (token, user, manager)
            }
            return a % 2 == 0
                ? (answerer, .approveRequester(
                    token: target, user: requester, permission: permission == .readWrite ? .readWrite : .readOnly,
                    newParticipantID: UUID(uuid: uuid(&random)).uuidString))
                : (answerer, .denyRequester(token: target, user: requester))
        case 18:
            // Blocks are kept rare: a blocked user drops out of the other steps until unblocked.
            if a % 4 == 0 { return (manager, .blockIdentity(token: token, user: member.isEmpty ? user : member)) }
            let blocked = store.entries(models.access).filter { $0.0.count > 26 && $0.0[26] == ReadModels.AccessKind.blocked.rawValue }
            guard let entry = blocked.isEmpty ? nil : blocked[b % blocked.count] else {
                return (manager, .unblockIdentity(token: token, user: user))
            }
            let target = String(decoding: entry.0[..<26], as: UTF8.self)
            return (try models.share(store, target)?.ownerName ?? owner, .unblockIdentity(
                token: target, user: String(decoding: entry.0[27...], as: UTF8.self)))
        default:
            var first: UInt64 = 0
            try store.visit(models.outbox, from: nil) { key, _ in
                first = BigEndian.uint64(key) ?? 0
                return false
            }
            return ("system", .completeTask(taskID: first + UInt64(b % 2)))
        }
    }

    static func uuid(_ random: inout SplitMix64) -> uuid_t {
        var uuid = withUnsafeBytes(of: (random.next(), random.next())) { $0.load(as: uuid_t.self) }
        uuid.6 = (uuid.6 & 0x0F) | 0x40
        uuid.8 = (uuid.8 & 0x3F) | 0x80
        return uuid
    }

    @Test("random commands on LMDB and in memory: the same decisions, answers, events and read-model bytes")
    func bothStatesAgree() async throws {
        let outcomes = Counts()
        let body: @Sendable ([Int]) async throws -> Void = { numbers in try await Self.agree(numbers, sealing: false, outcomes) }
        // Fixed sequences first: the coverage check below rests on them alone, so it is deterministic.
        for numbers in fixedSequences(count: 120, length: 60...200) { try await body(numbers) }
        let totals = outcomes.value
        await propertyCheck(count: 20, input: Gen.int(in: 0...1_000_000).array(of: 30...150)) { numbers in try await body(numbers) }
        // The generator must reach successes of every kind of step and refusals of many kinds, or
        // agreement proves little.
        for kind in ["saveZone", "saveRecord", "deleteRecord", "createShare", "addParticipant", "fetchMetadata", "accept",
            "removeParticipant", "updateParticipant", "leaveShare", "setPublicPermission", "setTitle", "deleteShare", "completeTask",
            "setAllowsAccessRequests", "requestAccess", "approveRequester", "denyRequester", "blockIdentity", "unblockIdentity"]
        {
            #expect(totals.keys.contains("\(kind):ok"), "\(kind) never succeeded: \(totals)")
        }
        #expect(Set(totals.keys.map { $0.split(separator: ":")[1] }).count >= 8, "outcomes seen: \(totals)")
    }

    @Test("with sealing on (invitations matched by keyed hash, plaintext in memory): the same decisions and opened answers")
    func sealedAndPlaintextAgree() async throws {
        let outcomes = Counts()
        for numbers in fixedSequences(count: 48, length: 60...200) { try await Self.agree(numbers, sealing: true, outcomes) }
        let totals = outcomes.value
        // Invitations by email and by account (matched against earlier ones by keyed hash), and
        // verifications, were decided.
        #expect((totals["addParticipant:ok"] ?? 0) >= 20 && totals.keys.contains { $0.hasPrefix("verify:") }, "\(totals)")
    }

    /// One run of random commands on both sides; with `sealing`, the LMDB side seals personal data,
    /// so only decisions and answers (its opened values) are compared, not events or row bytes.
    static func agree(_ numbers: [Int], sealing: Bool, _ outcomes: Counts) async throws {
        let dir = TemporaryDirectory()
        var seen: [String: Int] = [:]
        let pair = try await Self.makePair(dir, sealing: sealing)
        var random = SplitMix64(state: UInt64(numbers.count) &* 0x9E37_79B9_7F4A_7C15)
        _ = try await pair.run("_alice", [.registerUser(name: "_alice", email: "alice@example.com", phone: nil, names: nil)])
        _ = try await pair.run("_bob", [.registerUser(name: "_bob", email: "bob@example.com", phone: "+1 555 0100", names: nil)])
        _ = try await pair.run("_carol", [.registerUser(name: "_carol", email: nil, phone: nil, names: nil)])
        // A starting state for the actions to work on: zones and a small hierarchy per user.
        for user in Self.users.prefix(3) {
            let z0 = RecordZoneID(zoneName: "Z0")
            let token = ShareToken.generate(using: &random).text
            _ = try await pair.run(user, [
                .saveZone(z0, capabilities: 15), .saveZone(RecordZoneID(zoneName: "Z1"), capabilities: 15),
                .saveRecord(Record(recordType: "Item", recordID: RecordID(recordName: "r0", zoneID: z0))),
                .saveRecord(Record(recordType: "Item", recordID: RecordID(recordName: "r1", zoneID: z0), parent: RecordID(recordName: "r0", zoneID: z0))),
                .createShare(ShareCreation(
                    zoneID: z0, rootRecordName: "r0", title: "", publicPermission: user == "_carol" ? .readWrite : .none,
                    tokenCandidate: token, shareRecordName: "share-\(token)", ownerParticipantID: UUID(uuid: Self.uuid(&random)).uuidString)),
            ])
        }
        var index = 0
        while index + 2 < numbers.count {
            // Sometimes two steps in one command: the second sees the first.
            var steps: [DomainAction] = []
            let (actor, step) = try Self.action(pair, numbers[index], numbers[index + 1], numbers[index + 2], random: &random)
            steps.append(step)
            if numbers[index] % 5 == 0, index + 5 < numbers.count {
                steps.append(try Self.action(pair, numbers[index + 3], numbers[index + 1], numbers[index + 2], random: &random).1)
            }
            let results = try await pair.run(actor, signedIn: numbers[index + 1] % 13 != 0, steps)
            for (step, result) in zip(steps, results) {
                seen["\(Self.kind(step)):" + ((try? result.get()) != nil ? "ok" : result.failure?.code.name ?? "?"), default: 0] += 1
            }
            index += 3
        }
        outcomes.add(seen)
        if !sealing { try pair.expectSameState() }
        // Every event the writer produced is one the rules could have produced (EventValidator).
        let comparison = try LedgerAudit(pair.ledger).verifyReadModels(scratchPath: dir.child("rebuilt"))
        #expect(comparison.matches, "\(comparison.inadmissible?.text ?? "") \(comparison.differences)")
        await pair.ledger.close()
    }

    @Test("a one-time URL's life on LMDB and in memory: the same answers, events and read-model bytes")
    func oneTimeURLsAgree() async throws {
        let dir = TemporaryDirectory()
        let pair = try await Self.makePair(dir)
        for user in ["_alice", "_bob", "_carol"] {
            _ = try await pair.run(user, [.registerUser(name: user, email: nil, phone: nil, names: nil)])
        }
        let zone = RecordZoneID(zoneName: "Z0")
        let token = "0FGla26YtxqPeVFDDjx2Ds3DAb"
        let (first, second) = ("0FGla26YtxqPeVFDDjx2Ds3DA1", "0FGla26YtxqPeVFDDjx2Ds3DA2")
        _ = try await pair.run("_alice", [
            .saveZone(zone, capabilities: 15), .saveRecord(Record(recordType: "Item", recordID: RecordID(recordName: "r0", zoneID: zone))),
            .createShare(ShareCreation(
                zoneID: zone, rootRecordName: "r0", title: "", publicPermission: .none, tokenCandidate: token,
                shareRecordName: "share-1", ownerParticipantID: "00000000-0000-4000-8000-000000000001")),
            .addOneTimeParticipant(
                token: token, role: .privateUser, permission: .readWrite, newParticipantID: "00000000-0000-4000-8000-000000000002",
                oneTimeToken: first, ifChangeTag: nil),
            .addOneTimeParticipant(
                token: token, role: .administrator, permission: .readOnly, newParticipantID: "00000000-0000-4000-8000-000000000003",
                oneTimeToken: second, ifChangeTag: nil),
        ])
        // A token in use is refused; Bob fetches and accepts the first URL; Carol then gets nothing from it.
        let reused = try await pair.run("_alice", [.addOneTimeParticipant(
            token: token, role: .privateUser, permission: .readOnly, newParticipantID: "00000000-0000-4000-8000-000000000004",
            oneTimeToken: first, ifChangeTag: nil)])
        #expect(reused.first?.failure?.code == .serverRejectedRequest)
        _ = try await pair.run("_bob", [.fetchMetadata(tokenText: first, shouldFetchRootRecord: false, desiredKeys: nil)])
        let accepted = try await pair.run("_bob", [.acceptOneTimeURL(oneTimeToken: first, token: token, metadataContainer: Self.container)])
        #expect((try? accepted.first?.get()) != nil)
        let carol = try await pair.run("_carol", [
            .fetchMetadata(tokenText: first, shouldFetchRootRecord: false, desiredKeys: nil),
            .acceptOneTimeURL(oneTimeToken: first, token: token, metadataContainer: Self.container),
        ])
        #expect(carol.map { $0.failure?.code } == [.unknownItem, .unknownItem])
        // The second URL withdrawn by removing its participant.
        _ = try await pair.run("_alice", [.removeParticipant(token: token, participantID: "00000000-0000-4000-8000-000000000003", ifChangeTag: nil)])
        let withdrawn = try await pair.run("_carol", [.fetchMetadata(tokenText: second, shouldFetchRootRecord: false, desiredKeys: nil)])
        #expect(withdrawn.first?.failure?.code == .unknownItem)
        try pair.expectSameState()
        let comparison = try LedgerAudit(pair.ledger).verifyReadModels(scratchPath: dir.child("rebuilt"))
        #expect(comparison.matches, "\(comparison.inadmissible?.text ?? "") \(comparison.differences)")
        await pair.ledger.close()
    }

    static func kind(_ step: DomainAction) -> String {
        String("\(step)".prefix { $0 != "(" })
    }
}

extension Result {
    fileprivate var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
