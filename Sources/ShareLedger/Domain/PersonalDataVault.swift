import ByteKeys
import Crypto
import EventLog
import Foundation
import LMDB
import SharingDomain
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The key store of crypto-shredding: one AES-256 key per person (container, user record name),
/// and one lookup key per ledger for the keyed hashes that find a user by email or phone.
///
/// Personal fields of events are sealed under their person's key before the event is appended
/// (``seal(_:container:subject:)``), so the log and the read models hold ciphertext only; answers
/// open the boxes when they need the plaintext (``open(_:container:)``). Destroying a person's key
/// (``destroy(container:user:)``) erases every box sealed under it, while the hash chain, which
/// covers the ciphertext, stays verifiable without keys.
///
/// The keys live in the file `personal-data.keys` of the ledger directory, never in LMDB (its free
/// pages keep old contents) and never in the log. Layout (`docs/log-format.md`, "Key store"): the
/// 8 bytes `SLKEYS2\n`, a header (the store's serial when the file was written, the number of
/// records written with it, a checksum), then records of kind (1 byte: 1 lookup key, 2 person key),
/// subject length (2 bytes, big-endian), subject (container ‖ 0 ‖ user; empty for the lookup key),
/// the 32-byte key and the first 4 bytes of the SHA-256 of the record before them. The serial counts
/// every record ever appended; the log's `meta` holds the serial its committed events need
/// (``Witness``), so a file cut back past a committed key is told from a record torn by a crash.
/// A new key is appended and synced before the event that uses it commits; destroying one rewrites
/// the file without it (a new file, synced, renamed over the old one). An incomplete last record
/// beyond what the log needs (a crash while appending) is ignored, and cut off by the next append;
/// any other damage, and a file shorter than the log needs, is ``LedgerError/Code/corruptedData``,
/// never a trap, and leaves the file as it is. Files of the first layout (`SLKEYS1\n`, no header)
/// open as they are and are rewritten in this layout by the next write.
package final class PersonalDataVault: Sendable {
    /// The key store's file name inside the ledger directory.
    static let fileName = "personal-data.keys"
    static let magic: [UInt8] = Array("SLKEYS2\n".utf8)
    /// The first layout's magic: no header, so a cut at a record boundary could not be seen.
    static let legacyMagic: [UInt8] = Array("SLKEYS1\n".utf8)
    /// Magic, serial (8), record count (4), checksum (4).
    static let headerBytes = 24
    static let keyBytes = 32
    static let checkBytes = 4

    enum Kind: UInt8 { case lookup = 1, person = 2 }

    /// What the log's `meta` says of the key store (`personal_data_keys`): the serial the committed
    /// events need (the store must have appended at least that many records), and how many times keys
    /// were destroyed (every process's caches of personal data check it through the commit that
    /// moves it).
    struct Witness: Equatable {
        var serial: UInt64
        var destroyed: UInt64

        static let metaKey = Array("personal_data_keys".utf8)

        var bytes: [UInt8] { BigEndian.bytes(of: serial) + BigEndian.bytes(of: destroyed) }

        init(serial: UInt64, destroyed: UInt64) {
            self.serial = serial
            self.destroyed = destroyed
        }

        /// Nil for anything but 16 bytes.
        init?(_ bytes: [UInt8]) {
            guard bytes.count == 16 else { return nil }
            let (serial, destroyed) = bytes.withUnsafeBytes { (BigEndian.uint64($0, at: 0) ?? 0, BigEndian.uint64($0, at: 8) ?? 0) }
            self.init(serial: serial, destroyed: destroyed)
        }
    }

    /// What identifies one version of the key file: a rewrite makes a new inode, an append a new size.
    struct FileIdentity: Equatable {
        var size = 0
        var inode: UInt64 = 0
        var modified = timespec()
        var changed = timespec()

        static func == (a: FileIdentity, b: FileIdentity) -> Bool {
            a.size == b.size && a.inode == b.inode && a.modified.tv_sec == b.modified.tv_sec
                && a.modified.tv_nsec == b.modified.tv_nsec && a.changed.tv_sec == b.changed.tv_sec
                && a.changed.tv_nsec == b.changed.tv_nsec
        }
    }

    struct State {
        var lookupKey: SymmetricKey? {
            didSet { lookupMAC = lookupKey.map { HMAC<SHA256>(key: $0) } }
        }
        /// An HMAC already keyed with ``lookupKey``, copied for every hash: keying one costs two
        /// SHA-256 blocks, which showed in the writer's profile (the digest contexts copy on write).
        var lookupMAC: HMAC<SHA256>?
        var keys: [String: SymmetricKey] = [:]
        /// Subjects in file order, for rewrites.
        var order: [String] = []
        /// Records ever appended to the store (the header's serial plus the records appended after
        /// the file was written).
        var serial: UInt64 = 0
        /// The length of the file's whole records: an append starts there (cutting off a torn one).
        var validLength = 0
        /// Whether the file has the first layout (no header), to be rewritten by the next write.
        var legacy = false
        /// The key file as this vault last wrote or read it: a registered vault is reused only while
        /// the file is still that one, and a change made by another process is read again.
        var file = FileIdentity()
        /// Moved on whenever keys go (destroyed here, or gone from a file another process rewrote):
        /// each ledger drops the answers it keeps when it sees this move.
        var generation: UInt64 = 0
        /// Keys appended since the file was last synced (``syncIfDirty()``).
        var unsynced = false
        /// Boxes opened already, by container, subject and box bytes: answers present the same
        /// people again and again, and AES-GCM plus a key lookup per name was most of the cost of
        /// sealing. Plaintext in this process's memory only; a subject's entries go when its key is
        /// destroyed, and all of them when the cache is full.
        var opened: [OpenedKey: Shareledger_Events_V1_PersonalFields] = [:]
        /// Boxes sealed already for an address subject (`#E…`, `#P…`), by container, subject and
        /// plaintext: an address is invited and looked up again and again, and sealing the same
        /// plaintext under the same key again gives nothing a reused box does not, since the keyed
        /// hash beside the box already tells equal addresses apart. Not kept for people's own
        /// subjects, whose boxes (titles) carry no such hash. Dropped with the subject's key.
        var sealedBoxes: [SealedKey: Data] = [:]
        /// Keyed hashes computed already, by message (kind, container, normalized address): the
        /// writer hashes the same address several times per invitation. Plaintext addresses in this
        /// process's memory only, as ``opened``; emptied by every key destruction.
        var hashes: [[UInt8]: [UInt8]] = [:]

        /// The keys and layout of `parsed`, with this state's caches of what `parsed` still holds.
        mutating func replaceKeys(with parsed: State) {
            let gone = Set(keys.keys).subtracting(parsed.keys.keys)
            let lookupChanged = lookupKey.map { key in parsed.lookupKey.map { $0 != key } ?? true } ?? false
            lookupKey = parsed.lookupKey
            keys = parsed.keys
            order = parsed.order
            serial = parsed.serial
            validLength = parsed.validLength
            legacy = parsed.legacy
            guard !gone.isEmpty || lookupChanged else { return }
            opened = opened.filter { !gone.contains(PersonalDataVault.subject($0.key.container, $0.key.subject)) }
            sealedBoxes = sealedBoxes.filter { !gone.contains(PersonalDataVault.subject($0.key.container, $0.key.subject)) }
            hashes.removeAll()
            generation &+= 1
        }
    }

    /// The key of a sealed box kept for reuse: an address's box holds its email address or phone
    /// number, as spelled, and nothing else.
    struct SealedKey: Hashable {
        var container: String
        var subject: String
        var emailAddress: String
        var phoneNumber: String
    }

    /// The key of an opened box.
    struct OpenedKey: Hashable {
        var container: String
        var subject: String
        var box: Data
    }

    /// Opened boxes kept at most (``State/opened``).
    static let openedCapacity = 16_384

    let fileURL: URL
    /// `fileURL`'s path, made once: every look at the file (``reloadIfChanged()``) stats it.
    let filePath: String
    package let writable: Bool
    let random: any LedgerRandomSource
    let state: Mutex<State>
    /// How many times ``reloadIfChanged()`` looked at the key file (for tests).
    let fileLooks = Atomic<Int>(0)

    private init(fileURL: URL, writable: Bool, random: any LedgerRandomSource, state: State) {
        self.fileURL = fileURL
        filePath = fileURL.path
        self.writable = writable
        self.random = random
        self.state = Mutex(state)
    }

    // MARK: - Registry

    /// One vault per ledger directory in this process, so every opening of a ledger (the writer,
    /// audit, rebuild, import) sees the same keys.
    private static let registry = Mutex<[String: PersonalDataVault]>([:])

    /// The vault of the ledger at `directory`, loaded (and, when `writable`, created with its lookup
    /// key) on first use in this process. With `witness` (what the log's `meta` says its committed
    /// events need), a store that holds fewer records than that, or none, is
    /// ``LedgerError/Code/corruptedData`` and nothing is created or changed.
    static func forLedger(
        at directory: String, writable: Bool, random: any LedgerRandomSource = SystemRandomSource(), witness: Witness? = nil
    ) throws(LedgerError) -> PersonalDataVault {
        let key = URL(fileURLWithPath: directory).standardizedFileURL.path
        let result: Result<PersonalDataVault, LedgerError> = registry.withLock { vaults in
            do throws(LedgerError) {
                if let vault = vaults[key], vault.writable || !writable, vault.fileUnchanged() {
                    try vault.check(witness)
                    return .success(vault)
                }
                let vault = try PersonalDataVault.load(directory: key, writable: writable, random: random, witness: witness)
                vaults[key] = vault
                return .success(vault)
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// Makes `vault` the key store of the ledger at `directory` in this process: views such as
    /// snapshots answer with their source's keys, and no copy of a key is written anywhere (a
    /// later forget destroys the only one).
    package static func register(_ vault: PersonalDataVault, at directory: String) {
        let key = URL(fileURLWithPath: directory).standardizedFileURL.path
        registry.withLock { $0[key] = vault }
    }

    /// The registered vault of `directory`, if a ledger there was opened in this process.
    static func registered(at directory: String) -> PersonalDataVault? {
        let key = URL(fileURLWithPath: directory).standardizedFileURL.path
        return registry.withLock { $0[key] }
    }

    /// Whether the key file is still the one this vault last wrote or read (a directory may be
    /// removed and made again at the same path, a key store restored from a backup).
    private func fileUnchanged() -> Bool {
        let now = PersonalDataVault.fileIdentity(filePath)
        return state.withLock { $0.file == now }
    }

    /// The size, inode and times of the file at `path`; zeros when there is none.
    static func fileIdentity(_ path: String) -> FileIdentity {
        var info = stat()
        guard stat(path, &info) == 0 else { return FileIdentity() }
        #if canImport(Darwin)
            return FileIdentity(size: Int(info.st_size), inode: UInt64(info.st_ino), modified: info.st_mtimespec, changed: info.st_ctimespec)
        #else
            return FileIdentity(size: Int(info.st_size), inode: UInt64(info.st_ino), modified: info.st_mtim, changed: info.st_ctim)
        #endif
    }

    /// Records the key file's current identity (after a load or a write).
    func noteFile(_ state: inout State) {
        state.file = PersonalDataVault.fileIdentity(fileURL.path)
    }

    /// How many times this vault's keys went (see ``State/generation``).
    var generation: UInt64 { state.withLock { $0.generation } }

    /// Records ever appended to the store, as this vault last read or wrote it.
    var serial: UInt64 { state.withLock { $0.serial } }

    /// Whether the store holds any person's key (keys that committed events may use).
    var holdsPersonKeys: Bool { state.withLock { !$0.order.isEmpty } }

    // MARK: - Loading

    static func damaged(_ offset: Int, _ what: String) -> LedgerError {
        LedgerError(
            .corruptedData, "the key store \(fileName) is damaged at byte \(offset) (\(what)); restore it from its "
                + "backup (docs/operations.md, \"Key backup\"). Without a backup the sealed personal data is lost: "
                + "`share-ledger key-store replace-lost` (`ShareLedger.replaceLostKeyStore(at:)`) puts a new store in its place")
    }

    static func short(of witness: Witness, holding serial: UInt64, exists: Bool) -> LedgerError {
        let what =
            exists
            ? "holds \(serial) of the \(witness.serial) keys the log's committed events need: it was cut or replaced by an older copy"
            : "is missing or empty, while the log holds events sealed under its keys"
        return LedgerError(
            .corruptedData, "the key store \(fileName) \(what); restore it from its backup (docs/operations.md, \"Key "
                + "backup\") before opening the ledger. Without a backup the sealed personal data is lost: "
                + "`share-ledger key-store replace-lost` (`ShareLedger.replaceLostKeyStore(at:)`) puts a new store in its place")
    }

    /// Throws ``LedgerError/Code/corruptedData`` when this store holds fewer records than `witness` needs.
    func check(_ witness: Witness?) throws(LedgerError) {
        guard let witness else { return }
        let (serial, length) = state.withLock { ($0.serial, $0.validLength) }
        guard serial >= witness.serial else { throw PersonalDataVault.short(of: witness, holding: serial, exists: length > 0) }
    }

    static func load(directory: String, writable: Bool, random: any LedgerRandomSource, witness: Witness? = nil) throws(LedgerError)
        -> PersonalDataVault
    {
        let url = URL(fileURLWithPath: directory).appendingPathComponent(fileName)
        var state = State()
        if let data = FileManager.default.contents(atPath: url.path), !data.isEmpty {
            state = try parse(Array(data))
        }
        let vault = PersonalDataVault(fileURL: url, writable: writable, random: random, state: state)
        // Before anything is made: a missing or cut store the log needs stays as it is.
        try vault.check(witness)
        try vault.state.withLock { (state: inout State) throws(LedgerError) in
            if writable, state.lookupKey == nil {
                // No record at all: a new store, or one whose making a crash cut short.
                guard state.serial == 0 else { throw damaged(0, "no lookup key") }
                try vault.create(&state, replacing: FileManager.default.fileExists(atPath: url.path))
            }
            vault.noteFile(&state)
        }
        return vault
    }

    /// Puts a new store (a new lookup key, at a serial the log's `witness` accepts) in place of a
    /// lost one, which is moved aside; refuses when the store is intact. Returns where the lost file
    /// went (``ShareLedger/replaceLostKeyStore(at:randomSource:)``).
    static func replaceLost(directory: String, witness: Witness?, random: any LedgerRandomSource) throws(LedgerError) -> String? {
        let url = URL(fileURLWithPath: directory).appendingPathComponent(fileName)
        let intact: Bool
        do {
            let vault = try load(directory: directory, writable: false, random: random, witness: witness)
            intact = vault.state.withLock { $0.lookupKey != nil }
        } catch {
            guard error.code == .corruptedData else { throw error }
            intact = false
        }
        guard !intact else {
            throw LedgerError(
                .invalidArguments, "the key store \(fileName) is intact: nothing is lost, and nothing was changed")
        }
        var moved: String?
        if FileManager.default.fileExists(atPath: url.path) {
            let aside = url.path + ".lost-\(Int(Date().timeIntervalSince1970))"
            guard rename(url.path, aside) == 0 else {
                throw LedgerError(
                    .storageFailure, "cannot move the lost key store aside (errno \(errno)); check the permissions of the "
                        + "ledger directory")
            }
            moved = aside
        }
        let vault = PersonalDataVault(fileURL: url, writable: true, random: random, state: State())
        try vault.state.withLock { (state: inout State) throws(LedgerError) in
            state.lookupKey = vault.newKey()
            state.serial = max(witness?.serial ?? 0, 1)
            try vault.rewrite(&state)
        }
        let key = URL(fileURLWithPath: directory).standardizedFileURL.path
        registry.withLock { $0[key] = nil }
        return moved
    }

    /// Parses a key file (either layout): its keys, serial and the length of its whole records.
    static func parse(_ bytes: [UInt8]) throws(LedgerError) -> State {
        var state = State()
        var offset: Int
        var promised = 0
        var headerSerial: UInt64 = 0
        if bytes.count < magic.count, Array(magic.prefix(bytes.count)) == bytes || Array(legacyMagic.prefix(bytes.count)) == bytes {
            // The start of a store whose making a crash cut short (or an empty file): no record.
            return state
        }
        if bytes.count >= legacyMagic.count, Array(bytes[0..<legacyMagic.count]) == legacyMagic {
            state.legacy = true
            offset = legacyMagic.count
        } else {
            guard bytes.count >= magic.count, Array(bytes[0..<magic.count]) == magic else {
                throw damaged(0, bytes.count < magic.count ? "cut inside its first bytes" : "not a key store")
            }
            guard bytes.count >= headerBytes else { throw damaged(bytes.count, "cut inside its header") }
            let check = Array(SHA256.hash(data: bytes[0..<(headerBytes - checkBytes)]).prefix(checkBytes))
            guard check == Array(bytes[(headerBytes - checkBytes)..<headerBytes]) else { throw damaged(8, "header checksum mismatch") }
            (headerSerial, promised) = bytes.withUnsafeBytes { raw in
                (BigEndian.uint64(raw, at: 8) ?? 0, Int(BigEndian.uint32(raw, at: 16) ?? 0))
            }
            guard UInt64(promised) <= headerSerial else { throw damaged(8, "more records than its serial") }
            offset = headerBytes
        }
        var records = 0
        while offset < bytes.count {
            let start = offset
            guard bytes.count - offset >= 3 else { break }
            guard let kind = Kind(rawValue: bytes[offset]) else { throw damaged(offset, "unknown record kind") }
            let length = Int(bytes[offset + 1]) << 8 | Int(bytes[offset + 2])
            let end = offset + 3 + length + keyBytes + checkBytes
            guard end <= bytes.count else { break }
            let body = Array(bytes[start..<(end - checkBytes)])
            let check = Array(SHA256.hash(data: body).prefix(checkBytes))
            guard check == Array(bytes[(end - checkBytes)..<end]) else { throw damaged(start, "checksum mismatch") }
            let subjectBytes = bytes[(offset + 3)..<(offset + 3 + length)]
            guard let subject = String(validating: subjectBytes, as: UTF8.self) else { throw damaged(start, "subject") }
            let key = SymmetricKey(data: bytes[(offset + 3 + length)..<(end - checkBytes)])
            switch kind {
            case .lookup:
                guard subject.isEmpty, state.lookupKey == nil else { throw damaged(start, "a second lookup key") }
                state.lookupKey = key
            case .person:
                guard !subject.isEmpty else { throw damaged(start, "empty subject") }
                if state.keys.updateValue(key, forKey: subject) == nil { state.order.append(subject) }
            }
            records += 1
            offset = end
        }
        // The records written with the header are whole in any file this code wrote (it is renamed
        // into place complete): fewer is a cut. Records appended after them may end in a torn one.
        guard records >= promised else {
            throw damaged(offset, "cut: its header promises \(promised) records, \(records) are whole")
        }
        state.serial = state.legacy ? UInt64(records) : headerSerial + UInt64(records - promised)
        state.validLength = offset
        return state
    }

    /// Reads the key file again if another process changed it (appended keys, or rewrote it without
    /// destroyed ones): the keys are the file's, and the answers kept from destroyed keys go.
    /// Returns whether the keys changed. A file that is gone or damaged now is
    /// ``LedgerError/Code/corruptedData``, and the keys in memory stay as they were.
    @discardableResult
    func reloadIfChanged() throws(LedgerError) -> Bool {
        fileLooks.add(1, ordering: .relaxed)
        return try state.withLock { (state: inout State) throws(LedgerError) -> Bool in try reloadIfChanged(&state) }
    }

    @discardableResult
    func reloadIfChanged(_ state: inout State) throws(LedgerError) -> Bool {
        let now = PersonalDataVault.fileIdentity(filePath)
        guard now != state.file else { return false }
        guard let data = FileManager.default.contents(atPath: filePath), !data.isEmpty else {
            throw PersonalDataVault.short(of: Witness(serial: state.serial, destroyed: 0), holding: 0, exists: false)
        }
        let parsed = try PersonalDataVault.parse(Array(data))
        guard parsed.serial >= state.serial else {
            throw PersonalDataVault.short(of: Witness(serial: state.serial, destroyed: 0), holding: parsed.serial, exists: true)
        }
        state.replaceKeys(with: parsed)
        state.file = now
        return true
    }
}
