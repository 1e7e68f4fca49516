import CLMDB
import Foundation
import LMDB
import TestSupport
import Testing

/// The overlay (`Overlay`) against LMDB itself: the same random puts, deletes and clears applied to
/// one environment directly and to another through an overlay, whose layers are sealed and written
/// to LMDB now and then (as a writer behind the commit would). Every read agrees after every
/// operation, and at the end both environments hold the same bytes.
@Suite("Overlay")
struct OverlayTests {
    private func open(_ path: String) throws -> (Environment, plain: Database, sorted: Database) {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let env = try Environment(options: EnvironmentOptions(path: path, mapSize: 1 << 24, durability: .unsafeNoSync))
        let dbs = try env.openDatabases([("plain", []), ("sorted", [.dupSort])])
        return (env, dbs[0], dbs[1])
    }

    /// Everything `txn` sees of `db`, entry by entry.
    private static func entries(_ txn: borrowing Transaction, _ db: Database, from start: [UInt8]? = nil, limit: Int = .max)
        throws -> [[UInt8]]
    {
        var out: [[UInt8]] = []
        let visit = { (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) -> Bool in
            out.append(Array(key) + [0xFF] + Array(value))
            return out.count < limit
        }
        if let start { try start.withUnsafeBytes { try txn.visitEntries(db, from: $0, visit) } } else {
            try txn.visitEntries(db, from: nil, visit)
        }
        return out
    }

    private static func values(_ txn: borrowing Transaction, _ db: Database, _ key: [UInt8]) throws -> [[UInt8]] {
        var out: [[UInt8]] = []
        try key.withUnsafeBytes { k in try txn.visitValues(db, key: k) { out.append(Array($0)) } }
        return out
    }

    /// One operation, applied the same way to both sides; returns what it answered.
    private static func apply(_ op: Int, key: [UInt8], value: [UInt8], _ txn: borrowing Transaction, plain: Database, sorted: Database)
        throws -> String
    {
        switch op {
        case 0..<30: try txn.put(plain, key: key, value: value); return "put"
        case 30..<55: try txn.put(sorted, key: key, value: value); return "putDup"
        case 55..<65: return "\(try txn.delete(plain, key: key))"
        case 65..<73: return "\(try txn.delete(sorted, key: key, value: value))"
        case 73..<78: return "\(try txn.delete(sorted, key: key))"
        case 85: try txn.clear(plain); return "clear"
        case 86: try txn.clear(sorted); return "clearDup"
        default:
            // Reads only. (A put refused for an existing key fails its whole transaction, on both
            // sides: `refusedPutsFailTheTransaction` covers those.)
            return "\(try txn.get(plain, key: key) ?? [])|\(try txn.get(sorted, key: key) ?? [])|"
                + "\(try values(txn, sorted, key))|\(try txn.statistics(plain).entries)|\(try txn.statistics(sorted).entries)|"
                + "\(try entries(txn, plain, from: key, limit: 5))|\(try entries(txn, sorted, from: key, limit: 7))"
        }
    }

    /// Runs `script` in `txn`: each operation, after a nested transaction that tries it and is
    /// dropped when asked. Returns the answers.
    private static func run(
        _ script: [(op: Int, key: [UInt8], value: [UInt8], nest: Bool)], _ txn: borrowing Transaction, plain: Database,
        sorted: Database
    ) throws -> [String] {
        var answers: [String] = []
        for (op, key, value, nest) in script {
            if nest {
                _ = try txn.nested { child in
                    _ = try apply(op, key: key, value: value, child, plain: plain, sorted: sorted)
                    return false
                }
            }
            answers.append(try apply(op, key: key, value: value, txn, plain: plain, sorted: sorted))
        }
        return answers
    }

    @Test("reads through an overlay see what LMDB would hold, and its layers written give the same bytes", arguments: [1, 2, 3, 4])
    func overlayMatchesLMDB(seed: UInt64) throws {
        let dir = TemporaryDirectory()
        let (direct, dPlain, dSorted) = try open(dir.child("direct"))
        let (overlaid, oPlain, oSorted) = try open(dir.child("overlaid"))
        var random = SplitMix64(state: seed)
        let overlay = Overlay()
        var written = 0
        for round in 0..<60 {
            // One transaction on each side, of a few operations; now and then one is nested and
            // dropped, on both sides.
            let operations = Int.random(in: 1...40, using: &random)
            let script: [(op: Int, key: [UInt8], value: [UInt8], nest: Bool)] = (0..<operations).map { _ in
                let op = Int.random(in: 0..<100, using: &random)
                // Few keys and values, so that puts, deletes and duplicates meet.
                let key = [UInt8(Int.random(in: 0..<24, using: &random))] + (Bool.random(using: &random) ? [1] : [])
                let value = [UInt8(Int.random(in: 0..<6, using: &random))]
                return (op, key, value, Int.random(in: 0..<10, using: &random) == 0)
            }
            let expected = try direct.write { txn in try OverlayTests.run(script, txn, plain: dPlain, sorted: dSorted) }
            let actual = try overlaid.write { base in
                try base.withOverlay(overlay) { txn in try OverlayTests.run(script, txn, plain: oPlain, sorted: oSorted) }
            }
            #expect(actual == expected, "seed \(seed), round \(round)")
            overlay.seal()
            // Now and then the oldest sealed layers are written to LMDB and dropped.
            if Int.random(in: 0..<3, using: &random) == 0 {
                let count = Int.random(in: 1...overlay.sealed.count, using: &random)
                let layers = Array(overlay.sealed.prefix(count))
                try overlaid.write { txn in for layer in layers { try layer.write(to: txn) } }
                overlay.dropOldest(count)
                written += count
            }
            let directEntries = try direct.read { txn in
                (try OverlayTests.entries(txn, dPlain), try OverlayTests.entries(txn, dSorted))
            }
            let overlaidEntries = try overlaid.read { base in
                try base.withOverlay(overlay) { txn in (try OverlayTests.entries(txn, oPlain), try OverlayTests.entries(txn, oSorted)) }
            }
            #expect(directEntries == overlaidEntries, "seed \(seed), round \(round): merged entries differ")
        }
        let layers = overlay.sealed
        try overlaid.write { txn in for layer in layers { try layer.write(to: txn) } }
        overlay.dropOldest(layers.count)
        #expect(overlay.isEmpty)
        #expect(written > 0)
        let both = try [direct, overlaid].map { env in
            try env.read { txn in
                (try OverlayTests.entries(txn, env === direct ? dPlain : oPlain), try OverlayTests.entries(txn, env === direct ? dSorted : oSorted))
            }
        }
        #expect(both[0] == both[1], "seed \(seed): the layers written differ from the direct writes")
        #expect(!both[0].0.isEmpty || !both[0].1.isEmpty)
    }

    @Test("noOverwrite and noDupData refuse an existing key or value through an overlay too", arguments: [false, true])
    func refusedPutsFailTheTransaction(overlaid: Bool) throws {
        let dir = TemporaryDirectory()
        let (env, plain, sorted) = try open(dir.path)
        let overlay = Overlay()
        try env.write { base in
            try base.withOverlay(overlay) { txn in
                try txn.put(plain, key: [1], value: [1])
                try txn.put(sorted, key: [1], value: [1])
            }
        }
        if !overlaid { try env.write { txn in try overlay.seal().write(to: txn) } }
        for (db, flags) in [(plain, PutFlags.noOverwrite), (sorted, .noDupData)] {
            let error = #expect(throws: LMDBError.self) {
                try env.write { base in
                    try base.withOverlay(overlaid ? overlay : Overlay()) { txn in
                        try txn.put(db, key: [1], value: [1], flags: flags)
                    }
                }
            }
            #expect(error?.code == .keyExists)
        }
    }

    @Test("a database that goes through an overlay has no raw cursor: a typed error, not a wrong answer")
    func rawCursorRefused() throws {
        let dir = TemporaryDirectory()
        let (env, plain, _) = try open(dir.path)
        let error = #expect(throws: LMDBError.self) {
            try env.write { base in
                try base.withOverlay(Overlay()) { txn in
                    try txn.withCursor(plain) { _ in }
                }
            }
        }
        #expect(error?.code == .throughOverlay)
    }
}
