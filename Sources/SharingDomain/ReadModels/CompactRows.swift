import EventLog
import Foundation
import SwiftProtobuf

/// A read-model row type: how its stored bytes decode and encode, and the form the writer's
/// ``RowCache`` holds it in (only ``CompactRow``s have one). Statically dispatched: ``ReadModels/message(_:_:_:_:)`` and
/// ``ReadModels/put(_:_:_:_:)`` are specialized per row type, with no existential or dynamic cast.
package protocol StoredRow: Sendable {
    /// Decodes a stored row; damaged bytes are ``LedgerError/Code/corruptedData``.
    static func decodeStored(_ bytes: UnsafeRawBufferPointer, database: String) throws -> Self
    /// The bytes the row is stored as.
    func storedBytes() throws -> [UInt8]
    /// The row as the ``RowCache`` keeps it; nil for row types it does not keep.
    var cached: CachedRow? { get }
    /// The row of this type a kept row is, if it is one.
    init?(cached: CachedRow)
}

/// The protobuf rows (records, residual tasks, and the other rows no share action reads many
/// times): deterministic protobuf, not kept by the row cache.
extension StoredRow where Self: SwiftProtobuf.Message {
    package static func decodeStored(_ bytes: UnsafeRawBufferPointer, database: String) throws -> Self {
        do {
            // Decoded in place (`init(serializedBytes:)` wants an owning collection: a copy).
            var row = Self()
            try row.merge(serializedBytes: bytes.bytes)
            return row
        } catch {
            throw LedgerError(
                .corruptedData, "a value in read model \(database) does not decode (\(error)); run `share-ledger rebuild`")
        }
    }

    package func storedBytes() throws -> [UInt8] {
        var options = BinaryEncodingOptions()
        options.useDeterministicOrdering = true
        return try serializedBytes(options: options)
    }

    package var cached: CachedRow? { nil }
    package init?(cached: CachedRow) { nil }
}

extension RecordState: StoredRow {}
extension ResidualTaskState: StoredRow {}
extension SharedZoneState: StoredRow {}
extension VerificationState: StoredRow {}
extension AccessEntryState: StoredRow {}
extension AddressState: StoredRow {}
extension WorkerTaskState: StoredRow {}

/// A row the writer's ``RowCache`` keeps: one of the ``CompactRow`` types, held inline (no box).
package enum CachedRow: Sendable {
    case share(ShareState)
    case participant(ParticipantState)
    case zone(ZoneState)
    case user(UserState)
}

/// The hand-written, versioned layout of the read-model rows every share action reads or writes:
/// `rm_shares`, `rm_participants`, `rm_zones` and `rm_users` (byte layouts in
/// `docs/log-format.md`, "Compact rows").
///
/// SwiftProtobuf decodes and encodes through generic visitors; these rows are read and written many
/// times per action, so they are plain structs (Rows.swift) stored as a layout byte (`C1`) and their
/// fields in a fixed order: strings and numbers as a LEB128 length or value, enums as their raw
/// value, the share's change tag as 8 fixed bytes right after the layout byte (the metadata cache
/// reads it without decoding the row).
///
/// Rows written by earlier releases are protobuf: a protobuf encoding of these messages never
/// starts with a byte at or above `0x80` (every field number is below 16, so every tag is one byte
/// under `0x80`), so the first byte tells the layouts apart, and both are read (the protobuf ones
/// through the generated messages, ``Legacy``). A row is written in the compact layout the next time
/// it changes; comparisons of read models (audit, rebuild, replica digests) compare rows by content
/// (``ReadModels/logicalEntries(_:_:)``), so old rows match their rebuild without a migration.
package protocol CompactRow: StoredRow, Equatable {
    /// The generated message an earlier release stored this row as.
    associatedtype Legacy: SwiftProtobuf.Message
    /// The row an earlier release stored as `legacy`.
    init(legacy: Legacy)
    /// Appends the row's fields after the layout byte.
    func writeCompact(_ writer: inout CompactWriter)
    /// Reads the row's fields after the layout byte.
    init(compact reader: inout CompactReader) throws(LedgerError)
    /// The layout byte this row is written with: ``compactLayoutOne`` unless a field that layout
    /// lacks is set (``compactLayoutTwo``).
    var compactLayout: UInt8 { get }
    /// Whether rows of this type may be stored with the layout byte `layout`.
    static func reads(layout: UInt8) -> Bool
    /// Reads the fields a later layout appended after the fields of ``compactLayoutOne``.
    mutating func readLaterFields(_ reader: inout CompactReader, layout: UInt8) throws(LedgerError)
}

/// The layout byte of the first compact layout.
package let compactLayoutOne: UInt8 = 0xC1
/// The layout byte of the second compact layout: the fields of the first, then fields added since
/// (`ShareState`: allows access requests, the sealed title; `ParticipantState`: approved requester,
/// one-time token; `UserState`: the sealed personal data, the keyed lookup hashes, the time it was
/// forgotten). A row whose added fields are all at their defaults is still written in the first
/// layout, byte for byte as before, so ledgers that do not use the new features keep rows an
/// earlier release reads.
package let compactLayoutTwo: UInt8 = 0xC2
/// The layout byte of the third compact layout (`ParticipantState` only): the fields of the second,
/// then the invitation's sealed email or phone (subject, box), its keyed hashes and when its address
/// was forgotten. Written only when one of those is set: rows of invitations by account, by one-time
/// URL or in plaintext stay in the first or second layout.
package let compactLayoutThree: UInt8 = 0xC3

extension CompactRow {
    package var compactLayout: UInt8 { compactLayoutOne }
    package func storedBytes() -> [UInt8] { compactBytes() }
    package static func reads(layout: UInt8) -> Bool { layout == compactLayoutOne }
    package mutating func readLaterFields(_ reader: inout CompactReader, layout: UInt8) throws(LedgerError) {}
}

extension ReadModels {
    /// The row type stored in the compact layout in each database that has one, by database name:
    /// what comparisons re-encode (``logicalEntries(_:_:)``) and what the writer's ``RowCache`` keeps.
    package static let compactRowTypes: [String: any CompactRow.Type] = [
        "rm_shares": ShareState.self, "rm_participants": ParticipantState.self, "rm_zones": ZoneState.self,
        "rm_users": UserState.self,
    ]
}

extension CompactRow {
    /// The row in the compact layout.
    package func compactBytes() -> [UInt8] {
        var writer = CompactWriter()
        writer.bytes.append(compactLayout)
        writeCompact(&writer)
        return writer.bytes
    }

    /// Decodes a stored row in either layout (compact, or protobuf from an earlier release); damaged
    /// bytes are ``LedgerError/Code/corruptedData``.
    package static func decodeStored(_ bytes: UnsafeRawBufferPointer, database: String) throws(LedgerError) -> Self {
        if let first = bytes.first, first >= 0x80 {
            guard Self.reads(layout: first) else {
                throw LedgerError(
                    .corruptedData, "a row of \(database) has layout \(first), which this version does not know; "
                        + "run `share-ledger rebuild` (or upgrade ShareLedger)")
            }
            var reader = CompactReader(bytes, database: database)
            reader.offset = 1
            var row = try Self(compact: &reader)
            try row.readLaterFields(&reader, layout: first)
            try reader.finish()
            return row
        }
        do {
            return Self(legacy: try Legacy(serializedBytes: Array(bytes)))
        } catch {
            throw LedgerError(.corruptedData, "a row of \(database) does not decode (\(error)); run `share-ledger rebuild`")
        }
    }
}

/// Appends compact fields.
package struct CompactWriter {
    package var bytes: [UInt8] = []

    /// Room for the longest usual row (a share with a sealed title takes about 250 bytes): growing the
    /// buffer while writing cost an allocation and a copy.
    package init() { bytes.reserveCapacity(320) }

    package mutating func varint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    package mutating func int64(_ value: Int64) { varint(UInt64(bitPattern: value)) }

    package mutating func string(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            varint(UInt64(utf8.count))
            bytes.append(contentsOf: utf8)
        }
    }

    package mutating func blob(_ value: [UInt8]) {
        varint(UInt64(value.count))
        bytes.append(contentsOf: value)
    }

    /// A byte string, written from `Data` without copying it into an array first.
    package mutating func blob(_ value: Data) {
        varint(UInt64(value.count))
        value.withUnsafeBytes { bytes.append(contentsOf: $0) }
    }

    /// The fields a sealing row adds: the box's subject and bytes (empty without one), the keyed
    /// email and phone hashes, and when the person or address was forgotten.
    package mutating func sealedFields(
        _ sealed: Shareledger_Events_V1_SealedPersonalData?, emailHash: Data, phoneHash: Data, forgottenAtMicros: Int64
    ) {
        string(sealed?.subject ?? "")
        blob(sealed?.box ?? Data())
        blob(emailHash)
        blob(phoneHash)
        int64(forgottenAtMicros)
    }

    package mutating func fixed64(_ value: UInt64) {
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
    }
}

/// Reads compact fields, throwing ``LedgerError/Code/corruptedData`` past the end or on a malformed value.
package struct CompactReader {
    package let bytes: UnsafeRawBufferPointer
    package let database: String
    package var offset = 0

    package init(_ bytes: UnsafeRawBufferPointer, database: String) {
        self.bytes = bytes
        self.database = database
    }

    package func damaged() -> LedgerError {
        LedgerError(.corruptedData, "a row of \(database) is damaged (at byte \(offset)); run `share-ledger rebuild`")
    }

    package mutating func varint() throws(LedgerError) -> UInt64 {
        guard let value = EnvelopeCodec.readVarint(bytes, &offset, limit: bytes.count) else { throw damaged() }
        return value
    }

    package mutating func int64() throws(LedgerError) -> Int64 { Int64(bitPattern: try varint()) }

    package mutating func uint32() throws(LedgerError) -> UInt32 {
        let value = try varint()
        guard value <= UInt64(UInt32.max) else { throw damaged() }
        return UInt32(value)
    }

    package mutating func enumValue() throws(LedgerError) -> Int {
        let value = try varint()
        guard value <= UInt64(Int32.max) else { throw damaged() }
        return Int(value)
    }

    /// A byte string as `Data`, copied once from the row.
    package mutating func blobData() throws(LedgerError) -> Data {
        let count = try varint()
        guard count <= UInt64(bytes.count - offset) else { throw damaged() }
        let start = offset
        offset += Int(count)
        return count == 0 ? Data() : Data(UnsafeRawBufferPointer(rebasing: bytes[start..<offset]))
    }

    /// Steps over a length-delimited field (a string or a byte string) without copying it.
    package mutating func skipBytes() throws(LedgerError) {
        let count = try varint()
        guard count <= UInt64(bytes.count - offset) else { throw damaged() }
        offset += Int(count)
    }

    package mutating func string() throws(LedgerError) -> String {
        let count = try varint()
        guard count <= UInt64(bytes.count - offset) else { throw damaged() }
        let start = offset
        offset += Int(count)
        return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<offset]), as: UTF8.self)
    }

    /// The fields ``CompactWriter/sealedFields(_:emailHash:phoneHash:forgottenAtMicros:)`` wrote; the
    /// box is nil when its subject and bytes are empty.
    package mutating func sealedFields() throws(LedgerError) -> (
        sealed: Shareledger_Events_V1_SealedPersonalData?, emailHash: Data, phoneHash: Data, forgottenAtMicros: Int64
    ) {
        let subject = try string()
        let box = try blobData()
        var sealed: Shareledger_Events_V1_SealedPersonalData?
        if !subject.isEmpty || !box.isEmpty {
            sealed = Shareledger_Events_V1_SealedPersonalData()
            sealed?.subject = subject
            sealed?.box = box
        }
        return (sealed, try blobData(), try blobData(), try int64())
    }

    /// A boolean: `0` or `1`, nothing else.
    package mutating func flag() throws(LedgerError) -> Bool {
        let value = try varint()
        guard value <= 1 else { throw damaged() }
        return value == 1
    }

    package mutating func fixed64() throws(LedgerError) -> UInt64 {
        guard bytes.count - offset >= 8 else { throw damaged() }
        var value: UInt64 = 0
        for index in offset..<offset + 8 { value = value << 8 | UInt64(bytes[index]) }
        offset += 8
        return value
    }

    /// Every byte must have been read.
    package func finish() throws(LedgerError) {
        guard offset == bytes.count else { throw damaged() }
    }
}

extension ShareState: CompactRow {
    package var cached: CachedRow? { .share(self) }
    package init?(cached: CachedRow) {
        guard case .share(let row) = cached else { return nil }
        self = row
    }

    package func writeCompact(_ w: inout CompactWriter) {
        w.fixed64(changeTag)
        w.string(container)
        w.string(ownerName)
        w.string(zoneName)
        w.varint(zoneID)
        w.string(shareRecordName)
        w.string(rootRecordName)
        w.string(title)
        w.varint(UInt64(publicPermission.rawValue))
        w.int64(createdAtMicros)
        w.string(ownerParticipantID)
        w.varint(UInt64(activeParticipantCount))
        w.varint(UInt64(unmatchedPendingCount))
        guard compactLayout == compactLayoutTwo else { return }
        // Second layout: allows access requests, then the subject and box of the sealed title.
        w.varint(allowsAccessRequests ? 1 : 0)
        w.string(hasSealedTitle ? sealedTitle.subject : "")
        w.blob(hasSealedTitle ? sealedTitle.box : Data())
    }

    package var compactLayout: UInt8 { allowsAccessRequests || hasSealedTitle ? compactLayoutTwo : compactLayoutOne }

    package static func reads(layout: UInt8) -> Bool { layout == compactLayoutOne || layout == compactLayoutTwo }

    package mutating func readLaterFields(_ r: inout CompactReader, layout: UInt8) throws(LedgerError) {
        guard layout == compactLayoutTwo else { return }
        allowsAccessRequests = try r.flag()
        let subject = try r.string()
        let box = try r.blobData()
        if !subject.isEmpty || !box.isEmpty {
            sealedTitle.subject = subject
            sealedTitle.box = box
        }
    }

    package init(compact r: inout CompactReader) throws(LedgerError) {
        self.init()
        changeTag = try r.fixed64()
        container = try r.string()
        ownerName = try r.string()
        zoneName = try r.string()
        zoneID = try r.varint()
        shareRecordName = try r.string()
        rootRecordName = try r.string()
        title = try r.string()
        publicPermission = Shareledger_Events_V1_Permission(rawValue: try r.enumValue()) ?? .unknown
        createdAtMicros = try r.int64()
        ownerParticipantID = try r.string()
        activeParticipantCount = try r.uint32()
        unmatchedPendingCount = try r.uint32()
    }

    /// The zone id of a stored share row in a compact layout, without decoding the rest (no
    /// string is made); nil for a row in the protobuf layout of earlier releases (decode it whole)
    /// or bytes that are not a row.
    package static func storedZoneID(_ bytes: UnsafeRawBufferPointer) -> UInt64? {
        guard let first = bytes.first, first >= 0x80, ShareState.reads(layout: first) else { return nil }
        var reader = CompactReader(bytes, database: "rm_shares")
        reader.offset = 1
        // changeTag, container, ownerName, zoneName, then zoneID (``writeCompact(_:)``).
        do {
            _ = try reader.fixed64()
            for _ in 0..<3 { try reader.skipBytes() }
            return try reader.varint()
        } catch {
            return nil
        }
    }

    /// The change tag of a stored share row in either layout, without decoding the rest; nil for
    /// bytes that are not a row.
    package static func storedChangeTag(_ bytes: UnsafeRawBufferPointer) -> UInt64? {
        if let first = bytes.first, first >= 0x80 {
            guard ShareState.reads(layout: first), bytes.count >= 9 else { return nil }
            var reader = CompactReader(bytes, database: "rm_shares")
            reader.offset = 1
            return try? reader.fixed64()
        }
        return ProtobufScan.varint(field: 9, in: bytes)
    }
}

extension ParticipantState: CompactRow {
    package var cached: CachedRow? { .participant(self) }
    package init?(cached: CachedRow) {
        guard case .participant(let row) = cached else { return nil }
        self = row
    }

    /// Whether a stored participant row may name an invitation address: false only for a row in a
    /// compact layout without sealed fields (no box, no keyed hash) whose lookup has no plaintext email
    /// address or phone number, read without decoding the row; true for anything else (a row in an
    /// earlier release's protobuf layout, or bytes that are not a row: decode those whole).
    package static func storedMayNameAddress(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let first = bytes.first, first == compactLayoutOne || first == compactLayoutTwo else { return true }
        var reader = CompactReader(bytes, database: "rm_participants")
        reader.offset = 1
        // userRecordName, then the lookup's email address and phone number (``writeCompact(_:)``).
        do {
            try reader.skipBytes()
            return try reader.varint() != 0 || reader.varint() != 0
        } catch {
            return true
        }
    }

    package func writeCompact(_ w: inout CompactWriter) {
        w.string(userRecordName)
        w.string(lookupInfo.emailAddress)
        w.string(lookupInfo.phoneNumber)
        w.string(lookupInfo.userRecordName)
        w.varint(UInt64(role.rawValue))
        w.varint(UInt64(permission.rawValue))
        w.varint(UInt64(status.rawValue))
        w.int64(addedAtMicros)
        let layout = compactLayout
        guard layout != compactLayoutOne else { return }
        w.varint(approvedRequester ? 1 : 0)
        w.string(oneTimeToken)
        guard layout == compactLayoutThree else { return }
        // Third layout: subject and box of the sealed email or phone, the keyed hashes, forgotten at.
        w.sealedFields(
            hasSealedLookup ? sealedLookup : nil, emailHash: emailHash, phoneHash: phoneHash, forgottenAtMicros: forgottenAtMicros)
    }

    package var compactLayout: UInt8 {
        if hasSealedLookup || !emailHash.isEmpty || !phoneHash.isEmpty || forgottenAtMicros != 0 { return compactLayoutThree }
        return approvedRequester || !oneTimeToken.isEmpty ? compactLayoutTwo : compactLayoutOne
    }

    package static func reads(layout: UInt8) -> Bool {
        layout == compactLayoutOne || layout == compactLayoutTwo || layout == compactLayoutThree
    }

    package mutating func readLaterFields(_ r: inout CompactReader, layout: UInt8) throws(LedgerError) {
        guard layout != compactLayoutOne else { return }
        approvedRequester = try r.flag()
        oneTimeToken = try r.string()
        guard layout == compactLayoutThree else { return }
        let fields = try r.sealedFields()
        if let sealed = fields.sealed { sealedLookup = sealed }
        (emailHash, phoneHash, forgottenAtMicros) = (fields.emailHash, fields.phoneHash, fields.forgottenAtMicros)
    }

    package init(compact r: inout CompactReader) throws(LedgerError) {
        self.init()
        userRecordName = try r.string()
        let email = try r.string()
        let phone = try r.string()
        let name = try r.string()
        // Only a lookup info that names something is a set message field (as protobuf would decode it).
        if !(email.isEmpty && phone.isEmpty && name.isEmpty) {
            lookupInfo.emailAddress = email
            lookupInfo.phoneNumber = phone
            lookupInfo.userRecordName = name
        }
        role = Shareledger_Events_V1_Role(rawValue: try r.enumValue()) ?? .unknown
        permission = Shareledger_Events_V1_Permission(rawValue: try r.enumValue()) ?? .unknown
        status = Shareledger_Events_V1_AcceptanceStatus(rawValue: try r.enumValue()) ?? .statusUnknown
        addedAtMicros = try r.int64()
    }
}

extension ZoneState: CompactRow {
    package var cached: CachedRow? { .zone(self) }
    package init?(cached: CachedRow) {
        guard case .zone(let row) = cached else { return nil }
        self = row
    }

    package func writeCompact(_ w: inout CompactWriter) {
        w.varint(zoneID)
        w.varint(UInt64(capabilities))
        w.string(zoneShareToken)
        w.string(lastZoneShareToken)
        w.varint(UInt64(hierarchyShareCount))
        w.int64(createdAtMicros)
    }

    package init(compact r: inout CompactReader) throws(LedgerError) {
        self.init()
        zoneID = try r.varint()
        capabilities = try r.uint32()
        zoneShareToken = try r.string()
        lastZoneShareToken = try r.string()
        hierarchyShareCount = try r.uint32()
        createdAtMicros = try r.int64()
    }
}

extension UserState: CompactRow {
    package var cached: CachedRow? { .user(self) }
    package init?(cached: CachedRow) {
        guard case .user(let row) = cached else { return nil }
        self = row
    }

    package func writeCompact(_ w: inout CompactWriter) {
        w.string(emailAddress)
        w.string(phoneNumber)
        w.string(givenName)
        w.string(familyName)
        w.string(middleName)
        w.string(nickname)
        w.int64(registeredAtMicros)
        // Second layout: subject and box of the sealed personal data, the keyed hashes, forgotten at.
        guard compactLayout == compactLayoutTwo else { return }
        w.sealedFields(hasSealed ? sealed : nil, emailHash: emailHash, phoneHash: phoneHash, forgottenAtMicros: forgottenAtMicros)
    }

    package init(compact r: inout CompactReader) throws(LedgerError) {
        self.init()
        emailAddress = try r.string()
        phoneNumber = try r.string()
        givenName = try r.string()
        familyName = try r.string()
        middleName = try r.string()
        nickname = try r.string()
        registeredAtMicros = try r.int64()
    }

    package var compactLayout: UInt8 {
        hasSealed || !emailHash.isEmpty || !phoneHash.isEmpty || forgottenAtMicros != 0 ? compactLayoutTwo : compactLayoutOne
    }

    package static func reads(layout: UInt8) -> Bool { layout == compactLayoutOne || layout == compactLayoutTwo }

    package mutating func readLaterFields(_ r: inout CompactReader, layout: UInt8) throws(LedgerError) {
        guard layout == compactLayoutTwo else { return }
        let fields = try r.sealedFields()
        if let box = fields.sealed { sealed = box }
        (emailHash, phoneHash, forgottenAtMicros) = (fields.emailHash, fields.phoneHash, fields.forgottenAtMicros)
    }
}
