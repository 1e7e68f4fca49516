import ByteKeys
import CLMDB
import Foundation
import LMDB
import TestSupport
import Testing

/// Rows of a checksummed database carry a CRC-32C trailer that every read checks: a value damaged at
/// rest is an error, never an answer.
@Suite("LMDB row checksums")
struct RowChecksumTests {
    private func open(_ path: String) throws -> Environment {
        try Environment(options: EnvironmentOptions(path: path, mapSize: 1 << 20, durability: .unsafeNoSync))
    }

    @Test("CRC-32C matches the standard check value, with the hardware path and without, and chains over key then value")
    func crcCheckValue() {
        let check = Array("123456789".utf8)
        #expect(sl_crc32c(0, check, check.count) == 0xE306_9283)
        #expect(sl_crc32c_portable(0, check, check.count) == 0xE306_9283)
        var random = SplitMix64(state: 7)
        for length in [0, 1, 7, 8, 9, 63, 64, 65, 1000] {
            let bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            #expect(sl_crc32c(0, bytes, bytes.count) == sl_crc32c_portable(0, bytes, bytes.count))
            let split = length / 3
            let chained = sl_crc32c(sl_crc32c(0, bytes, split), Array(bytes[split...]), length - split)
            #expect(chained == sl_crc32c(0, bytes, bytes.count))
        }
    }

    @Test("a checksummed database stores value ‖ CRC-32C(key ‖ value) and gives back the value, by get, cursor and visit")
    func roundTrip() throws {
        let dir = TemporaryDirectory()
        let env = try open(dir.path)
        let db = try env.openDatabases([("rows", [])], checksummed: true)[0]
        let raw = try env.openDatabases([("rows", [])])[0]
        let key = Array("k".utf8)
        try env.write { txn in
            try txn.put(db, key: key, value: Array("value".utf8))
            try txn.put(db, key: Array("empty".utf8), value: [UInt8]())
        }
        #expect(try env.read { try $0.get(db, key: key) } == Array("value".utf8))
        #expect(try env.read { try $0.get(db, key: Array("empty".utf8)) } == [])
        let stored = try #require(try env.read { try $0.get(raw, key: key) })
        let crc = sl_crc32c(sl_crc32c(0, key, key.count), Array("value".utf8), 5)
        #expect(stored == Array("value".utf8) + withUnsafeBytes(of: crc.littleEndian) { Array($0) })
        var seen: [[UInt8]] = []
        try env.read { txn in
            try txn.visitEntries(db, from: nil) { _, value in
                seen.append(Array(value))
                return true
            }
        }
        #expect(seen == [[], Array("value".utf8)])
    }

    @Test("a value, a key or a trailer damaged at rest fails the read with corrupted, and a write transaction that read it commits nothing")
    func damageIsAnError() throws {
        let dir = TemporaryDirectory()
        let env = try open(dir.path)
        let db = try env.openDatabases([("rows", [])], checksummed: true)[0]
        let raw = try env.openDatabases([("rows", [])])[0]
        try env.write { txn in
            for name in ["a", "b", "c"] { try txn.put(db, key: Array(name.utf8), value: Array("value of \(name)".utf8)) }
        }
        try env.write { txn in
            // a: a flipped value byte; b: a flipped trailer byte; c: cut to 3 bytes.
            var a = try #require(try txn.get(raw, key: Array("a".utf8)))
            a[2] ^= 0x10
            try txn.put(raw, key: Array("a".utf8), value: a)
            var b = try #require(try txn.get(raw, key: Array("b".utf8)))
            b[b.count - 1] ^= 0x01
            try txn.put(raw, key: Array("b".utf8), value: b)
            try txn.put(raw, key: Array("c".utf8), value: [1, 2, 3])
            // A row whose key was damaged: moved to another key with its old trailer.
            let d = try #require(try txn.get(raw, key: Array("a".utf8)))
            try txn.put(raw, key: Array("e".utf8), value: d)
        }
        for name in ["a", "b", "c", "e"] {
            let error = #expect(throws: LMDBError.self) { try env.read { try $0.get(db, key: Array(name.utf8)) } }
            #expect(error?.code == .corrupted)
            #expect(error?.message.contains("rows") == true)
        }
        let cursorError = #expect(throws: LMDBError.self) {
            try env.read { txn in try txn.visitEntries(db, from: nil) { _, _ in true } }
        }
        #expect(cursorError?.code == .corrupted)
        // A write that read a damaged row and swallowed the error still commits nothing.
        #expect(throws: LMDBError.self) {
            try env.write { txn in
                try txn.put(db, key: Array("z".utf8), value: Array("new".utf8))
                _ = try? txn.get(db, key: Array("a".utf8))
            }
        }
        #expect(try env.read { try $0.get(raw, key: Array("z".utf8)) } == nil)
    }

    @Test("fixed-size sorted duplicates keep their order with a trailer: appended, sought from a value, deleted by value")
    func fixedDuplicates() throws {
        let dir = TemporaryDirectory()
        let env = try open(dir.path)
        let db = try env.openDatabases([("positions", [.dupSort, .dupFixed])], checksummed: true)[0]
        let variable = try env.openDatabases([("names", [.dupSort])], checksummed: true)[0]
        #expect(db.rowsChecksummed)
        #expect(!variable.rowsChecksummed)
        let key = Array("k".utf8)
        let values: [UInt64] = [3, 1, 200, 70_000, 2]
        try env.write { txn in
            for value in values { try txn.put(db, key: key, value: BigEndian.bytes(of: value)) }
        }
        func all() throws -> [UInt64] {
            try env.read { txn in
                var out: [UInt64] = []
                try key.withUnsafeBytes { k in try txn.visitValues(db, key: k) { out.append(BigEndian.uint64($0)!) } }
                return out
            }
        }
        #expect(try all() == values.sorted())
        let found = try env.read { txn in
            try txn.withCursor(db) { cursor in
                try key.withUnsafeBytes { k in
                    try BigEndian.withBytes(of: 4) { v in try cursor.seek(key: k, valueAtLeast: v).map { BigEndian.uint64($0.value)! } }
                }
            }
        }
        #expect(found == 200)
        let deleted = try env.write { txn in try txn.delete(db, key: key, value: BigEndian.bytes(of: UInt64(3))) }
        #expect(deleted)
        #expect(try all() == [1, 2, 200, 70_000])
    }
}
