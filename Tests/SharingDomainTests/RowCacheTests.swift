import EventLog
import Foundation
import SharingDomain
import Testing

@Suite("The writer's row cache")
struct RowCacheTests {
    private let shares = ReadModels.unattached.shares
    private let outbox = ReadModels.unattached.outbox

    private func share(_ title: String) -> CachedRow {
        var state = ShareState()
        state.title = title
        return .share(state)
    }

    private func notice(serial: UInt64, id: UInt64, appended: Bool = true, everything: Bool = false) -> CommitNotice {
        CommitNotice(transactionID: id, appended: appended, invalidatedKeys: [], invalidatedEverything: everything, serial: serial)
    }

    private func title(_ cache: RowCache, _ key: String) -> String?? {
        cache.row(ShareState.self, shares, Array(key.utf8)).map { $0.map(\.title) }
    }

    @Test("a key held as a string (a share's token) and the same bytes held as an array are one key")
    func textAndByteKeys() {
        let cache = RowCache()
        cache.begin(serial: 1, transactionID: 10)
        for name in ["a", "T0K3N", "a token longer than fifteen bytes", "é"] {
            let text = RowCache.Key(db: shares.index, text: name)
            let bytes = RowCache.Key(db: shares.index, key: Array(name.utf8))
            #expect(text == bytes)
            #expect(text.hashValue == bytes.hashValue)
            #expect(text != RowCache.Key(db: outbox.index, text: name))
            #expect(text != RowCache.Key(db: shares.index, key: Array(name.utf8) + [0]))
            cache.keep(text, share(name))
            #expect(title(cache, name) == .some(name))
            cache.keep(shares, Array(name.utf8), share(name + "!"))
            #expect(cache.row(ShareState.self, text).map { $0.map(\.title) } == .some(name + "!"))
        }
    }

    @Test("knowing a row by two names looks up the key of their bytes with a 0 between (a user's row), and keeps nothing")
    func knowsByTwoNames() {
        let cache = RowCache()
        cache.begin(serial: 1, transactionID: 10)
        cache.keep(shares, Array("iCloud.c\u{0}_alice".utf8), share("a"))
        cache.keep(shares, Array("iCloud.c\u{0}_gone".utf8), nil)
        #expect(cache.knows(shares, "iCloud.c", "_alice") == true)
        #expect(cache.knows(shares, "iCloud.c", "_gone") == false)
        #expect(cache.knows(shares, "iCloud.c", "_bob") == nil)
        #expect(cache.knows(shares, "iCloud.c\u{0}_alice", "") == nil)
        #expect(cache.knows(shares, "iCloud.", "c\u{0}_alice") == nil)
        #expect(cache.knows(outbox, "iCloud.c", "_alice") == nil)
        // Asked again after other lookups (the buffer is reused): the same answers.
        #expect(cache.knows(shares, "iCloud.c", "_alice") == true)
        #expect(title(cache, "iCloud.c\u{0}_alice") == .some("a"))
    }

    @Test("rows of a committed transaction are kept for the next; an aborted one's never are")
    func commitAndAbort() {
        let cache = RowCache()
        cache.begin(serial: 1, transactionID: 10)
        cache.keep(shares, Array("a".utf8), share("one"))
        cache.keep(shares, Array("gone".utf8), nil)
        #expect(title(cache, "a") == .some("one"))
        cache.committed(notice(serial: 1, id: 10))

        cache.begin(serial: 2, transactionID: 11)
        #expect(title(cache, "a") == .some("one"))
        #expect(title(cache, "gone") == .some(nil))  // known absent
        cache.keep(shares, Array("a".utf8), share("two"))
        #expect(title(cache, "a") == .some("two"))
        // Serial 2 aborts: no notice. The next transaction gets LMDB id 11 again, and must not see "two".
        cache.begin(serial: 3, transactionID: 11)
        #expect(title(cache, "a") == .some("one"))
        cache.committed(notice(serial: 3, id: 11))
        cache.begin(serial: 4, transactionID: 12)
        #expect(title(cache, "a") == .some("one"))
    }

    @Test("a row the cache cannot hold makes its key unknown, not absent; an abort brings back what was kept")
    func rowWithoutCachedForm() {
        let cache = RowCache()
        cache.begin(serial: 1, transactionID: 10)
        cache.keep(shares, Array("a".utf8), share("one"))
        cache.committed(notice(serial: 1, id: 10))
        cache.begin(serial: 2, transactionID: 11)
        var record = RecordState()
        record.recordType = "Board"
        cache.keep(shares, Array("a".utf8), row: record)
        #expect(title(cache, "a") == nil)
        #expect(cache.knows(shares, Array("a".utf8)) == nil)
        cache.keep(shares, Array("b".utf8), row: ShareState?.none)
        #expect(cache.knows(shares, Array("b".utf8)) == false)
        // Serial 2 aborts: the share kept before it is known again.
        cache.begin(serial: 3, transactionID: 11)
        #expect(title(cache, "a") == .some("one"))
        #expect(cache.knows(shares, Array("b".utf8)) == nil)
    }

    @Test("a commit the cache did not see (another process, or work without it) empties it")
    func gapsAndMaintenance() {
        let cache = RowCache()
        cache.begin(serial: 1, transactionID: 10)
        cache.keep(shares, Array("a".utf8), share("one"))
        cache.committed(notice(serial: 1, id: 10))
        // Transaction 11 was someone else's.
        cache.begin(serial: 2, transactionID: 12)
        #expect(title(cache, "a") == nil)

        cache.keep(shares, Array("a".utf8), share("one"))
        cache.committed(notice(serial: 2, id: 12))
        // A commit of this writer without the cache (bookkeeping, raw appends) also counts as unseen.
        cache.committed(notice(serial: 99, id: 13))
        cache.begin(serial: 4, transactionID: 14)
        #expect(title(cache, "a") == nil)

        cache.keep(shares, Array("a".utf8), share("one"))
        cache.committed(notice(serial: 4, id: 14, everything: true))  // maintenance in the same batch
        cache.begin(serial: 5, transactionID: 15)
        #expect(title(cache, "a") == nil)
    }

    @Test("a transaction that wrote nothing leaves its id to the next; rows of other types or databases are not given")
    func nothingWritten() {
        let cache = RowCache()
        cache.begin(serial: 1, transactionID: 10)
        cache.keep(shares, Array("a".utf8), share("one"))
        cache.committed(notice(serial: 1, id: 10, appended: false))
        cache.begin(serial: 2, transactionID: 10)
        #expect(title(cache, "a") == .some("one"))
        #expect(cache.row(ParticipantState.self, shares, Array("a".utf8)) == nil)
        #expect(!RowCache.keeps(outbox) && RowCache.keeps(shares))
        for table in ReadModelTable.catalog {
            #expect(RowCache.keeps(table) == (ReadModels.compactRowTypes[table.name] != nil), "\(table.name)")
        }
    }

    @Test("bounded: past its capacity it starts over, and never keeps a committed row a pending change replaced")
    func capacity() {
        let cache = RowCache(capacity: 4)
        cache.begin(serial: 1, transactionID: 10)
        cache.keep(shares, Array("a".utf8), share("one"))
        cache.committed(notice(serial: 1, id: 10))
        cache.begin(serial: 2, transactionID: 11)
        cache.keep(shares, Array("a".utf8), share("two"))
        for index in 0..<4 { cache.keep(shares, Array("x\(index)".utf8), share("x")) }
        cache.committed(notice(serial: 2, id: 11))
        cache.begin(serial: 3, transactionID: 12)
        #expect(title(cache, "a") != .some("one"))
    }
}
