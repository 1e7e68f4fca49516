import ByteKeys
import Crypto
import Foundation
import LMDB
@testable import ShareLedger
@testable import ShareLedgerAudit
import ShareLedgerFuzzSupport
import TestSupport
import Testing

/// What "nothing changed" compares: the head, and a digest of every read-model database and of the
/// worker's bookkeeping.
struct LedgerSnapshot: Equatable, CustomStringConvertible {
    var head: LogHead
    var digests: [String: String]

    var description: String { "head \(head.position), \(digests.count) databases" }
}

extension ShareLedger {
    /// The head and a digest of every read-model database.
    func snapshot() throws -> LedgerSnapshot {
        let store = log.store
        var digests: [String: String] = [:]
        for db in store.models.all + [store.models.workerTasks] {
            var hasher = SHA256()
            for (key, value) in try ReadModelRebuild.dump(store.environment, db) {
                hasher.update(data: BigEndian.bytes(of: UInt32(key.count)) + key + BigEndian.bytes(of: UInt32(value.count)) + value)
            }
            digests[db.name] = Hex.encode(Array(hasher.finalize()))
        }
        return LedgerSnapshot(head: try log.head(), digests: digests)
    }
}

/// A call of the public API that takes a share URL.
struct URLCall: Sendable, CustomStringConvertible {
    var name: String
    var run: @Sendable (Container, URL) async throws -> Void
    var description: String { name }

    /// Every call that takes a share URL and, refused, appends nothing.
    static let all: [URLCall] = [
        URLCall(name: "share(for:)") { c, url in _ = try c.share(for: url) },
        URLCall(name: "shareMetadataWithoutLogging") { c, url in _ = try c.shareMetadataWithoutLogging(for: url) },
        URLCall(name: "addParticipant") { c, url in
            _ = try await c.addParticipant(LookupInfo(emailAddress: "carol@example.com"), permission: .readOnly, to: url)
        },
        URLCall(name: "setPermission") { c, url in _ = try await c.setPermission(.readOnly, forParticipant: "p", in: url) },
        URLCall(name: "removeParticipant") { c, url in _ = try await c.removeParticipant("p", from: url) },
        URLCall(name: "setPublicPermission") { c, url in _ = try await c.setPublicPermission(.readOnly, for: url) },
        URLCall(name: "setTitle") { c, url in _ = try await c.setTitle("t", for: url) },
        URLCall(name: "deleteShare") { c, url in try await c.deleteShare(url) },
        URLCall(name: "leaveShare") { c, url in try await c.leaveShare(url) },
        URLCall(name: "requestParticipantVerification") { c, url in
            _ = try await c.requestParticipantVerification(for: url, lookupInfo: LookupInfo(emailAddress: "x@example.com"))
        },
        URLCall(name: "verifyParticipant") { c, url in _ = try await c.verifyParticipant(for: url, code: "0123456789ABCDEFGHJKMNPQRS") },
    ]
}

@Suite("Hostile input: share URLs and tokens")
struct HostileURLTests {
    /// URL texts that name no share of the ledger; `TOKEN` becomes the live share's token.
    static let hostile: [String] = [
        "https://share.localhost/share/0AAAAAAAAAAAAAAAAAAAAAAAAA",  // the shape of a token, no share
        "https://share.localhost/share/0AAAAAAAAAAAAAAAAAAAAAAAA",  // 25 characters
        "https://share.localhost/share/0AAAAAAAAAAAAAAAAAAAAAAAAAA",  // 27 characters
        "https://share.localhost/share/1AAAAAAAAAAAAAAAAAAAAAAAAA",  // does not start with 0
        "https://share.localhost/share/0AAAAAAAAAAAAAAAAAAAAAAAA-",  // outside the alphabet
        "https://share.localhost/share/0AAAAAAAAAAAAAAAAAAAAAAAA%C3%A9",  // non-ASCII, percent-encoded
        "https://share.localhost/share/%00",
        "https://share.localhost/share/",
        "https://share.localhost/TOKEN",  // one path component only
        "https://share.localhost/share/TOKEN/extra",  // the token is not last
        "https://share.localhost/share/TOKEN?" + String(repeating: "q", count: 3_000),  // oversized, real token
        "https://share.localhost/share/" + String(repeating: "0", count: 10_000),  // oversized
        "ftp://share.localhost/share/TOKEN",  // not http(s)
        "file:///share/TOKEN",  // no host
        "mailto:someone@example.com",
        "data:text/plain,TOKEN",
        "urn:share:TOKEN",
        "https://user:secret@[::1]:8443/share/0BBBBBBBBBBBBBBBBBBBBBBBBB",
        "https://share.localhost/share/token",  // the real token lowercased is another (unknown) token
    ]

    @Test("every call that takes a share URL answers a malformed, oversized or unknown URL with unknownItem and changes nothing")
    func malformedURLs() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let before = try f.ledger.snapshot()
        var tried = 0
        for text in Self.hostile {
            let replaced = text.replacingOccurrences(of: "TOKEN", with: share.token.text)
                .replacingOccurrences(of: "token", with: share.token.text.lowercased())
            let url = try #require(URL(string: replaced), "\(text.prefix(60))")
            for call in URLCall.all {
                for user in [f.alice, f.bob] {
                    let error = await #expect(throws: LedgerError.self, "\(call) \(text.prefix(60))") { try await call.run(user, url) }
                    #expect(error?.code == .unknownItem, "\(call) as \(user.userRecordName ?? "-") with \(text.prefix(60)): \(String(describing: error))")
                    #expect(error?.message == Decider.shareNotFound, "\(call) \(text.prefix(60))")
                    tried += 1
                }
            }
            // A fetch is logged even when it fails, and changes nothing else.
            let events = try f.ledger.statistics().events
            #expect(await errorCode { try await f.bob.shareMetadata(for: url) } == .unknownItem)
            #expect(try f.ledger.statistics().events == events + 1)
            // The audit trail keeps at most 64 characters of what was asked for.
            let logged = try #require(try f.ledger.log.event(at: LogPosition(events + 1)))
            #expect(logged.payload.count < 200)
        }
        #expect(tried == Self.hostile.count * URLCall.all.count * 2)
        var after = try f.ledger.snapshot()
        // Only the fetches were appended (they touch only the history indexes and their journal).
        #expect(after.head.position.rawValue == before.head.position.rawValue + UInt64(Self.hostile.count))
        for name in ["idx_user_history", "idx_container_history", "idx_share_history", "idx_history_journal"] {
            after.digests[name] = before.digests[name]
        }
        after.head = before.head
        #expect(after == before)
        #expect(try LedgerAudit(f.ledger).verifyReadModels(scratchPath: f.dir.child("rebuilt")).matches)
        await f.ledger.close()
    }

    @Test("a fetch refuses a URL that only carries a share's token as every other call does, even for the owner, and logs it marked")
    func fetchRefusesNonShareURLs() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let token = share.token.text
        for text in [
            "https://share.localhost/share/\(token)?" + String(repeating: "q", count: 3_000), "https://share.localhost/\(token)",
            "ftp://share.localhost/share/\(token)", "file:///share/\(token)",
        ] {
            let url = try #require(URL(string: text))
            #expect(await errorCode { try await f.alice.shareMetadata(for: url) } == .unknownItem, "\(text.prefix(60))")
            #expect(await errorCode { try f.alice.shareMetadataWithoutLogging(for: url) } == .unknownItem, "\(text.prefix(60))")
            let results = try await f.alice.shareMetadatas(for: [url, share.url])
            #expect(results[url]?.errorCode == .unknownItem)
            #expect(results[share.url]?.errorCode == nil)
            let head = try f.ledger.log.head().position
            let logged = try #require(try f.ledger.log.event(at: LogPosition(head.rawValue - 1)))
            guard case .shareMetadataFetched(let fetched) = try DomainEvent.decode(
                type: logged.eventType, schemaVersion: logged.schemaVersion, payload: logged.payload, position: 0)
            else {
                Issue.record("not a fetch: \(logged.eventType)")
                continue
            }
            #expect(fetched.token.hasPrefix("not-a-share-url:"), "\(fetched.token)")
            #expect(fetched.errorCode == 11)
        }
        await f.ledger.close()
    }

    @Test("a share URL host no URL can hold is refused when the ledger opens, before anything is created", arguments: [
        "", "bad host", "a/b", "exa%mple", String(repeating: "h", count: 254),
    ])
    func badShareURLHost(host: String) throws {
        let dir = TemporaryDirectory()
        var configuration = Fixtures.configuration(dir.child("ledger"))
        configuration.shareURLHost = host
        let error = #expect(throws: LedgerError.self) { try ShareLedger.open(configuration) }
        #expect(error?.code == .invalidArguments)
        #expect(!FileManager.default.fileExists(atPath: dir.child("ledger")))
    }

    @Test("IPv6, internationalized and 253-byte hosts make share URLs the parser reads back")
    func goodShareURLHosts() async throws {
        for host in ["[::1]", "ünï.example", String(repeating: "h", count: 253), "localhost:8443"] {
            let dir = TemporaryDirectory()
            var configuration = Fixtures.configuration(dir.child("ledger"))
            configuration.shareURLHost = host
            configuration.residualTaskWorker = nil
            guard let ledger = try? ShareLedger.open(configuration) else {
                // A host with a port is not a host; refusing it is fine, crashing later is not.
                #expect(host.contains(":") && !host.hasPrefix("["), "\(host.prefix(20)) refused")
                continue
            }
            try await ledger.registerUser("_alice", in: SharingFixture.container)
            let alice = ledger.container(SharingFixture.container, userRecordName: "_alice")
            _ = try await alice.save(RecordZone(zoneID: SharingFixture.zone))
            _ = try await alice.save(Record(recordType: "T", recordID: SharingFixture.recordID("r")))
            let share = try await alice.share(rootRecord: SharingFixture.recordID("r"), title: String(repeating: "t", count: 512))
            #expect(ShareURL.token(in: share.url) == share.token, "\(host.prefix(20))")
            #expect(try alice.share(for: share.url).token == share.token)
            await ledger.close()
        }
    }

    @Test("a share's token found in a URL is refused when the URL is longer than the parser reads")
    func oversizedURLWithRealToken() throws {
        var generator = SplitMix64(state: 1)
        let token = ShareToken.generate(using: &generator)
        let base = "https://share.localhost/share/\(token.text)#"
        let fits = try #require(URL(string: base + String(repeating: "t", count: ShareURL.maxLength - base.utf8.count)))
        #expect(ShareURL.token(in: fits) == token)
        let over = try #require(URL(string: base + String(repeating: "t", count: ShareURL.maxLength - base.utf8.count + 1)))
        #expect(ShareURL.token(in: over) == nil)
    }

    @Test("hostile token texts are refused by the parser and by JSON decoding", arguments: [
        "", " ", "0", String(repeating: "0", count: 26 * 1_000), "0AAAAAAAAAAAAAAAAAAAAAAAA\u{0}", "\u{0}AAAAAAAAAAAAAAAAAAAAAAAAA",
        "0AAAAAAAAAAAAAAAAAAAAAAAA\u{301}",  // a combining mark: 26 characters, 27 scalars
        "０AAAAAAAAAAAAAAAAAAAAAAAAA",  // a full-width zero
        "0AAAAAAAAAAAAAAAAAAAAAAA\u{1F600}",
    ])
    func hostileTokenText(text: String) throws {
        #expect(ShareToken(text) == nil)
        let json = try JSONEncoder().encode([text])
        #expect(throws: DecodingError.self) { try JSONDecoder().decode([ShareToken].self, from: json) }
    }
}

@Suite("Hostile input: batches")
struct HostileBatchTests {
    @Test("empty, 10,000-item and duplicate batches: limitExceeded past 400 distinct items, duplicates done once")
    func batches() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly)
        let metadata = try await f.bob.shareMetadata(for: share.url)
        let before = try f.ledger.snapshot()

        // Empty batches do nothing.
        #expect(try await f.bob.shareMetadatas(for: []).isEmpty)
        #expect(try await f.bob.accept([]).isEmpty)
        #expect(try f.ledger.snapshot() == before)

        // 10,000 distinct items: refused whole, nothing fetched, logged or accepted.
        let urls = (0..<10_000).map { URL(string: "https://share.localhost/share/0\(String(format: "%025d", $0))")! }
        let tooMany = await #expect(throws: LedgerError.self) { try await f.bob.shareMetadatas(for: urls) }
        #expect(tooMany?.code == .limitExceeded)
        #expect(tooMany?.message.contains("10000") == true)
        let metadatas = (0..<10_000).map { index -> Share.Metadata in
            var copy = metadata
            copy.containerIdentifier = "iCloud.example.\(index)"
            return copy
        }
        #expect(await errorCode { try await f.bob.accept(metadatas) } == .limitExceeded)
        let operation = AcceptSharesOperation(shareMetadatas: metadatas)
        let perShare = Counter()
        operation.perShareResultBlock = { _, _ in perShare.increment() }
        let outcome = Outcome()
        operation.acceptSharesResultBlock = { result in outcome.set(result.errorCode) }
        f.bob.add(operation)
        await operation.waitUntilFinished()
        #expect(outcome.value == .limitExceeded)
        #expect(perShare.value == 0)
        #expect(try f.ledger.snapshot() == before)

        // 10,000 copies of one item: one distinct item, done once.
        let same = Array(repeating: share.url, count: 10_000)
        let fetched = try await f.bob.shareMetadatas(for: same)
        #expect(fetched.count == 1)
        #expect(try f.ledger.statistics().events == UInt64(before.head.position.rawValue) + 1)
        let accepted = try await f.bob.accept(Array(repeating: metadata, count: 10_000))
        #expect(accepted.count == 1)
        #expect(try accepted[metadata]?.get().currentUserParticipant?.acceptanceStatus == .accepted)
        // One fetch and one acceptance.
        #expect(try f.ledger.statistics().events == UInt64(before.head.position.rawValue) + 2)

        // Exactly 400 distinct URLs is allowed: one result each.
        let four = (0..<400).map { URL(string: "https://share.localhost/share/0\(String(format: "%025d", $0))")! }
        let results = try await f.bob.shareMetadatas(for: four)
        #expect(results.count == 400)
        #expect(results.values.allSatisfy { $0.errorCode == .unknownItem })
        await f.ledger.close()
    }
}

/// The result a completion block reported.
final class Outcome: @unchecked Sendable {
    // @unchecked: `code` is guarded by `lock`.
    private let lock = NSLock()
    private var code: LedgerError.Code?
    func set(_ value: LedgerError.Code?) {
        lock.lock()
        code = value
        lock.unlock()
    }
    var value: LedgerError.Code? {
        lock.lock()
        defer { lock.unlock() }
        return code
    }
}

@Suite("Hostile input: values over the limits")
struct HostileLimitTests {
    @Test("non-finite doubles in fields (found by the envelope fuzzer) are stored and read back, and their events round-trip")
    func nonFiniteDoubles() async throws {
        let f = try await SharingFixture()
        _ = try await f.alice.save(RecordZone(zoneID: SharingFixture.zone))
        let fields: [String: FieldValue] = ["nan": .double(.nan), "inf": .double(.infinity), "minusInf": .double(-.infinity)]
        _ = try await f.alice.save(Record(recordType: "T", recordID: SharingFixture.recordID("odd"), fields: fields))
        let read = try f.alice.record(for: SharingFixture.recordID("odd"))
        guard case .double(let nan) = read["nan"], case .double(let inf) = read["inf"] else {
            Issue.record("the doubles did not come back: \(read.fields)")
            return
        }
        #expect(nan.isNaN)
        #expect(inf == .infinity)
        let saved = try #require(try f.ledger.log.event(at: try f.ledger.log.head().position))
        #expect(FuzzingEntryPoints.domainEvent(type: saved.eventType, schemaVersion: saved.schemaVersion, payload: saved.payload))
        #expect(try LedgerAudit(f.ledger).verifyReadModels(scratchPath: f.dir.child("rebuilt")).matches)
        await f.ledger.close()
    }

    @Test("names, titles, fields and lookups over the limits: a typed error each, nothing changed")
    func limits() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let zone = SharingFixture.zone
        try await f.ledger.registerUser("_alice", in: "iCloud.com.example.other")
        let before = try f.ledger.snapshot()
        let a = f.alice
        let big = [UInt8](repeating: 7, count: 200_000)
        let cases: [(String, LedgerError.Code, @Sendable () async throws -> Void)] = [
            ("record name 256 bytes", .invalidArguments, {
                _ = try await a.save(Record(recordType: "T", recordID: RecordID(recordName: String(repeating: "r", count: 256), zoneID: zone)))
            }),
            ("record name with NUL", .invalidArguments, {
                _ = try await a.save(Record(recordType: "T", recordID: RecordID(recordName: "a\u{0}b", zoneID: zone)))
            }),
            ("empty record name", .invalidArguments, {
                _ = try await a.save(Record(recordType: "T", recordID: RecordID(recordName: "", zoneID: zone)))
            }),
            ("record type 256 bytes", .invalidArguments, {
                _ = try await a.save(Record(recordType: String(repeating: "T", count: 256), recordID: SharingFixture.recordID("x")))
            }),
            ("record type cloudkit.share", .invalidArguments, {
                _ = try await a.save(Record(recordType: Share.recordType, recordID: SharingFixture.recordID("x")))
            }),
            ("fields over 1 MB in many fields", .limitExceeded, {
                let fields = Dictionary(uniqueKeysWithValues: (0..<6).map { ("f\($0)", FieldValue.bytes(big)) })
                _ = try await a.save(Record(recordType: "T", recordID: SharingFixture.recordID("x"), fields: fields))
            }),
            ("field key 256 bytes", .invalidArguments, {
                _ = try await a.save(Record(recordType: "T", recordID: SharingFixture.recordID("x"), fields: [String(repeating: "k", count: 256): .int64(1)]))
            }),
            ("zone name 121 bytes", .invalidArguments, {
                _ = try await a.save(RecordZone(zoneID: RecordZoneID(zoneName: String(repeating: "z", count: 121))))
            }),
            ("deleting the default zone", .invalidArguments, {
                _ = try await a.deleteRecordZone(withID: RecordZoneID(zoneName: RecordZoneID.defaultZoneName))
            }),
            ("title 513 bytes", .invalidArguments, { _ = try await a.setTitle(String(repeating: "t", count: 513), for: share.url) }),
            ("email 255 bytes", .invalidArguments, {
                _ = try await a.addParticipant(
                    LookupInfo(emailAddress: String(repeating: "e", count: 243) + "@example.com"), permission: .readOnly, to: share.url)
            }),
            ("email without @", .invalidArguments, {
                _ = try await a.addParticipant(LookupInfo(emailAddress: "nobody.example.com"), permission: .readOnly, to: share.url)
            }),
            ("phone 33 bytes", .invalidArguments, {
                _ = try await a.addParticipant(LookupInfo(phoneNumber: String(repeating: "1", count: 33)), permission: .readOnly, to: share.url)
            }),
            ("phone without digits", .invalidArguments, {
                _ = try await a.addParticipant(LookupInfo(phoneNumber: "call me"), permission: .readOnly, to: share.url)
            }),
            ("unknown user", .unknownItem, {
                _ = try await a.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: "_nobody")), permission: .readOnly, to: share.url)
            }),
            ("permission none", .invalidArguments, {
                _ = try await a.addParticipant(LookupInfo(emailAddress: "carol@example.com"), permission: .none, to: share.url)
            }),
            ("permission unknown", .invalidArguments, {
                _ = try await a.addParticipant(LookupInfo(emailAddress: "carol@example.com"), permission: .unknown, to: share.url)
            }),
            ("role owner", .invalidArguments, {
                _ = try await a.addParticipant(LookupInfo(emailAddress: "carol@example.com"), permission: .readOnly, role: .owner, to: share.url)
            }),
            ("role publicUser", .invalidArguments, {
                _ = try await a.addParticipant(LookupInfo(emailAddress: "carol@example.com"), permission: .readOnly, role: .publicUser, to: share.url)
            }),
            ("public permission unknown", .invalidArguments, { _ = try await a.setPublicPermission(.unknown, for: share.url) }),
            ("unknown participant", .unknownItem, { _ = try await a.removeParticipant("no-such-participant", from: share.url) }),
            ("unknown record", .unknownItem, { try await a.deleteRecord(withID: SharingFixture.recordID("no-such-record")) }),
            ("unknown zone", .zoneNotFound, { try await a.deleteRecordZone(withID: RecordZoneID(zoneName: "NoSuchZone")) }),
            ("unknown parked task", .unknownItem, { try await f.ledger.retryParkedTasks(ids: [999]) }),
            ("stale change tag", .serverRecordChanged, { _ = try await a.setTitle("x", for: share.url, ifChangeTag: "0") }),
            ("user name 65 bytes", .invalidArguments, {
                try await f.ledger.registerUser(String(repeating: "u", count: 65), in: SharingFixture.container)
            }),
            ("user name with a space", .invalidArguments, { try await f.ledger.registerUser("_a b", in: SharingFixture.container) }),
            ("user name with an emoji", .invalidArguments, { try await f.ledger.registerUser("_\u{1F600}", in: SharingFixture.container) }),
            ("user registered twice", .invalidArguments, { try await f.ledger.registerUser("_alice", in: SharingFixture.container) }),
            ("email of another user", .invalidArguments, {
                try await f.ledger.registerUser("_mallory", in: SharingFixture.container, emailAddress: "Alice@Example.com")
            }),
            ("container 129 bytes", .invalidArguments, {
                try await f.ledger.registerUser("_erin", in: String(repeating: "c", count: 129))
            }),
            ("empty container", .invalidArguments, { try await f.ledger.registerUser("_erin", in: "") }),
            ("container with NUL", .invalidArguments, {
                _ = try await f.ledger.container("iCloud.a\u{0}b", userRecordName: "_alice").save(RecordZone(zoneID: zone))
            }),
            ("wrong container for the share", .unknownItem, {
                _ = try await f.ledger.container("iCloud.com.example.other", userRecordName: "_alice").setTitle("x", for: share.url)
            }),
            ("no account", .notAuthenticated, { _ = try await f.as_(nil).save(RecordZone(zoneID: zone)) }),
            ("an unregistered user", .notAuthenticated, { _ = try await f.as_("_nobody").save(RecordZone(zoneID: zone)) }),
            ("another user's zone", .badDatabase, {
                _ = try await f.bob.save(RecordZone(zoneID: RecordZoneID(zoneName: "Z", ownerName: "_alice")))
            }),
        ]
        for (name, code, call) in cases {
            let error = await #expect(throws: LedgerError.self, "\(name)") { try await call() }
            #expect(error?.code == code, "\(name): \(String(describing: error))")
            #expect(error?.message.isEmpty == false, "\(name)")
            #expect(try f.ledger.snapshot() == before, "\(name) changed the ledger")
        }
        // A title over the limit on a new share (the record is saved first; the share is refused).
        _ = try await a.save(Record(recordType: "T", recordID: SharingFixture.recordID("fresh")))
        let saved = try f.ledger.snapshot()
        #expect(
            await errorCode { try await a.share(rootRecord: SharingFixture.recordID("fresh"), title: String(repeating: "t", count: 513)) }
                == .invalidArguments)
        #expect(try f.ledger.snapshot() == saved)
        await f.ledger.close()
    }
}
