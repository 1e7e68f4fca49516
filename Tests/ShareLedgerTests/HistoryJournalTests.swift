import ByteKeys
import Foundation
import LMDB
@testable import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

@Suite("History journal and unversioned fetches")
struct HistoryJournalTests {
    /// An entry of names drawn from `names`: up to 2 tokens, up to 3 users.
    static func randomEntry(_ names: [String], using random: inout SplitMix64) -> HistoryJournalEntry {
        HistoryJournalEntry(
            container: names.randomElement(using: &random)!,
            tokens: (0..<Int.random(in: 0...2, using: &random)).map { _ in names.randomElement(using: &random)! },
            users: (0..<Int.random(in: 0...3, using: &random)).map { _ in names.randomElement(using: &random)! })
    }

    @Test("a journal entry round-trips, and damaged bytes are a typed error, not a trap")
    func entryCodec() throws {
        let entry = HistoryJournalEntry(container: "iCloud.c", tokens: ["T0K3N"], users: ["_alice", "_bob"])
        let bytes = entry.encoded()
        #expect(try bytes.withUnsafeBytes { try HistoryJournalEntry(decoding: $0) } == entry)
        for cut in 0..<bytes.count {
            #expect(throws: LedgerError.self) { try Array(bytes.prefix(cut)).withUnsafeBytes { try HistoryJournalEntry(decoding: $0) } }
        }
        var wrongLayout = bytes
        wrongLayout[0] = 2
        #expect(throws: LedgerError.self) { try wrongLayout.withUnsafeBytes { try HistoryJournalEntry(decoding: $0) } }
        #expect(throws: LedgerError.self) { try (bytes + [0]).withUnsafeBytes { try HistoryJournalEntry(decoding: $0) } }
    }

    @Test("the projection's entry (one token at most, two users at most, held inline) is byte for byte the entry of the same fields")
    func inlineEntryEncoding() throws {
        var random = SplitMix64(state: 0x7A0)
        let names = ["", "a", "_alice", "_bob", "T0K3N", "a name longer than fifteen bytes", String(repeating: "é", count: 40)]
        for _ in 0..<500 {
            let container = names.randomElement(using: &random)!
            let token = Bool.random(using: &random) ? names.randomElement(using: &random)! : nil
            let a = Bool.random(using: &random) ? names.randomElement(using: &random)! : nil
            let b = Bool.random(using: &random) ? names.randomElement(using: &random)! : nil
            let users = TwoNames(a, b)
            var listed: [String] = []
            users.forEach { listed.append($0) }
            #expect(listed == [a, b].compactMap { $0 })
            #expect(users.count == listed.count)
            let entry = HistoryJournalEntry(container: container, tokens: token.map { [$0] } ?? [], users: listed)
            let bytes = HistoryJournalEntry.encode(container: container, token: token, users: users)
            #expect(bytes == entry.encoded())
            #expect(try bytes.withUnsafeBytes { try HistoryJournalEntry(decoding: $0) } == entry)
        }
    }

    @Test("testing an encoded entry for an index key in place agrees with decoding it, and never traps on damage")
    func namesInPlace() throws {
        var random = SplitMix64(state: 0x5EED)
        let names = ["", "a", "ab", "_alice", "_al", "T0K3N", "T0K", "iCloud.c", "iCloud.c\u{0}_alice"]
        for _ in 0..<400 {
            let entry = Self.randomEntry(names, using: &random)
            let bytes = entry.encoded()
            let listed = entry.indexKeys()
            var candidates = listed
            for name in names {
                for index in 0..<3 { candidates.append((index, Array(name.utf8))) }
                candidates.append((1, ReadModels.userKey(entry.container, name)))
                candidates.append((1, ReadModels.userKey(name, "_alice")))
            }
            for (index, key) in candidates {
                let expected = listed.contains { $0.index == index && $0.key == key }
                #expect(try bytes.withUnsafeBytes { try HistoryJournalEntry.names(index: index, key: key, in: $0) } == expected)
            }
            for cut in 0..<bytes.count {
                _ = try? Array(bytes.prefix(cut)).withUnsafeBytes { try HistoryJournalEntry.names(index: 1, key: [0], in: $0) }
            }
        }
    }

    @Test("the fold's moves read from an entry's bytes are its index keys, non-ASCII and invalid UTF-8 names included")
    func movesInPlace() throws {
        var random = SplitMix64(state: 0xF01D)
        let names = ["", "a", "_alice", "T0K3N", "iCloud.c", "Zoë", "名前", "x\u{0}y"]
        for round in 0..<300 {
            let entry = Self.randomEntry(names, using: &random)
            var bytes = entry.encoded()
            if round % 10 == 0, let last = bytes.indices.last, bytes.count > 4 {
                bytes[last] = 0xC3  // a cut multi-byte sequence: not UTF-8, decoded with a replacement
            }
            guard let decoded = try? bytes.withUnsafeBytes({ try HistoryJournalEntry(decoding: $0) }) else { continue }
            var keys: [UInt8] = []
            var moves: [HistoryJournalEntry.Move] = []
            try bytes.withUnsafeBytes { try HistoryJournalEntry.appendMoves(of: $0, position: 7, keys: &keys, moves: &moves) }
            let listed = moves.map { (index: $0.db, key: Array(keys[$0.start..<$0.start + $0.count])) }
            let expected = decoded.indexKeys()
            #expect(listed.count == expected.count && zip(listed, expected).allSatisfy { $0.index == $1.index && $0.key == $1.key })
            #expect(moves.allSatisfy { $0.position == 7 })
            for cut in 0..<bytes.count {
                var k: [UInt8] = []
                var m: [HistoryJournalEntry.Move] = []
                _ = try? Array(bytes.prefix(cut)).withUnsafeBytes { try HistoryJournalEntry.appendMoves(of: $0, position: 1, keys: &k, moves: &m) }
            }
        }
    }

    @Test("histories span folded and journaled events; the fold empties the journal; audit and rebuild agree")
    func foldAcrossThreshold() async throws {
        let (f, share) = try await SharingFixture.withShare(inviting: LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly)
        let models = f.ledger.models
        let store = f.ledger.log.store
        // Enough fetches to fold the journal at least once, and leave some entries in it.
        let fetches = ReadModels.historyFoldThreshold + 100
        for _ in 0..<fetches { _ = try await f.bob.shareMetadata(for: share.url) }
        let (journal, indexed) = try store.environment.read { txn in
            (try txn.statistics(models.historyJournal).entries, try txn.statistics(models.shareHistory).entries)
        }
        #expect(journal > 0 && journal < ReadModels.historyFoldThreshold)
        #expect(indexed > 0)

        // Every event about the share, in order, once: folded ones then journaled ones.
        let history = try LedgerAudit(f.ledger).history(of: .share(share.url))
        let positions = history.map(\.envelope.position.rawValue)
        #expect(positions == positions.sorted() && Set(positions).count == positions.count)
        #expect(history.filter { $0.name == "ShareMetadataFetched" }.count == fetches)
        let bobs = try LedgerAudit(f.ledger).history(of: .user("_bob", container: SharingFixture.container))
        #expect(bobs.filter { $0.name == "ShareMetadataFetched" }.count == fetches)
        let all = try LedgerAudit(f.ledger).history(of: .container(SharingFixture.container))
        #expect(UInt64(all.count) == (try f.ledger.statistics().events))
        // A window that starts inside the journal.
        let tail = try LedgerAudit(f.ledger).history(of: .share(share.url), since: .position(LogPosition(positions[positions.count - 3])))
        #expect(tail.map(\.envelope.position.rawValue) == Array(positions.suffix(3)))
        // A limit that ends inside the index.
        #expect(try LedgerAudit(f.ledger).history(of: .share(share.url), limit: 5).map(\.envelope.position.rawValue) == Array(positions.prefix(5)))

        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok, "\(report.problems)")
        try await LedgerAudit(f.ledger).rebuildReadModels()
        #expect(try LedgerAudit(f.ledger).history(of: .share(share.url)).map(\.envelope.position.rawValue) == positions)
        await f.ledger.close()
    }

    /// Every entry of the three history indexes, as text, in order.
    static func indexed(_ txn: borrowing some ReadModelStore & ~Copyable, _ models: ReadModels) throws -> [[String]] {
        var all: [[String]] = []
        for table in models.historyIndexes {
            var out: [String] = []
            try txn.visit(table, from: nil) { key, value in
                out.append("\(Array(key)) \(Array(value))")
                return true
            }
            all.append(out)
        }
        return all
    }

    @Test("a fold (one cursor per index, each key's positions in one call) writes exactly the index entries of each journal entry, put one by one, among entries already indexed, whether its positions sort after them or not")
    func foldThroughCursorsMatchesPuts() async throws {
        let (f, share) = try await SharingFixture.withShare()
        for _ in 0..<5 { _ = try? await f.carol.shareMetadata(for: share.url) }
        _ = try await f.ledger.maintain { txn in try f.ledger.models.foldHistory(txn) }
        let lmdb = f.ledger.models
        let memory = InMemoryReadModelStore()
        let unattached = ReadModels.unattached
        // Names that sort among those already indexed (the fixture's container, token and users).
        let names = [SharingFixture.container, share.token.text, "_alice", "_bob", "_carol", "a", "zz", "\u{e9}t\u{e9}", ""]
        var random = SplitMix64(state: 36)
        let entries = (0..<600).map { _ in Self.randomEntry(names, using: &random) }
        let folded = try f.ledger.log.store.environment.write { txn -> [[String]] in
            // The same index entries in memory as in LMDB, then the same journal in both.
            for (table, copy) in zip(lmdb.historyIndexes, unattached.historyIndexes) {
                try txn.visit(table, from: nil) { key, value in
                    try memory.put(copy, key: key, value: value, flags: [])
                    return true
                }
            }
            for (offset, entry) in entries.enumerated() {
                // The first hundred at positions among those indexed already (some the same): a key's
                // positions then do not all sort after its last, and go one by one.
                let position = offset < 100 ? UInt64(1 + offset) : UInt64(1_000_000 + offset)
                try BigEndian.withBytes(of: position) { key in
                    try entry.encoded().withUnsafeBytes { value in
                        try txn.put(lmdb.historyJournal, key: key, value: value, flags: [])
                    }
                    // What the fold must write, put one by one in memory from the decoded entry's
                    // index keys (an empty name has no key: nothing is indexed under it).
                    for (index, indexKey) in entry.indexKeys() where !indexKey.isEmpty {
                        try memory.put(unattached.historyIndexes[index], key: indexKey, value: Array(key))
                    }
                }
            }
            #expect(try lmdb.foldHistory(txn) > 0)
            #expect(try txn.entryCount(lmdb.historyJournal) == 0)
            return try Self.indexed(txn, lmdb)
        }
        let expected = try Self.indexed(memory, unattached)
        #expect(folded.map { $0.count } == expected.map { $0.count })
        for (index, (got, want)) in zip(folded, expected).enumerated() {
            let first = zip(got, want).first { $0 != $1 }
            #expect(got == want, "history index \(index): \(first.map { "\($0.0) where \($0.1) was expected" } ?? "a different count")")
        }
        #expect(folded.reduce(0) { $0 + $1.count } > 1_000)
        await f.ledger.close()
    }

    @Test("read models with every history entry in the indexes (before the journal) match their rebuild")
    func unfoldedMatchesFolded() async throws {
        let (f, share) = try await SharingFixture.withShare()
        // Carol is not invited: each fetch fails, and is logged all the same.
        for _ in 0..<10 { _ = try? await f.carol.shareMetadata(for: share.url) }
        // As a ledger written before the journal would hold them: fold everything now.
        let moved = try await f.ledger.maintain { txn in try f.ledger.models.foldHistory(txn) }
        #expect(moved > 0)
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok && report.projectionsMatch, "\(report.problems)")
        // But a lost index entry is still a difference.
        _ = try f.ledger.log.store.environment.write { txn in
            try txn.delete(f.ledger.models.shareHistory, key: Array(share.token.text.utf8))
        }
        let damaged = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(damaged.projectionDifferences.keys.contains("idx_share_history"))
        await f.ledger.close()
    }

    @Test("a logged fetch is unversioned: it writes no stream record, and audit, export and import accept it")
    func unversionedFetch() async throws {
        let (f, share) = try await SharingFixture.withShare()
        let streamsBefore = try f.ledger.log.store.environment.read { txn in try txn.statistics(f.ledger.log.store.streams).entries }
        // A refused fetch (Carol is not invited) is logged too.
        _ = try? await f.carol.shareMetadata(for: share.url)
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: "bob@example.com"), permission: .readOnly, to: share.url)
        _ = try await f.bob.shareMetadata(for: share.url)
        let streamsAfter = try f.ledger.log.store.environment.read { txn in try txn.statistics(f.ledger.log.store.streams).entries }
        #expect(streamsAfter == streamsBefore)
        let fetches = try f.ledger.log.events(after: .start, limit: .max).filter { $0.eventType.hasSuffix("ShareMetadataFetched") }
        #expect(fetches.map(\.stream) == ["user/_carol", "user/_bob"])
        #expect(fetches.allSatisfy { $0.streamVersion == 0 && $0.streamPreviousPosition.rawValue == 0 })
        // Bob accepts: the accept is a versioned event whatever fetches came before.
        _ = try await f.bob.accept(try await f.bob.shareMetadata(for: share.url))
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok && report.indexesMatch, "\(report.problems)")

        let export = f.dir.child("export.ndjson")
        _ = FileManager.default.createFile(atPath: export, contents: nil)
        let out = try FileHandle(forWritingTo: URL(fileURLWithPath: export))
        try LedgerAudit(f.ledger).export(to: out)
        try out.close()
        var configuration = ShareLedger.Configuration(path: f.dir.child("copy"), durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        let copy = try ShareLedger.open(configuration)
        let input = try #require(FileHandle(forReadingAtPath: export))
        _ = try await LedgerAudit(copy).importLog(from: input)
        try input.close()
        #expect(try copy.readModelDigest().digest == (try f.ledger.readModelDigest().digest))
        #expect(try LedgerAudit(copy).audit(scratchPath: f.dir.child("scratch2")).ok)
        await copy.close()
        await f.ledger.close()
    }
}
