import ByteKeys
import EventLog
import Foundation

/// The history indexes' journal: how an event's history entries are written without dirtying a
/// random page of three B-trees per event.
///
/// The history of a share, a user or a container is a list of log positions. Written directly, each
/// event would add a position under its share's token, under each of its users and under its
/// container: three or four B-trees with random keys touched per event, and one of the largest
/// costs of a commit. Instead, each event adds one entry to `idx_history_journal`, keyed by its
/// position (so each commit appends to one page at the journal's right edge), holding the event's
/// subjects. When the journal reaches ``foldThreshold`` entries, the event that filled it moves
/// them all, sorted by key, into the three history indexes and empties the journal: one pass over
/// each index's pages for many events, in the same transaction as that event.
///
/// A history is then the positions in its index followed by the journal's entries that name its
/// subject: every folded position is below every journal position, and a fold moves the whole
/// journal in one transaction, so any read transaction sees each position in exactly one of them.
///
/// The fold is decided by the journal's size alone, so the same events applied to the same read
/// models (the writer, a rebuild, a replica, an import, a state as of a past point) leave the same
/// bytes; comparisons of read models still compare the indexes and the journal as one logical set
/// (``ReadModels/logicalEntries(_:_:)``), so read models written before the journal (all in the
/// indexes) compare equal to their rebuild.
package struct HistoryJournalEntry: Equatable {
    /// The container of the event (its container history, and the scope of its users).
    package var container: String
    /// The shares (tokens) the event is about.
    package var tokens: [String]
    /// The users the event was done by or is about, sorted.
    package var users: [String]

    /// Version 1: `1`, then the container, the number of tokens (1 byte), the tokens, the number of
    /// users (1 byte), the users; each string as a 2-byte big-endian length and its UTF-8 bytes.
    package static let layoutVersion: UInt8 = 1

    package func encoded() -> [UInt8] {
        let capacity =
            3 + HistoryJournalEntry.size(container) + tokens.prefix(255).reduce(0) { $0 + HistoryJournalEntry.size($1) }
            + users.prefix(255).reduce(0) { $0 + HistoryJournalEntry.size($1) }
        return ReadModels.withBuilt(count: capacity) { out in
            out.append(HistoryJournalEntry.layoutVersion)
            HistoryJournalEntry.write(container, &out)
            out.append(UInt8(min(tokens.count, 255)))
            for token in tokens.prefix(255) { HistoryJournalEntry.write(token, &out) }
            out.append(UInt8(min(users.count, 255)))
            for user in users.prefix(255) { HistoryJournalEntry.write(user, &out) }
        } _: { Array($0) }
    }

    /// The layout of an entry about `token` (if any) and `users` in `container`, built in one
    /// allocation: what the projection journals for each event (``encoded()`` of the same fields).
    package static func encode(container: String, token: String?, users: TwoNames) -> [UInt8] {
        withEncoded(container: container, token: token, users: users) { Array($0) }
    }

    /// Calls `body` with the bytes of ``encode(container:token:users:)``, written into a temporary
    /// buffer (``ReadModels/withBuilt(count:_:_:)``): what the journal puts, without an array per event.
    package static func withEncoded<R>(
        container: String, token: String?, users: TwoNames, _ body: (UnsafeRawBufferPointer) throws -> R
    ) rethrows -> R {
        var capacity = 3 + size(container) + (token.map(size) ?? 0)
        users.forEach { capacity += size($0) }
        return try ReadModels.withBuilt(count: capacity) { out in
            out.append(layoutVersion)
            write(container, &out)
            out.append(token == nil ? 0 : 1)
            if let token { write(token, &out) }
            out.append(UInt8(users.count))
            users.forEach { write($0, &out) }
        } _: { try body($0) }
    }

    /// The bytes ``write(_:_:)`` writes for `value`.
    private static func size(_ value: String) -> Int { 2 + min(value.utf8.count, Int(UInt16.max)) }

    /// A string as a 2-byte big-endian length and its UTF-8 bytes (at most 65,535).
    private static func write(_ value: String, _ out: inout ReadModels.KeyWriter) {
        let length = size(value) - 2
        out.append(UInt8(length >> 8))
        out.append(UInt8(length & 0xFF))
        out.append(value, atMost: length)
    }

    /// Decodes an entry; throws ``LedgerError/Code/corruptedData`` for bytes that are not one.
    package init(decoding bytes: UnsafeRawBufferPointer) throws {
        var reader = try Reader(bytes)
        func string() throws -> String { String(decoding: try reader.string(), as: UTF8.self) }
        container = try string()
        tokens = try (0..<(try reader.byte())).map { _ in try string() }
        users = try (0..<(try reader.byte())).map { _ in try string() }
        try reader.finish()
    }

    /// Reads an encoded entry's parts in place, for the decoder, ``names(index:key:in:)`` and
    /// ``appendMoves(of:position:keys:moves:)``: each step past the end (or a layout other than
    /// ``layoutVersion``) throws ``LedgerError/Code/corruptedData``.
    private struct Reader {
        package let bytes: UnsafeRawBufferPointer
        package var offset = 0

        /// Starts after the layout byte, which must be ``layoutVersion``.
        package init(_ bytes: UnsafeRawBufferPointer) throws {
            self.bytes = bytes
            guard try byte() == Int(HistoryJournalEntry.layoutVersion) else { throw Reader.fail() }
        }

        package static func fail() -> LedgerError {
            LedgerError(.corruptedData, "an entry of the history journal does not decode; run `share-ledger rebuild`")
        }

        package mutating func byte() throws -> Int {
            guard offset < bytes.count else { throw Reader.fail() }
            defer { offset += 1 }
            return Int(bytes[offset])
        }

        /// A 2-byte big-endian length and that many bytes.
        package mutating func string() throws -> UnsafeRawBufferPointer {
            let count = try byte() << 8 | byte()
            guard offset + count <= bytes.count else { throw Reader.fail() }
            defer { offset += count }
            return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count])
        }

        /// Throws unless every byte was read.
        package func finish() throws {
            guard offset == bytes.count else { throw Reader.fail() }
        }
    }

    package init(container: String, tokens: [String], users: [String]) {
        self.container = container
        self.tokens = tokens
        self.users = users
    }

    /// Whether the encoded entry `bytes` stands for (`index`, `key`) (as ``indexKeys()`` would list
    /// it), read in place without decoding its strings: a history query tests every journal entry.
    package static func names(index: Int, key: [UInt8], in bytes: UnsafeRawBufferPointer) throws -> Bool {
        var reader = try Reader(bytes)
        let container = try reader.string()
        return try key.withUnsafeBytes { key in
            if index == 2 { return key.elementsEqual(container) }
            let tokens = try reader.byte()
            for _ in 0..<tokens where try reader.string().elementsEqual(key) && index == 0 { return true }
            guard index == 1, key.count > container.count, key[container.count] == 0,
                UnsafeRawBufferPointer(rebasing: key[0..<container.count]).elementsEqual(container)
            else { return false }
            let user = UnsafeRawBufferPointer(rebasing: key[(container.count + 1)...])
            let users = try reader.byte()
            for _ in 0..<users where try reader.string().elementsEqual(user) { return true }
            return false
        }
    }

    /// The (history index, key) pairs this entry stands for; the index as its place in
    /// ``ReadModels/historyIndexes``.
    package func indexKeys() -> [(index: Int, key: [UInt8])] {
        var out: [(index: Int, key: [UInt8])] = tokens.map { (0, Array($0.utf8)) }
        for user in users { out.append((1, ReadModels.userKey(container, user))) }
        out.append((2, Array(container.utf8)))
        return out
    }

    /// One history index entry a fold writes: the index (as in ``indexKeys()``), where its key lies
    /// in the fold's key buffer, and the position.
    package struct Move {
        package var db: Int
        package var start: Int
        package var count: Int
        package var position: UInt64
    }

    /// Appends the moves the encoded entry `bytes` stands for (exactly ``indexKeys()`` of the entry
    /// it decodes to, at `position`), their keys to `keys`, without decoding its strings. A name
    /// that is not valid UTF-8 goes through `String` as the decoder does, so the key bytes agree.
    package static func appendMoves(
        of bytes: UnsafeRawBufferPointer, position: UInt64, keys: inout [UInt8], moves: inout [Move]
    ) throws {
        func append(_ name: UnsafeRawBufferPointer) {
            if name.allSatisfy({ $0 < 0x80 }) {
                keys.append(contentsOf: name)
            } else {
                keys.append(contentsOf: String(decoding: name, as: UTF8.self).utf8)
            }
        }
        var reader = try Reader(bytes)
        let container = try reader.string()
        for _ in 0..<(try reader.byte()) {
            let start = keys.count
            append(try reader.string())
            moves.append(Move(db: 0, start: start, count: keys.count - start, position: position))
        }
        for _ in 0..<(try reader.byte()) {
            let start = keys.count
            append(container)
            keys.append(0)
            append(try reader.string())
            moves.append(Move(db: 1, start: start, count: keys.count - start, position: position))
        }
        try reader.finish()
        let start = keys.count
        append(container)
        moves.append(Move(db: 2, start: start, count: keys.count - start, position: position))
    }
}

extension ReadModels {
    /// The three history indexes, in the order ``HistoryJournalEntry/indexKeys()`` numbers them.
    package var historyIndexes: [ReadModelTable] { [shareHistory, userHistory, containerHistory] }

    /// Journal entries that make a fold: about 1,000 events' history moved at once keeps a fold to a
    /// few milliseconds of one commit, while each index page it dirties takes many positions.
    package static let historyFoldThreshold = 1_024

    /// Adds the history entry of the event at `position` (about `token` and `users` in `container`:
    /// ``HistoryJournalEntry``), folding the journal when it is full.
    package func journalHistory(
        _ txn: borrowing some ReadModelStore & ~Copyable, position: UInt64, container: String, token: String?,
        users: TwoNames
    ) throws {
        try HistoryJournalEntry.withEncoded(container: container, token: token, users: users) { value in
            try BigEndian.withBytes(of: position) { key in try txn.put(historyJournal, key: key, value: value, flags: []) }
        }
        if try txn.entryCount(historyJournal) >= ReadModels.historyFoldThreshold {
            try foldHistory(txn)
        }
    }

    /// Moves every journal entry into the history indexes, by index and key, and empties the journal.
    /// Returns the number of index entries the journal's entries stand for.
    ///
    /// The index keys are copied straight from the entries' bytes into one buffer (no `String` per
    /// name, no array per key). The moves are grouped by (index, key) with one hash each, and only the
    /// distinct keys are sorted (a fold of 1,024 events names about 120 keys in 3,500 moves: sorting
    /// every move was a third of a fold). Each key's positions are then added in one call, after the
    /// key's last position (``ReadModelStore/addDuplicatesInKeyOrder(_:size:_:)``): the journal is
    /// visited in position order, so each key's positions come ascending, and every folded position
    /// is below every journaled one.
    @discardableResult
    package func foldHistory(_ txn: borrowing some ReadModelStore & ~Copyable) throws -> Int {
        var keys: [UInt8] = []
        var moves: [HistoryJournalEntry.Move] = []
        try txn.visit(historyJournal, from: nil) { key, value in
            guard let position = BigEndian.uint64(key) else {
                throw LedgerError(.corruptedData, "a key of the history journal is \(key.count) bytes, expected 8; run `share-ledger rebuild`")
            }
            try HistoryJournalEntry.appendMoves(of: value, position: position, keys: &keys, moves: &moves)
            return true
        }
        guard !moves.isEmpty else { return 0 }
        let databases = historyIndexes
        try keys.withUnsafeBytes { buffer in
            func key(_ move: HistoryJournalEntry.Move) -> UnsafeRawBufferPointer {
                UnsafeRawBufferPointer(rebasing: buffer[move.start..<move.start + move.count])
            }
            // The distinct (index, key) pairs, each with a move that names it and its moves' count. A
            // name too long for a key (or empty) is indexed under nothing, as a put would refuse it.
            var groupOf: [FoldKey: Int] = [:]
            var groups: [(move: Int, count: Int)] = []
            var groupOfMove = [Int](repeating: -1, count: moves.count)
            // Each index's last group: the next move of an index mostly names the same key (the one
            // container; the share of a run of events), found with a comparison instead of a hash.
            var lastGroup = [Int](repeating: -1, count: databases.count)
            for (index, move) in moves.enumerated() where move.count > 0 && move.count <= ReadModels.maxKeyBytes {
                let last = lastGroup[move.db]
                if last >= 0, FoldKey(db: move.db, bytes: key(moves[groups[last].move])) == FoldKey(db: move.db, bytes: key(move)) {
                    groups[last].count += 1
                    groupOfMove[index] = last
                    continue
                }
                let foldKey = FoldKey(db: move.db, bytes: key(move))
                if let group = groupOf[foldKey] {
                    groups[group].count += 1
                    groupOfMove[index] = group
                    lastGroup[move.db] = group
                } else {
                    groupOf[foldKey] = groups.count
                    groupOfMove[index] = groups.count
                    lastGroup[move.db] = groups.count
                    groups.append((index, 1))
                }
            }
            // The groups in LMDB's order: by index, then key (compared with memcmp).
            var order = Array(groups.indices)
            order.sort { a, b in
                let (x, y) = (moves[groups[a].move], moves[groups[b].move])
                if x.db != y.db { return x.db < y.db }
                return KeyOrder.compare(key(x), key(y)) < 0
            }
            // Each group's positions, big-endian, back to back in the groups' order; a position named
            // twice by one entry once.
            var start = [Int](repeating: 0, count: groups.count)
            var offset = 0
            for group in order {
                start[group] = offset
                offset += groups[group].count
            }
            var end = start
            var values = [UInt8](repeating: 0, count: offset * 8)
            values.withUnsafeMutableBytes { out in
                for (index, move) in moves.enumerated() where groupOfMove[index] >= 0 {
                    let group = groupOfMove[index]
                    let slot = end[group]
                    if slot > start[group], out.load(fromByteOffset: (slot - 1) * 8, as: UInt64.self) == move.position.bigEndian { continue }
                    out.storeBytes(of: move.position.bigEndian, toByteOffset: slot * 8, as: UInt64.self)
                    end[group] = slot + 1
                }
            }
            // Each index's keys through one call of the store, in key order.
            try values.withUnsafeBytes { values in
                var next = order.startIndex
                for (index, database) in databases.enumerated() {
                    let last = order[next...].firstIndex { moves[groups[$0].move].db != index } ?? order.endIndex
                    guard next < last else { continue }
                    try txn.addDuplicatesInKeyOrder(database, size: 8) { add in
                        for group in order[next..<last] {
                            try add(key(moves[groups[group].move]), UnsafeRawBufferPointer(rebasing: values[start[group] * 8..<end[group] * 8]))
                        }
                    }
                    next = last
                }
            }
        }
        try txn.clear(historyJournal)
        return moves.count
    }

    /// The positions in the journal of the entries about (`db`, `key`), from `from` on, in order.
    package func journalPositions(
        _ txn: borrowing some ReadModelStore & ~Copyable, _ db: ReadModelTable, key: [UInt8], from: UInt64
    ) throws -> [UInt64] {
        var out: [UInt64] = []
        try BigEndian.withBytes(of: from) { start in
            guard let index = historyIndexes.firstIndex(where: { $0.name == db.name }) else { return }
            try txn.visit(historyJournal, from: start) { positionBytes, value in
                if try HistoryJournalEntry.names(index: index, key: key, in: value), let position = BigEndian.uint64(positionBytes) {
                    out.append(position)
                }
                return true
            }
        }
        return out
    }

    /// The entries of a read model as a comparison must see them: for a history index, its own
    /// entries and the journal's entries for it, in LMDB's order (key, then position); for the
    /// journal, none (its entries are in the indexes' views); for a database of ``CompactRow``s, its
    /// rows in the compact layout (rows an earlier release wrote as protobuf, re-encoded); for any
    /// other database, its entries.
    package func logicalEntries(_ txn: borrowing some ReadModelStore & ~Copyable, _ db: ReadModelTable) throws -> [([UInt8], [UInt8])] {
        if db.name == historyJournal.name { return [] }
        var out: [([UInt8], [UInt8])] = []
        // Rows of the compact databases by content: a row an earlier release wrote (protobuf) is
        // compared as the compact bytes it stands for.
        let compact = ReadModels.compactRowTypes[db.name]
        try txn.visit(db, from: nil) { key, value in
            if let compact, value.first.map({ $0 < 0x80 }) ?? true {
                out.append((Array(key), try compact.decodeStored(value, database: db.name).compactBytes()))
            } else {
                out.append((Array(key), Array(value)))
            }
            return true
        }
        guard [shareHistory.name, userHistory.name, containerHistory.name].contains(db.name) else { return out }
        var journaled: [([UInt8], [UInt8])] = []
        try txn.visit(historyJournal, from: nil) { position, value in
            for (index, key) in try HistoryJournalEntry(decoding: value).indexKeys() where historyIndexes[index].name == db.name {
                journaled.append((key, Array(position)))
            }
            return true
        }
        guard !journaled.isEmpty else { return out }
        out.append(contentsOf: journaled)
        out.sort { a, b in
            let order = KeyOrder.compare(a.0, b.0)
            return order != 0 ? order < 0 : KeyOrder.compare(a.1, b.1) < 0
        }
        return out
    }
}

/// An (index, key) a fold groups its moves by: the key's bytes in the fold's key buffer, compared
/// and hashed by content (Swift's seeded hash: the names are the callers').
private struct FoldKey: Hashable {
    let db: Int
    let bytes: UnsafeRawBufferPointer

    static func == (a: FoldKey, b: FoldKey) -> Bool {
        a.db == b.db && a.bytes.count == b.bytes.count && KeyOrder.compare(a.bytes, b.bytes) == 0
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(db)
        hasher.combine(bytes: bytes)
    }
}

/// No more than two names, held inline (no allocation): the users one event is about, for its
/// history entry.
package struct TwoNames {
    /// The first name, if any.
    package private(set) var first: String?
    /// The second name, if any (only after a first one).
    package private(set) var second: String?

    /// `a` then `b`, nil ones left out.
    package init(_ a: String?, _ b: String? = nil) {
        (first, second) = a == nil ? (b, nil) : (a, b)
    }

    /// How many names there are.
    package var count: Int { first == nil ? 0 : second == nil ? 1 : 2 }

    /// Calls `body` with each name, in order.
    package func forEach(_ body: (String) -> Void) {
        if let first { body(first) }
        if let second { body(second) }
    }
}
