import ByteKeys
import CLMDB
import Foundation
import LMDB
import TestSupport
import Synchronization
import Testing

@Suite("LMDB wrapper")
struct EnvironmentTests {
    private func open(_ path: String, mapSize: Int = 1 << 20, maxMapSize: Int? = nil) throws -> Environment {
        try Environment(
            options: EnvironmentOptions(path: path, mapSize: mapSize, maxMapSize: maxMapSize, durability: .unsafeNoSync))
    }

    @Test("a write commits when its closure returns and a read sees it")
    func writeCommitsOnReturn() throws {
        let dir = TemporaryDirectory()
        let env = try open(dir.path)
        let db = try env.openDatabases([("things", [])])[0]
        try env.write { txn in try txn.put(db, key: Array("a".utf8), value: Array("1".utf8)) }
        let value = try env.read { txn in try txn.get(db, key: Array("a".utf8)) }
        #expect(value == Array("1".utf8))
    }

    @Test("a write whose closure throws stores nothing")
    func writeAbortsOnThrow() throws {
        struct Boom: Error {}
        let dir = TemporaryDirectory()
        let env = try open(dir.path)
        let db = try env.openDatabases([("things", [])])[0]
        #expect(throws: Boom.self) {
            try env.write { txn in
                try txn.put(db, key: Array("a".utf8), value: Array("1".utf8))
                throw Boom()
            }
        }
        #expect(try env.read { txn in try txn.get(db, key: Array("a".utf8)) } == nil)
    }

    @Test("the first LMDB error wins even when the closure swallows it")
    func firstErrorWins() throws {
        let dir = TemporaryDirectory()
        let env = try open(dir.path)
        let db = try env.openDatabases([("log", [])])[0]
        try env.write { txn in
            try txn.put(db, key: BigEndian.bytes(of: UInt64(5)), value: [1])
        }
        let error = #expect(throws: LMDBError.self) {
            try env.write { txn in
                try txn.put(db, key: BigEndian.bytes(of: UInt64(6)), value: [2])
                // Out of order for MDB_APPEND: fails with MDB_KEYEXIST; the closure ignores it.
                _ = try? txn.put(db, key: BigEndian.bytes(of: UInt64(1)), value: [3], flags: .append)
                try txn.put(db, key: BigEndian.bytes(of: UInt64(7)), value: [4])
            }
        }
        #expect(error?.code == .keyExists)
        let count = try env.read { txn in try txn.statistics(db).entries }
        #expect(count == 1, "nothing of the failed transaction may be committed")
    }

    @Test("MDB_APPEND and MDB_APPENDDUP refuse keys and values out of order")
    func appendFlags() throws {
        let dir = TemporaryDirectory()
        let env = try open(dir.path)
        let dbs = try env.openDatabases([("log", []), ("index", [.dupSort, .dupFixed])])
        let (log, index) = (dbs[0], dbs[1])
        try env.write { txn in
            try txn.withCursor(log) { cursor in
                for position in UInt64(1)...100 {
                    try BigEndian.withBytes(of: position) { try cursor.put(key: $0, value: $0, flags: .append) }
                }
            }
            try txn.withCursor(index) { cursor in
                let key = Array("stream".utf8)
                for position in UInt64(1)...100 {
                    try key.withUnsafeBytes { k in
                        try BigEndian.withBytes(of: position) { try cursor.put(key: k, value: $0, flags: .appendDup) }
                    }
                }
            }
        }
        let appendError = #expect(throws: LMDBError.self) {
            try env.write { txn in try txn.put(log, key: BigEndian.bytes(of: UInt64(50)), value: [0], flags: .append) }
        }
        #expect(appendError?.code == .keyExists)
        let dupError = #expect(throws: LMDBError.self) {
            try env.write { txn in
                try txn.put(index, key: Array("stream".utf8), value: BigEndian.bytes(of: UInt64(7)), flags: .appendDup)
            }
        }
        #expect(dupError?.code == .keyExists)
        let (count, last) = try env.read { txn in
            try txn.withCursor(index) { cursor -> (Int, UInt64?) in
                let entry = try Array("stream".utf8).withUnsafeBytes { try cursor.seek(exactly: $0) }
                #expect(entry != nil)
                let count = try cursor.duplicateCount()
                let last = try cursor.lastDuplicate().flatMap { BigEndian.uint64($0.value) }
                return (count, last)
            }
        }
        #expect(count == 100)
        #expect(last == 100)
    }

    @Test("adding many values to a key in one call stores what one put per value stores: in order, out of order, repeated, checksummed or not")
    func addDuplicatesMatchesPuts() throws {
        for checksummed in [false, true] {
            let dir = TemporaryDirectory()
            let env = try open(dir.path)
            let dbs = try env.openDatabases([("many", [.dupSort, .dupFixed]), ("one", [.dupSort, .dupFixed])], checksummed: checksummed)
            let (many, one) = (dbs[0], dbs[1])
            var random = SplitMix64(state: checksummed ? 11 : 10)
            let keys = ["a", "b", "container", "user\u{0}_alice", "zz"].map { Array($0.utf8) }
            // Rounds of sorted runs per key: mostly above the key's values (the fold's case), some
            // starting below them, some with a value the key holds or repeated in the run; some long
            // enough to move the key's values from its node to a tree of their own.
            for round in 0..<40 {
                var runs: [(key: [UInt8], values: [UInt64])] = []
                for key in keys where random.next() % 3 != 0 {
                    let base = UInt64(round) * 1_000 + (random.next() % 5 == 0 ? 0 : 500)
                    let count = Int(random.next() % (round % 7 == 0 ? 400 : 12)) + 1
                    var values = (0..<count).map { _ in base + random.next() % 600 }
                    values.sort()
                    if random.next() % 4 == 0 { values.append(values.last!) }
                    runs.append((key, values))
                }
                try env.write { txn in
                    try txn.withCursor(many) { cursor in
                        for run in runs {
                            let bytes = run.values.flatMap { BigEndian.bytes(of: $0) }
                            try run.key.withUnsafeBytes { k in try bytes.withUnsafeBytes { try cursor.addDuplicates(key: k, values: $0, size: 8) } }
                        }
                    }
                    for run in runs {
                        for value in run.values { try txn.put(one, key: run.key, value: BigEndian.bytes(of: value)) }
                    }
                }
            }
            let (got, want) = try env.read { txn -> ([[UInt8]], [[UInt8]]) in
                var got: [[UInt8]] = []
                var want: [[UInt8]] = []
                try txn.visitEntries(many, from: nil) { key, value in
                    got.append(Array(key) + [0xFF] + Array(value))
                    return true
                }
                try txn.visitEntries(one, from: nil) { key, value in
                    want.append(Array(key) + [0xFF] + Array(value))
                    return true
                }
                return (got, want)
            }
            #expect(got.count > 2_000)
            #expect(got == want, "checksummed: \(checksummed)")
        }
    }

    @Test("a 64 KiB map grows on demand while 200k records are written")
    func mapGrowsOnDemand() throws {
        let dir = TemporaryDirectory()
        let env = try open(dir.path, mapSize: 64 << 10)
        let db = try env.openDatabases([("log", [])])[0]
        let startSize = try env.info().mapSize
        let value = [UInt8](repeating: 7, count: 200)
        var position: UInt64 = 0
        for _ in 0..<200 {
            try env.write { txn in
                try txn.withCursor(db) { cursor in
                    var local = position
                    for _ in 0..<1_000 {
                        local += 1
                        try BigEndian.withBytes(of: local) { k in
                            try value.withUnsafeBytes { try cursor.put(key: k, value: $0, flags: .append) }
                        }
                    }
                }
            }
            position += 1_000
        }
        let info = try env.info()
        #expect(startSize <= 64 << 10)
        #expect(info.mapSize > 40 << 20)
        #expect(try env.read { txn in try txn.statistics(db).entries } == 200_000)
    }

    @Test("reads begun again from idle handles see every commit before them, while the map grows and from many threads")
    func renewedReadsSeeLatest() throws {
        let dir = TemporaryDirectory()
        let env = try open(dir.path, mapSize: 64 << 10)
        let db = try env.openDatabases([("log", [])])[0]
        let filler = [UInt8](repeating: 7, count: 4_000)
        for round in 1...400 {
            try env.write { txn in
                try BigEndian.withBytes(of: UInt64(round)) { value in try txn.put(db, key: Array("last".utf8), value: Array(value)) }
                try txn.put(db, key: Array("filler\(round)".utf8), value: filler)
            }
            // Several reads per commit, one after another: all but the first begin from an idle handle.
            for _ in 0..<3 {
                let seen = try env.read { txn in try txn.get(db, key: Array("last".utf8)).flatMap { BigEndian.uint64($0) } }
                #expect(seen == UInt64(round))
            }
        }
        #expect(try env.info().mapSize > 1 << 20, "the map grew while idle handles waited")
        let failures = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<200 {
                let entries = try? env.read { txn in try txn.statistics(db).entries }
                if entries != 401 { failures.withLock { $0 += 1 } }
            }
        }
        #expect(failures.withLock { $0 } == 0)
        env.close()
        #expect(throws: LMDBError.self) { try env.read { _ in () } }
    }

    @Test("at the maximum size a write fails with storageFull, stores nothing, and reads go on")
    func storageFullAtMaximum() throws {
        let dir = TemporaryDirectory()
        let path = dir.path
        do {
            let env = try open(path, mapSize: 64 << 10, maxMapSize: 256 << 10)
            let db = try env.openDatabases([("blobs", [])])[0]
            try env.write { txn in try txn.put(db, key: Array("small".utf8), value: [UInt8](repeating: 1, count: 1_000)) }
            let error = #expect(throws: LMDBError.self) {
                try env.write { txn in
                    for index in 0..<100 {
                        try txn.put(db, key: Array("big-\(index)".utf8), value: [UInt8](repeating: 2, count: 8_000))
                    }
                }
            }
            #expect(error?.code == .storageFull)
            #expect(try env.read { txn in try txn.statistics(db).entries } == 1)
            #expect(try env.read { txn in try txn.get(db, key: Array("small".utf8)) }?.count == 1_000)
            env.close()
        }
        // Raising the limit lets the same write through.
        let env = try open(path, mapSize: 64 << 10, maxMapSize: 16 << 20)
        let db = try env.openDatabases([("blobs", [])])[0]
        try env.write { txn in
            for index in 0..<100 {
                try txn.put(db, key: Array("big-\(index)".utf8), value: [UInt8](repeating: 2, count: 8_000))
            }
        }
        #expect(try env.read { txn in try txn.statistics(db).entries } == 101)
    }

    @Test("a missing directory, a file and a garbage data.mdb give clear errors")
    func badPaths() throws {
        let dir = TemporaryDirectory()
        let missing = #expect(throws: LMDBError.self) { try open(dir.child("missing")) }
        #expect(missing?.code == .badPath)
        #expect(missing?.description.contains("does not exist") == true)

        let file = dir.child("file")
        _ = FileManager.default.createFile(atPath: file, contents: Data("hello".utf8))
        let notDirectory = #expect(throws: LMDBError.self) { try open(file) }
        #expect(notDirectory?.code == .badPath)

        let garbage = dir.makeChild("garbage")
        _ = FileManager.default.createFile(
            atPath: garbage + "/data.mdb", contents: Data((0..<65_536).map { UInt8(truncatingIfNeeded: $0 &* 7) }))
        let invalid = #expect(throws: LMDBError.self) { try open(garbage) }
        #expect(invalid?.code == .invalid)
    }

    @Test("operations on a closed environment fail with closed")
    func closedEnvironment() throws {
        let dir = TemporaryDirectory()
        let env = try open(dir.path)
        let db = try env.openDatabases([("things", [])])[0]
        env.close()
        env.close()
        let error = #expect(throws: LMDBError.self) { try env.read { txn in try txn.get(db, key: [1]) } }
        #expect(error?.code == .closed)
    }

    @Test("every LMDB return code maps to its own error code")
    func errorMapping() {
        let pairs: [(Int32, LMDBError.Code)] = [
            (MDB_KEYEXIST, .keyExists), (MDB_NOTFOUND, .notFound), (MDB_PAGE_NOTFOUND, .pageNotFound),
            (MDB_CORRUPTED, .corrupted), (MDB_PANIC, .panic), (MDB_VERSION_MISMATCH, .versionMismatch),
            (MDB_INVALID, .invalid), (MDB_MAP_FULL, .mapFull), (MDB_DBS_FULL, .databasesFull),
            (MDB_READERS_FULL, .readersFull), (MDB_TLS_FULL, .tlsFull), (MDB_TXN_FULL, .transactionFull),
            (MDB_CURSOR_FULL, .cursorFull), (MDB_PAGE_FULL, .pageFull), (MDB_MAP_RESIZED, .mapResized),
            (MDB_INCOMPATIBLE, .incompatible), (MDB_BAD_RSLOT, .badReaderSlot), (MDB_BAD_TXN, .badTransaction),
            (MDB_BAD_VALSIZE, .badValueSize), (MDB_BAD_DBI, .badDatabaseHandle), (ENOSPC, .system),
            (-12345, .unknown),
        ]
        for (rc, code) in pairs {
            let error = LMDBError(returnCode: rc, operation: "op", path: "/p")
            #expect(error.code == code, "return code \(rc)")
            #expect(!error.message.isEmpty)
            #expect(error.description.contains("/p"))
        }
        #expect(LMDBError(returnCode: ENOSPC, operation: "op").errno == ENOSPC)
    }

    @Test("a read-only environment reads what was written and refuses nothing it can do")
    func readOnlyOpen() throws {
        let dir = TemporaryDirectory()
        do {
            let env = try open(dir.path)
            let db = try env.openDatabases([("things", [])])[0]
            try env.write { txn in try txn.put(db, key: [1], value: [2]) }
            env.close()
        }
        let env = try Environment(options: EnvironmentOptions(path: dir.path, readOnly: true))
        let db = try env.openDatabases([("things", [])])[0]
        #expect(try env.read { txn in try txn.get(db, key: [1]) } == [2])
        #expect(try env.databaseNames() == ["things"])
    }

    @Test("twins: the switch, committed, moves every later transaction to the twins; transactions begun before keep what they saw")
    func twinsFollowTheSwitch() throws {
        let dir = TemporaryDirectory()
        let env = try open(dir.path)
        let opened = try env.openDatabases([("rows", []), ("switch", [])])
        let (rows, switchDB) = (try env.openTwins(of: [opened[0]])[0], opened[1])
        #expect(rows.hasTwin && !switchDB.hasTwin)
        #expect(try env.databaseNames() == ["rows", "rows~b", "switch"])
        env.setSwitch(switchDB, key: Array("set".utf8))
        let key = Array("k".utf8)

        // Filled side by side: the transactions use `rows`, a pinned handle names the twin.
        let unused = try env.write { txn -> (uses: Bool, database: Database) in
            try txn.put(rows, key: key, value: [1])
            try txn.put(txn.unused(rows), key: key, value: [2])
            return (txn.usesTwins, txn.unused(rows))
        }
        #expect(!unused.uses && unused.database.name == "rows~b" && !unused.database.hasTwin)
        #expect(try env.read { txn in try txn.get(rows, key: key) } == [1])

        // A reader that began before the switch keeps reading `rows` after it commits.
        let early: [UInt8]? = try env.read { before in
            try env.write { txn in try txn.put(switchDB, key: Array("set".utf8), value: [1]) }
            return try before.get(rows, key: key)
        }
        #expect(early == [1])
        let after = try env.read { txn in
            (txn.usesTwins, try txn.get(rows, key: key), try txn.get(txn.unused(rows), key: key),
             try txn.withCursor(rows) { try $0.first().map { Array($0.value) } })
        }
        #expect(after.0 && after.1 == [2] && after.2 == [1] && after.3 == [2])
        // Writes and nested writes go to the twin while the switch is set.
        let nestedUsesTwins = try env.write { txn in
            var uses = false
            _ = try txn.nested { inner in
                uses = inner.usesTwins
                try inner.put(rows, key: key, value: [3])
                return true
            }
            return uses
        }
        #expect(nestedUsesTwins)
        #expect(try env.read { txn in try txn.get(txn.pinned(rows, twin: true), key: key) } == [3])
        // Any value but 1 is unset.
        try env.write { txn in try txn.put(switchDB, key: Array("set".utf8), value: [0]) }
        #expect(try env.read { txn in try txn.get(rows, key: key) } == [1])

        // Read-only, a database whose twin is missing is opened without one.
        let plain = try env.openDatabases([("plain", [])])[0]
        env.close()
        let readOnly = try Environment(options: EnvironmentOptions(path: dir.path, mapSize: 1 << 20, readOnly: true))
        let reopened = try readOnly.openDatabases([("rows", []), ("plain", [])])
        let twins = try readOnly.openTwins(of: reopened)
        #expect(twins[0].hasTwin && !twins[1].hasTwin && plain.name == twins[1].name)
    }

    @Test("a process that opened no twins refuses to read once the switch is set, rather than read copies no longer in use")
    func switchWithoutTwins() throws {
        let dir = TemporaryDirectory()
        let env = try open(dir.path)
        let opened = try env.openDatabases([("rows", []), ("switch", [])])
        env.setSwitch(opened[1], key: Array("set".utf8), twinsOpened: false)
        try env.write { txn in try txn.put(opened[0], key: [1], value: [1]) }
        #expect(try env.read { txn in try txn.get(opened[0], key: [1]) } == [1])
        try env.write { txn in try txn.put(opened[1], key: Array("set".utf8), value: [1]) }
        let error = #expect(throws: LMDBError.self) { try env.read { txn in try txn.get(opened[0], key: [1]) } }
        #expect(error?.code == .incompatible)
        #expect(error?.message.contains("open it again") == true)
    }
}
