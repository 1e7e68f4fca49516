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
final class PersonalDataVault: Sendable {
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
    let writable: Bool
    let random: any LedgerRandomSource
    let state: Mutex<State>

    private init(fileURL: URL, writable: Bool, random: any LedgerRandomSource, state: State) {
        self.fileURL = fileURL
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
    static func register(_ vault: PersonalDataVault, at directory: String) {
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
        let now = PersonalDataVault.fileIdentity(fileURL.path)
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
    private func noteFile(_ state: inout State) {
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
        try state.withLock { (state: inout State) throws(LedgerError) -> Bool in try reloadIfChanged(&state) }
    }

    @discardableResult
    private func reloadIfChanged(_ state: inout State) throws(LedgerError) -> Bool {
        let now = PersonalDataVault.fileIdentity(fileURL.path)
        guard now != state.file else { return false }
        guard let data = FileManager.default.contents(atPath: fileURL.path), !data.isEmpty else {
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

    // MARK: - Keys

    static func subject(_ container: String, _ user: String) -> String { container + "\u{0}" + user }

    /// `count` bytes (a multiple of 8) from the injected random source.
    private func randomBytes(_ count: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count)
        for _ in 0..<(count / 8) {
            var word = random.next()
            for _ in 0..<8 {
                bytes.append(UInt8(truncatingIfNeeded: word))
                word >>= 8
            }
        }
        return bytes
    }

    private func newKey() -> SymmetricKey { SymmetricKey(data: randomBytes(PersonalDataVault.keyBytes)) }

    static func record(kind: Kind, subject: String, key: SymmetricKey) -> [UInt8] {
        let subjectBytes = Array(subject.utf8)
        var out: [UInt8] = [kind.rawValue, UInt8(subjectBytes.count >> 8), UInt8(subjectBytes.count & 0xFF)]
        out += subjectBytes
        key.withUnsafeBytes { out += $0 }
        out += Array(SHA256.hash(data: out).prefix(checkBytes))
        return out
    }

    /// The magic and header of a file written whole, holding `count` records, at `serial`.
    static func header(serial: UInt64, count: Int) -> [UInt8] {
        var out = magic + BigEndian.bytes(of: serial) + BigEndian.bytes(of: UInt32(count))
        out += Array(SHA256.hash(data: out).prefix(checkBytes))
        return out
    }

    /// The whole file for `state`'s keys: header, lookup key, person keys in order.
    private static func contents(of state: State) -> [UInt8] {
        var records: [UInt8] = []
        var count = 0
        if let lookup = state.lookupKey {
            records += record(kind: .lookup, subject: "", key: lookup)
            count += 1
        }
        for subject in state.order {
            if let key = state.keys[subject] {
                records += record(kind: .person, subject: subject, key: key)
                count += 1
            }
        }
        return header(serial: state.serial, count: count) + records
    }

    /// Makes a new store holding a new lookup key: written whole to a new file, synced, and linked
    /// into place only if no store appeared meanwhile (another process made one: its keys are loaded),
    /// or renamed over a file that holds no record (`replacing`: a making that a crash cut short).
    private func create(_ state: inout State, replacing: Bool) throws(LedgerError) {
        var fresh = State()
        fresh.lookupKey = newKey()
        fresh.serial = 1
        let bytes = PersonalDataVault.contents(of: fresh)
        let temporary = fileURL.path + ".new"
        try writeSynced(bytes, to: temporary)
        defer { unlink(temporary) }
        if replacing {
            guard rename(temporary, fileURL.path) == 0 else {
                throw LedgerError(
                    .storageFailure, "cannot replace the key store \(PersonalDataVault.fileName) (errno \(errno)); check the "
                        + "permissions of the ledger directory")
            }
        } else if link(temporary, fileURL.path) != 0 {
            guard errno == EEXIST else {
                throw LedgerError(
                    .storageFailure, "cannot create the key store \(PersonalDataVault.fileName) (errno \(errno)); check the "
                        + "permissions of the ledger directory")
            }
            // Made by another process in between: use it.
            guard let data = FileManager.default.contents(atPath: fileURL.path), !data.isEmpty else {
                throw LedgerError(.storageFailure, "the key store \(PersonalDataVault.fileName) appeared while it was created; retry")
            }
            state = try PersonalDataVault.parse(Array(data))
            return
        }
        PersonalDataVault.syncDirectory(fileURL.deletingLastPathComponent().path)
        fresh.validLength = bytes.count
        state = fresh
    }

    /// Writes `bytes` to a new file at `path` (replacing one left there) and syncs it.
    private func writeSynced(_ bytes: [UInt8], to path: String) throws(LedgerError) {
        let fd = systemOpen(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else {
            throw LedgerError(
                .storageFailure, "cannot write a new key store \(URL(fileURLWithPath: path).lastPathComponent) (errno \(errno)); "
                    + "check the permissions of the ledger directory and the free space")
        }
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let synced = written == bytes.count && fsync(fd) == 0
        let failure = errno
        close(fd)
        guard synced else {
            unlink(path)
            throw LedgerError(
                failure == ENOSPC ? .storageFull : .storageFailure,
                "cannot write a new key store \(URL(fileURLWithPath: path).lastPathComponent) (errno \(failure)); check the disk")
        }
    }

    /// Writes `state`'s keys as a new file (synced) renamed over the key store, the directory synced.
    private func rewrite(_ state: inout State) throws(LedgerError) {
        let bytes = PersonalDataVault.contents(of: state)
        let temporary = fileURL.path + ".new"
        try writeSynced(bytes, to: temporary)
        guard rename(temporary, fileURL.path) == 0 else {
            let failure = errno
            unlink(temporary)
            throw LedgerError(
                .storageFailure, "cannot replace the key store \(PersonalDataVault.fileName) (errno \(failure)); check "
                    + "the disk, then run forget again")
        }
        PersonalDataVault.syncDirectory(fileURL.deletingLastPathComponent().path)
        state.validLength = bytes.count
        state.legacy = false
        state.unsynced = false
        noteFile(&state)
    }

    /// Appends one record; syncs it when `sync` (a new key in a commit is synced once for the whole
    /// transaction instead: ``syncIfDirty()``). A store of the first layout is rewritten in this one
    /// first; a torn record after the whole ones (a crash while appending) is cut off first.
    private func append(_ state: inout State, kind: Kind, subject: String, key: SymmetricKey, sync: Bool = true) throws(LedgerError) {
        // Another process may have appended or rewritten since (appends happen in write
        // transactions, which one process at a time holds): continue from the file as it is.
        try reloadIfChanged(&state)
        if state.legacy || state.validLength == 0 { try rewrite(&state) }
        let bytes = PersonalDataVault.record(kind: kind, subject: subject, key: key)
        let fd = systemOpen(fileURL.path, O_WRONLY)
        guard fd >= 0 else {
            throw LedgerError(
                .storageFailure, "cannot open the key store \(PersonalDataVault.fileName) for writing (errno \(errno)); "
                    + "check the permissions of the ledger directory")
        }
        defer { close(fd) }
        if state.file.size != state.validLength, ftruncate(fd, off_t(state.validLength)) != 0 {
            throw LedgerError(
                .storageFailure, "cannot cut the incomplete last record of the key store \(PersonalDataVault.fileName) "
                    + "(errno \(errno)); check the permissions of the ledger directory")
        }
        let written = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(state.validLength)) }
        guard written == bytes.count, !sync || fsync(fd) == 0 else {
            let failure = errno
            throw LedgerError(
                failure == ENOSPC ? .storageFull : .storageFailure,
                "cannot write the key store \(PersonalDataVault.fileName) (errno \(failure)); check the disk")
        }
        state.validLength += bytes.count
        state.serial += 1
        noteFile(&state)
    }

    private static func syncDirectory(_ path: String) {
        let fd = systemOpen(path, O_RDONLY)
        guard fd >= 0 else { return }
        _ = fsync(fd)
        close(fd)
    }

    /// The key of (container, user), made and stored (synced) first if `create` and there is none.
    func key(container: String, user: String, create: Bool) throws(LedgerError) -> SymmetricKey? {
        let subject = PersonalDataVault.subject(container, user)
        return try state.withLock { (state: inout State) throws(LedgerError) -> SymmetricKey? in
            if let key = state.keys[subject] { return key }
            guard create else { return nil }
            guard writable else { throw LedgerError(.readOnly, "the key store is open read-only; no key can be made") }
            let key = newKey()
            // Synced before the transaction that uses it commits (the writer's willCommit).
            try append(&state, kind: .person, subject: subject, key: key, sync: false)
            // Another process's rewrite read in by the append may have brought this subject's key.
            if let existing = state.keys[subject] { return existing }
            state.keys[subject] = key
            state.order.append(subject)
            state.unsynced = true
            return key
        }
    }

    /// Syncs the key file if keys were appended since it was last synced: the writer calls it right
    /// before a transaction commits, so no committed event is sealed under a key a power loss could
    /// take (one `fsync` per group commit that made keys, not one per key). Returns the serial the
    /// committed events may need (every record up to it is synced), nil while the store holds no
    /// person's key (nothing committed can need it).
    @discardableResult
    func syncIfDirty() throws(LedgerError) -> UInt64? {
        try state.withLock { (state: inout State) throws(LedgerError) -> UInt64? in
            if state.unsynced {
                let fd = systemOpen(fileURL.path, O_RDONLY)
                guard fd >= 0, fsync(fd) == 0 else {
                    if fd >= 0 { close(fd) }
                    throw LedgerError(
                        .storageFailure, "cannot sync the key store \(PersonalDataVault.fileName) (errno \(errno)); check the disk")
                }
                close(fd)
                state.unsynced = false
            }
            return state.order.isEmpty ? nil : state.serial
        }
    }

    /// Whether (container, user) has a key.
    func hasKey(container: String, user: String) -> Bool {
        state.withLock { $0.keys[PersonalDataVault.subject(container, user)] != nil }
    }

    /// Destroys the key of (container, user): rewrites the key file without it (a new file, synced,
    /// renamed over the old one, the directory synced). Returns whether there was a key.
    @discardableResult
    func destroy(container: String, user: String) throws(LedgerError) -> Bool {
        try destroy([(container, user)]) > 0
    }

    /// Destroys the keys of every (container, user) of `people` with one rewrite of the key file (a
    /// forget takes the user's key and those of their addresses; an open may finish several).
    /// Returns how many of them had a key. The file is read again first, so keys another process
    /// appended stay: call it inside a write transaction of the ledger (no process appends then).
    @discardableResult
    func destroy(_ people: [(container: String, user: String)]) throws(LedgerError) -> Int {
        let subjects = Set(people.map { PersonalDataVault.subject($0.container, $0.user) })
        return try state.withLock { (state: inout State) throws(LedgerError) -> Int in
            if writable { try reloadIfChanged(&state) }
            let held = subjects.filter { state.keys[$0] != nil }
            guard !held.isEmpty else { return 0 }
            guard writable else { throw LedgerError(.readOnly, "the key store is open read-only; no key can be destroyed") }
            var remaining = state
            for subject in held { remaining.keys[subject] = nil }
            remaining.order.removeAll { held.contains($0) }
            try rewrite(&remaining)
            state.replaceKeys(with: remaining)
            state.file = remaining.file
            state.unsynced = false
            return held.count
        }
    }

    // MARK: - Sealing

    private static func associatedData(_ container: String, _ subject: String) -> [UInt8] {
        Array(container.utf8) + [0] + Array(subject.utf8)
    }

    /// `fields` sealed under the key of (container, subject), made first if there is none.
    func seal(_ fields: Shareledger_Events_V1_PersonalFields, container: String, subject: String) throws(LedgerError)
        -> Shareledger_Events_V1_SealedPersonalData
    {
        var sealed = Shareledger_Events_V1_SealedPersonalData()
        sealed.subject = subject
        // Checked first: a kept box means the key exists (boxes go with their key), and a hit needs
        // neither the key nor the encoding (the writer seals the same address again and again).
        // An address's subject starts with `#`, which no user record name holds (``AddressHash/subject``).
        let reusable =
            !fields.hasName && fields.title.isEmpty && fields.unknownFields.data.isEmpty && subject.utf8.first == UInt8(ascii: "#")
        let cacheKey = SealedKey(
            container: container, subject: subject, emailAddress: fields.emailAddress, phoneNumber: fields.phoneNumber)
        if reusable, let box = state.withLock({ $0.sealedBoxes[cacheKey] }) {
            sealed.box = box
            return sealed
        }
        guard let key = try key(container: container, user: subject, create: true) else {
            throw LedgerError(.storageFailure, "no key could be made for sealing personal data")
        }
        do {
            var options = BinaryEncodingOptions()
            options.useDeterministicOrdering = true
            let plaintext: [UInt8] = try fields.serializedBytes(options: options)
            let nonceBytes = randomBytes(16)
            let nonce = try AES.GCM.Nonce(data: nonceBytes.prefix(12))
            let box = try AES.GCM.seal(
                plaintext, using: key, nonce: nonce, authenticating: PersonalDataVault.associatedData(container, subject))
            sealed.box = Data(box.combined ?? Data())
            if reusable {
                state.withLock { state in
                    // Kept only while the key still exists (as in ``open(_:container:)``).
                    guard state.keys[PersonalDataVault.subject(container, subject)] != nil else { return }
                    if state.sealedBoxes.count >= PersonalDataVault.openedCapacity { state.sealedBoxes.removeAll(keepingCapacity: true) }
                    state.sealedBoxes[cacheKey] = sealed.box
                }
            }
            return sealed
        } catch {
            throw LedgerError(.storageFailure, "sealing personal data failed: \(error)")
        }
    }

    /// The fields in `sealed`, or nil when its key is destroyed (the person was forgotten) or the box
    /// does not open (damaged, or sealed under another key store).
    func open(_ sealed: Shareledger_Events_V1_SealedPersonalData, container: String) -> Shareledger_Events_V1_PersonalFields? {
        let cacheKey = OpenedKey(container: container, subject: sealed.subject, box: sealed.box)
        if let fields = state.withLock({ $0.opened[cacheKey] }) { return fields }
        guard let key = try? key(container: container, user: sealed.subject, create: false) else { return nil }
        guard let box = try? AES.GCM.SealedBox(combined: sealed.box),
            let plaintext = try? AES.GCM.open(
                box, using: key, authenticating: PersonalDataVault.associatedData(container, sealed.subject)),
            let fields = try? Shareledger_Events_V1_PersonalFields(serializedBytes: plaintext)
        else { return nil }
        state.withLock { state in
            // Kept only while the key still exists: a destroy that ran since the open above has
            // already dropped this subject's entries, and must not see this one come back.
            guard state.keys[PersonalDataVault.subject(container, sealed.subject)] != nil else { return }
            if state.opened.count >= PersonalDataVault.openedCapacity { state.opened.removeAll(keepingCapacity: true) }
            state.opened[cacheKey] = fields
        }
        return fields
    }

    // MARK: - Keyed hashes

    /// HMAC-SHA256 under the lookup key of `kind` (`e` or `p`), the container and the normalized
    /// value: the key of an `rm_user_lookup` entry. Nil without a lookup key (a read-only ledger
    /// whose key store was never made).
    func lookupHash(_ kind: Character, container: String, normalized: String) -> [UInt8]? {
        var message: [UInt8] = []
        message.reserveCapacity(2 + container.utf8.count + normalized.utf8.count)
        message += String(kind).utf8
        message += container.utf8
        message.append(0)
        message += normalized.utf8
        let (kept, template) = state.withLock { ($0.hashes[message], $0.lookupMAC) }
        if let kept { return kept }
        guard var mac = template else { return nil }
        mac.update(data: message)
        let hash = Array(mac.finalize())
        state.withLock { state in
            if state.hashes.count >= PersonalDataVault.openedCapacity { state.hashes.removeAll(keepingCapacity: true) }
            state.hashes[message] = hash
        }
        return hash
    }
}

import SwiftProtobuf

private func systemOpen(_ path: String, _ flags: Int32, _ mode: mode_t = 0) -> Int32 {
    #if canImport(Glibc)
        return Glibc.open(path, flags, mode)
    #else
        return Darwin.open(path, flags, mode)
    #endif
}


extension ReadModels {
    /// `pending` with its personal fields sealed under their person's key, when these read models
    /// have a key store (``vault``); unchanged otherwise, and for events without personal fields
    /// this release seals. Today: `UserRegistered`'s email address, phone number and name (the
    /// user's key), share titles (the owner's key), and the email address or phone number of an
    /// invitation or a participant lookup (the key of that address, ``AddressHash/subject``).
    /// A `PersonalDataForgotten` of a user gets the keyed hashes of the addresses the user registered
    /// with, whose keys go with the user's.
    func sealingPersonalData(
        of pending: PendingEvent, container: String, _ txn: borrowing some ReadModelStore & ~Copyable
    ) throws -> PendingEvent {
        guard sealsNewEvents, let vault else { return pending }
        if case .personalDataForgotten(var e) = pending.event, !e.userRecordName.isEmpty, e.addresses.isEmpty {
            guard let state = try user(txn, container, e.userRecordName) else { return pending }
            for address in registeredAddresses(of: state, container: container) {
                switch address.kind {
                case .email: e.emailHash = Data(address.hash)
                case .phone: e.phoneHash = Data(address.hash)
                }
            }
            return PendingEvent(stream: pending.stream, event: .personalDataForgotten(e))
        }
        func sealedTitle(_ title: String, owner: String) throws(LedgerError) -> Shareledger_Events_V1_SealedPersonalData {
            var fields = Shareledger_Events_V1_PersonalFields()
            fields.title = title
            return try vault.seal(fields, container: container, subject: owner)
        }
        switch pending.event {
        case .shareCreated(var e) where !e.title.isEmpty:
            e.sealedTitle = try sealedTitle(e.title, owner: e.ownerName)
            e.title = ""
            return PendingEvent(stream: pending.stream, event: .shareCreated(e))
        case .shareTitleChanged(var e) where !e.title.isEmpty:
            guard let owner = try share(txn, e.token)?.ownerName else { return pending }
            e.sealedTitle = try sealedTitle(e.title, owner: owner)
            e.title = ""
            return PendingEvent(stream: pending.stream, event: .shareTitleChanged(e))
        case .participantAdded(var e) where !e.hasSealedLookup:
            guard let sealed = try sealedLookup(&e.lookupInfo, container: container, vault) else { return pending }
            e.sealedLookup = sealed
            if e.lookupInfo == PBLookupInfo() { e.clearLookupInfo() }
            return PendingEvent(stream: pending.stream, event: .participantAdded(e))
        case .shareParticipantFetched(var e) where !e.hasSealedLookup:
            guard let sealed = try sealedLookup(&e.lookupInfo, container: container, vault) else { return pending }
            e.sealedLookup = sealed
            if e.lookupInfo == PBLookupInfo() { e.clearLookupInfo() }
            return PendingEvent(stream: pending.stream, event: .shareParticipantFetched(e))
        default:
            break
        }
        guard case .userRegistered(var e) = pending.event, !e.hasSealed,
            !e.emailAddress.isEmpty || !e.phoneNumber.isEmpty || e.hasName
        else { return pending }
        var fields = Shareledger_Events_V1_PersonalFields()
        fields.emailAddress = e.emailAddress
        fields.phoneNumber = e.phoneNumber
        if e.hasName { fields.name = e.name }
        e.sealed = try vault.seal(fields, container: container, subject: e.userRecordName)
        if !fields.emailAddress.isEmpty, let hash = lookupHash(container, email: fields.emailAddress) { e.sealed.emailHash = Data(hash) }
        if !fields.phoneNumber.isEmpty, let hash = lookupHash(container, phone: fields.phoneNumber) { e.sealed.phoneHash = Data(hash) }
        e.emailAddress = ""
        e.phoneNumber = ""
        e.clearName()
        return PendingEvent(stream: pending.stream, event: .userRegistered(e))
    }

    /// The email address or phone number of `lookup` sealed under the key of that address, with its
    /// keyed hash; the plaintext is taken out of `lookup`. Nil (and `lookup` unchanged) when it has
    /// neither.
    private func sealedLookup(_ lookup: inout PBLookupInfo, container: String, _ vault: PersonalDataVault) throws
        -> Shareledger_Events_V1_SealedPersonalData?
    {
        guard let address = addressHash(container, of: lookup) else { return nil }
        var fields = Shareledger_Events_V1_PersonalFields()
        fields.emailAddress = lookup.emailAddress
        fields.phoneNumber = lookup.phoneNumber
        var sealed = try vault.seal(fields, container: container, subject: address.subject)
        switch address.kind {
        case .email: sealed.emailHash = Data(address.hash)
        case .phone: sealed.phoneHash = Data(address.hash)
        }
        lookup.emailAddress = ""
        lookup.phoneNumber = ""
        return sealed
    }

    /// The addresses a user registered with, by keyed hash: those of a sealed row as stored, those of
    /// a row written before crypto-shredding hashed now (empty without a key store).
    func registeredAddresses(of state: UserState, container: String) -> [AddressHash] {
        if !state.emailHash.isEmpty || !state.phoneHash.isEmpty {
            return AddressHash.pair(email: state.emailHash, phone: state.phoneHash)
        }
        var out: [AddressHash] = []
        if !state.emailAddress.isEmpty, let address = addressHash(container, email: state.emailAddress) { out.append(address) }
        if !state.phoneNumber.isEmpty, let address = addressHash(container, phone: state.phoneNumber) { out.append(address) }
        return out
    }

    /// What a user row says of the person: the fields (plaintext in rows written before
    /// crypto-shredding, else the opened box), or nil when they are erased (forgotten, or the box's
    /// key is gone). `erased` is false for a user who never gave any.
    func personalFields(of state: UserState, container: String) -> (fields: Shareledger_Events_V1_PersonalFields?, erased: Bool) {
        if state.forgottenAtMicros != 0 { return (nil, true) }
        if state.hasSealed {
            guard let fields = vault?.open(state.sealed, container: container) else { return (nil, true) }
            return (fields, false)
        }
        var fields = Shareledger_Events_V1_PersonalFields()
        fields.emailAddress = state.emailAddress
        fields.phoneNumber = state.phoneNumber
        fields.name.givenName = state.givenName
        fields.name.familyName = state.familyName
        fields.name.middleName = state.middleName
        fields.name.nickname = state.nickname
        return (fields, false)
    }

    /// A share's title: its plaintext (rows written before crypto-shredding) or its opened box;
    /// `erased` when the box's key is gone (the owner was forgotten).
    func title(of share: ShareState) -> (title: String, erased: Bool) {
        guard share.hasSealedTitle else { return (share.title, false) }
        guard let fields = vault?.open(share.sealedTitle, container: share.container) else { return ("", true) }
        return (fields.title, false)
    }

    /// The personal fields of a registration event: its plaintext fields (written before
    /// crypto-shredding) or its opened box; nil when the box's key is gone.
    func personalFields(of e: Shareledger_Events_V1_UserRegistered, container: String) -> Shareledger_Events_V1_PersonalFields? {
        guard e.hasSealed else {
            var fields = Shareledger_Events_V1_PersonalFields()
            fields.emailAddress = e.emailAddress
            fields.phoneNumber = e.phoneNumber
            if e.hasName { fields.name = e.name }
            return fields
        }
        return vault?.open(e.sealed, container: container)
    }
}

extension PersonalDataVault {
    /// The (container, user) of every person key, in file order.
    func people() -> [(container: String, user: String)] {
        state.withLock { state in
            state.order.compactMap { subject in
                guard let zero = subject.firstIndex(of: "\u{0}") else { return nil }
                return (String(subject[..<zero]), String(subject[subject.index(after: zero)...]))
            }
        }
    }
}

extension DomainEvent {
    /// Whether the event's payload holds personal data in plaintext: a registration or title written
    /// before crypto-shredding, an invitation's or lookup's email or phone written before invitations
    /// were sealed, or anything written with sealing off (``ShareLedger/Configuration/sealsPersonalData``).
    /// `audit` counts them.
    var holdsPlaintextPersonalData: Bool {
        switch self {
        case .userRegistered(let e): return !e.emailAddress.isEmpty || !e.phoneNumber.isEmpty || e.hasName
        case .participantAdded(let e): return !e.lookupInfo.emailAddress.isEmpty || !e.lookupInfo.phoneNumber.isEmpty
        case .shareParticipantFetched(let e): return !e.lookupInfo.emailAddress.isEmpty || !e.lookupInfo.phoneNumber.isEmpty
        case .shareCreated(let e): return !e.title.isEmpty
        case .shareTitleChanged(let e): return !e.title.isEmpty
        default: return false
        }
    }
}
