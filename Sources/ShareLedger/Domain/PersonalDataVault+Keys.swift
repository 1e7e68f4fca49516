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

/// The key store's keys: making, finding, writing and destroying them.
extension PersonalDataVault {
    // MARK: - Keys

    static func subject(_ container: String, _ user: String) -> String { container + "\u{0}" + user }

    /// `count` bytes (a multiple of 8) from the injected random source.
    func randomBytes(_ count: Int) -> [UInt8] {
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

    func newKey() -> SymmetricKey { SymmetricKey(data: randomBytes(PersonalDataVault.keyBytes)) }

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
    static func contents(of state: State) -> [UInt8] {
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
    func create(_ state: inout State, replacing: Bool) throws(LedgerError) {
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
    func rewrite(_ state: inout State) throws(LedgerError) {
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
    func append(_ state: inout State, kind: Kind, subject: String, key: SymmetricKey, sync: Bool = true) throws(LedgerError) {
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

private func systemOpen(_ path: String, _ flags: Int32, _ mode: mode_t = 0) -> Int32 {
    #if canImport(Glibc)
        return Glibc.open(path, flags, mode)
    #else
        return Darwin.open(path, flags, mode)
    #endif
}
