import Foundation
import LMDB

/// Share metadata already presented to a viewer, reused while the share is unchanged
/// (``Container/shareMetadataWithoutLogging(for:)``).
///
/// The validator is the share's change tag, read from its row in the same read transaction as the
/// answer. Every event that changes a share or one of its participants (a participant added,
/// changed, removed, verified or accepted, a title or public-permission change) adds 1 to it, a
/// deleted share has no row, and a new share's tag starts at the position of its `ShareCreated`
/// event, above every tag an earlier share at the same URL reached (each of its changes was an
/// event before that position). So a tag never repeats for a URL, and an entry is used only when
/// the read models it was built from are, for this share, the ones the transaction sees. What else
/// goes into the metadata cannot change under a fixed tag: user records are written once, at
/// registration; the share URL's host is fixed per open ledger.
final class MetadataCache: @unchecked Sendable {
    // @unchecked: `entries` is only touched under `lock`; the values are immutable `Sendable` structs.
    private let lock = NSLock()
    private var entries: [Key: Entry] = [:]
    let capacity: Int

    struct Key: Hashable, Sendable {
        var token: String
        var container: String
        var viewer: String
    }

    struct Entry: Sendable {
        /// The share's change tag when the metadata was built.
        var validator: UInt64
        var metadata: Share.Metadata
    }

    init(capacity: Int) { self.capacity = capacity }

    func entry(_ key: Key) -> Entry? { lock.withLock { entries[key] } }

    func store(_ key: Key, _ entry: Entry) {
        lock.withLock {
            // Bounded: when full, start over (cheaper than tracking recency; a miss only costs a rebuild).
            if entries.count >= capacity, entries[key] == nil { entries.removeAll(keepingCapacity: true) }
            entries[key] = entry
        }
    }

    var count: Int { lock.withLock { entries.count } }
}

extension ReadModels {
    /// The change tag of the share `token` (field 9 of its `ShareState` row, read from the stored
    /// bytes without decoding the rest), or nil when there is no such share.
    func shareChangeTag(_ txn: borrowing Transaction, token: String) throws -> UInt64? {
        var key = token
        return try key.withUTF8 { bytes in
            try txn.withValue(shares, key: UnsafeRawBufferPointer(bytes)) { ProtobufScan.varint(field: 9, in: $0) } ?? nil
        }
    }
}

/// Reading one field of a serialized protobuf message without decoding the message.
enum ProtobufScan {
    /// The value of the top-level varint field `field` (the last one, as protobuf merges), 0 when
    /// the field is absent (proto3's default), nil when the bytes are not a well-formed message.
    static func varint(field: UInt64, in bytes: UnsafeRawBufferPointer) -> UInt64? {
        var offset = 0
        var found: UInt64 = 0
        func readVarint() -> UInt64? { EnvelopeCodec.readVarint(bytes, &offset, limit: bytes.count) }
        while offset < bytes.count {
            guard let tag = readVarint() else { return nil }
            switch tag & 7 {
            case 0:
                guard let value = readVarint() else { return nil }
                if tag >> 3 == field { found = value }
            case 1: offset += 8
            case 2:
                guard let length = readVarint(), length <= UInt64(bytes.count - offset) else { return nil }
                offset += Int(length)
            case 5: offset += 4
            default: return nil
            }
            if offset > bytes.count { return nil }
        }
        return found
    }
}
