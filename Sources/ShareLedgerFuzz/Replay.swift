#if !SHARELEDGER_FUZZING
import Foundation
import ShareLedger
import ShareLedgerAudit
import ShareLedgerFuzzSupport

/// In a plain build (no libFuzzer, which brings its own `main`) the binary has two jobs:
///
/// - `ShareLedgerFuzz TARGET FILE|DIRECTORY...` runs every file through the target once and exits 0
///   when none fails: the corpus as a regression check without a fuzzing toolchain.
/// - `ShareLedgerFuzz seed DIRECTORY` writes the seed corpus (`Fuzz/corpus`) from a ledger it builds
///   in a temporary directory: every stored entry, every share URL and every export line of it, and
///   request bodies of every endpoint with numbers at the edges.
@main
struct Replay {
    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.first == "seed", arguments.count == 2 {
            do {
                try await Seeds.write(to: arguments[1])
            } catch {
                print("seeding failed: \(error)")
                exit(1)
            }
            return
        }
        guard let name = arguments.first, let target = FuzzTarget(rawValue: name) else {
            print("usage: ShareLedgerFuzz {\(FuzzTarget.allCases.map(\.rawValue).joined(separator: "|"))} FILE|DIRECTORY...")
            print("       ShareLedgerFuzz seed DIRECTORY")
            exit(2)
        }
        var files: [String] = []
        for path in arguments.dropFirst() {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
                print("no such file: \(path)")
                exit(2)
            }
            if isDirectory.boolValue {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
                files += names.sorted().map { path + "/" + $0 }
            } else {
                files.append(path)
            }
        }
        for file in files {
            guard let data = FileManager.default.contents(atPath: file) else { continue }
            data.withUnsafeBytes { target.run($0) }
        }
        print("\(target.rawValue): \(files.count) inputs replayed, none failed")
    }
}

/// The seed corpus: real entries, URLs and lines of a ledger that went through every kind of event.
enum Seeds {
    /// A seeded random source, so that the seeds are the same on every run.
    final class Random: LedgerRandomSource, @unchecked Sendable {
        // @unchecked: `state` is guarded by `lock`.
        private let lock = NSLock()
        private var state: UInt64 = 0x5EED
        func next() -> UInt64 {
            lock.lock()
            defer { lock.unlock() }
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// A clock that moves 1 ms per reading from a fixed instant.
    final class Clock: LedgerClock, @unchecked Sendable {
        // @unchecked: `now` is guarded by `lock`.
        private let lock = NSLock()
        private var now: Int64 = 1_760_000_000_000_000
        func nowMicros() -> Int64 {
            lock.lock()
            defer { lock.unlock() }
            now += 1_000
            return now
        }
    }

    static func write(to directory: String) async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("shareledger-seeds-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let history = try await makeHistory(scratch)
        let seeds = SeedFolder(directory: directory)
        try writeEnvelopes(history.envelopes, seeds)
        let urls = try writeURLs(history.shares, seeds)
        let lines = try writeNDJSON(history.export, seeds)

        // HTTP: a body of every endpoint with numbers at and beyond every bound.
        let bodies = HTTPBodyFuzzing.seeds
        for (name, input) in bodies { try seeds.put("http", name, input) }
        print("seeded \(history.envelopes.count) entries, \(urls) URLs, \(lines) lines, \(bodies.count) bodies into \(directory)")
    }

    /// What the seeds are drawn from: a ledger's every entry, its export, and its two shares.
    struct History {
        var envelopes: [EventEnvelope]
        var export: Data
        var shares: (hierarchy: Share, zone: Share)
    }

    /// Runs every kind of share action (and a raw append) on a new ledger at `scratch` and returns
    /// its entries and export.
    private static func makeHistory(_ scratch: String) async throws -> History {
        var configuration = ShareLedger.Configuration(path: scratch, durability: .unsafeNoSync, clock: Clock())
        configuration.randomSource = Random()
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        let container = "iCloud.com.example.notes"
        try await ledger.registerUser("_alice", in: container, emailAddress: "alice@example.com")
        try await ledger.registerUser("_bob", in: container, emailAddress: "bob@example.com", phoneNumber: "+1 555 0100")
        try await ledger.registerUser(
            "_carol", in: container, emailAddress: "carol@example.com",
            nameComponents: { var n = PersonNameComponents(); n.givenName = "Carol"; n.familyName = "Ünïcødé"; return n }())
        let alice = ledger.container(container, userRecordName: "_alice")
        let bob = ledger.container(container, userRecordName: "_bob")
        let carol = ledger.container(container, userRecordName: "_carol")
        let notes = RecordZoneID(zoneName: "Notes")
        let trips = RecordZoneID(zoneName: "Trips")
        _ = try await alice.save(RecordZone(zoneID: notes))
        _ = try await alice.save(RecordZone(zoneID: trips))
        let list = RecordID(recordName: "list", zoneID: notes)
        _ = try await alice.save(
            Record(recordType: "List", recordID: list, fields: [
                "title": .string("Groceries 🛒"), "count": .int64(-3), "ratio": .double(0.5), "due": .date(Date(timeIntervalSince1970: 0)),
                "blob": .bytes([0, 1, 2, 255]), "tags": .list([.string("a"), .int64(1)]),
            ]))
        _ = try await alice.save(
            Record(recordType: "Item", recordID: RecordID(recordName: "item", zoneID: notes), fields: ["link": .reference(list)], parent: list))
        let share = try await alice.share(rootRecord: list, title: "Nora's list")
        _ = try await alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readWrite, to: share.url)
        _ = try await alice.addParticipant(LookupInfo(emailAddress: "dave@elsewhere.org"), permission: .readOnly, to: share.url)
        _ = try await bob.accept(try await bob.shareMetadata(for: share.url))
        _ = try await ledger.completeResidualTasks()
        let verification = try await carol.requestParticipantVerification(for: share.url, lookupInfo: LookupInfo(emailAddress: "dave@elsewhere.org"))
        _ = try await carol.verifyParticipant(for: share.url, code: verification.code)
        _ = try await carol.accept(try await carol.shareMetadata(for: share.url))
        let bobID = try alice.share(for: share.url).participants.first { $0.userIdentity.userRecordID?.recordName == "_bob" }?.participantID ?? ""
        _ = try await alice.setPermission(.readOnly, role: .administrator, forParticipant: bobID, in: share.url)
        _ = try await alice.setTitle("Title with \"quotes\" and \\ and \u{1}", for: share.url)
        _ = try? await ledger.container(container, userRecordName: "_nobody").shareMetadata(for: share.url)
        _ = try await alice.removeParticipant(bobID, from: share.url)
        try await carol.leaveShare(share.url)
        _ = try await ledger.completeResidualTasks()
        let zoneShare = try await alice.share(recordZoneID: trips, title: "Trips", publicPermission: .readOnly)
        _ = try await alice.setPublicPermission(.readWrite, for: zoneShare.url)
        _ = try await bob.accept(try await bob.shareMetadata(for: zoneShare.url))
        _ = try await ledger.completeResidualTasks()
        try await alice.deleteRecord(withID: RecordID(recordName: "item", zoneID: notes))
        try await alice.deleteShare(share.url)
        try await alice.deleteRecordZone(withID: trips)
        _ = try await ledger.completeResidualTasks()
        try await ledger.log.append(
            [EventDraft(type: "com.example.Note", payload: Array("a raw append".utf8))], to: "notes",
            metadata: CommandMetadata(commandID: UUID(), container: container, actor: "tool", correlationID: UUID(), causationID: UUID()))

        let envelopes = try ledger.log.events(after: .start, limit: 10_000)
        let exportFile = scratch + "-export.ndjson"
        _ = FileManager.default.createFile(atPath: exportFile, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: exportFile) }
        if let handle = FileHandle(forWritingAtPath: exportFile) {
            try LedgerAudit(ledger).export(to: handle)
            try handle.close()
        }
        let export = FileManager.default.contents(atPath: exportFile) ?? Data()
        await ledger.close()
        return History(envelopes: envelopes, export: export, shares: (share, zoneShare))
    }

    /// The folder of each fuzz target's seeds.
    struct SeedFolder {
        let directory: String

        /// Writes `bytes` as the seed `name` of `target`.
        func put(_ target: String, _ name: String, _ bytes: [UInt8]) throws {
            let folder = directory + "/" + target
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            try Data(bytes).write(to: URL(fileURLWithPath: folder + "/" + name))
        }
    }

    /// Envelopes: every stored entry; every domain payload behind its type selector; edge cases.
    private static func writeEnvelopes(_ envelopes: [EventEnvelope], _ seeds: SeedFolder) throws {
        let put = seeds.put
        let types = FuzzingEntryPoints.domainEventTypes
        var payloadsSeen = Set<String>()
        for envelope in envelopes {
            let stored = FuzzingEntryPoints.storedBytes(envelope)
            let short = envelope.eventType.split(separator: ".").last.map(String.init) ?? "raw"
            try put("envelope", String(format: "entry-%03d-%@", envelope.position.rawValue, short), stored)
            if let index = types.firstIndex(of: envelope.eventType), payloadsSeen.insert(short).inserted {
                try put("envelope", "payload-\(short)", [1, UInt8(index)] + envelope.payload)
            }
        }
        if let first = envelopes.first {
            let stored = FuzzingEntryPoints.storedBytes(first)
            try put("envelope", "edge-truncated", Array(stored.prefix(stored.count / 2)))
            try put("envelope", "edge-hash-twice", Array(stored.dropLast(34)) + Array(stored.suffix(34)) + Array(stored.suffix(34)))
            try put("envelope", "edge-no-hash", Array(stored.dropLast(34)))
        }
        try put("envelope", "edge-empty", [])
        try put("envelope", "edge-hash-only", [0x7A, 0x20] + [UInt8](repeating: 0, count: 32))
        try put("envelope", "edge-varint-overlong", [0x08] + [UInt8](repeating: 0xFF, count: 11) + [0x7A, 0x20] + [UInt8](repeating: 0, count: 32))
    }

    /// URLs: every share URL the ledger made, and the forms a parser meets. Returns how many.
    private static func writeURLs(_ shares: (hierarchy: Share, zone: Share), _ seeds: SeedFolder) throws -> Int {
        let (share, zoneShare) = shares
        let token = share.token.text
        let urls = [
            share.url.absoluteString, zoneShare.url.absoluteString, "http://share.localhost/share/\(token)",
            "HTTPS://SHARE.LOCALHOST/share/\(token)?x=1#T", "https://www.icloud.com/share/\(token)#Nora_s_list",
            "https://share.localhost/share/%30\(token.dropFirst())", "https://user:pw@[::1]:8443/share/\(token)/",
            "https://share.localhost/share/\(token)/extra", "https://share.localhost//share//\(token)",
            "https://share.localhost/share/", "ftp://share.localhost/share/\(token)", "file:///share/\(token)",
            token, "0", "", "https://share.localhost/share/\(token)?" + String(repeating: "q", count: 2_100),
            "https://xn--nxasmq6b.example/share/\(token)", "https://share.localhost/share/0AAAAAAAAAAAAAAAAAAAAAAAA\u{301}",
        ]
        for (index, url) in urls.enumerated() { try seeds.put("url", String(format: "url-%02d", index), Array(url.utf8)) }
        return urls.count
    }

    /// NDJSON: every line of the export, and edge cases. Returns how many lines the export has.
    private static func writeNDJSON(_ export: Data, _ seeds: SeedFolder) throws -> Int {
        let lines = export.split(separator: UInt8(ascii: "\n"))
        for (index, line) in lines.enumerated() { try seeds.put("ndjson", String(format: "line-%03d", index + 1), Array(line)) }
        try seeds.put("ndjson", "edge-empty", [])
        try seeds.put("ndjson", "edge-null", Array("null".utf8))
        try seeds.put("ndjson", "edge-object", Array("{}".utf8))
        return lines.count
    }
}
#endif
