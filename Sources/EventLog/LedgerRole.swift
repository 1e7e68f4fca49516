import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What a ledger directory is in a replicated shard, recorded in `role.json` in the directory (no
/// file: ``standalone``). Every append of every process that opens the directory is checked against
/// it inside the writer's transaction (``checkWritable(at:now:)``), so the library, the command-line
/// commands and `serve` obey one rule:
///
/// - ``standalone``: no shard; appends as before.
/// - ``writer(shard:term:)``: the shard's writer in lease term `term`. It appends only while the
///   lease token next to it (``WriterLeaseToken``, kept by the process that holds the lease) names the
///   same term and leaves more than its safety margin on the monotonic clock.
/// - ``replica(shard:)``: applies the shard's stream and nothing else: every other append (a logged
///   metadata fetch included) is refused with ``LedgerError/Code/notWriter``.
/// - ``deposed(shard:term:newerTerm:)``: was the writer of `term`; a newer term exists. Refuses every
///   append until an operator re-joins it as a replica (`share-ledger rejoin`).
public enum LedgerRole: Sendable, Hashable, CustomStringConvertible {
    /// Not part of a shard (the default).
    case standalone
    /// The writer of `shard` in lease term `term`.
    case writer(shard: String, term: UInt64)
    /// A replica of `shard`.
    case replica(shard: String)
    /// The writer of `shard` in `term`, deposed: a newer term (`newerTerm`, when known) took over.
    case deposed(shard: String, term: UInt64, newerTerm: UInt64?)

    /// The file holding the role in a ledger directory.
    public static let fileName = "role.json"
    /// Files of the role and the lease token (and their temporary copies) a ledger directory may hold.
    package static let fileNames: Set<String> = [fileName, "\(fileName).tmp", WriterLeaseToken.fileName, "\(WriterLeaseToken.fileName).tmp"]

    /// The shard, nil for ``standalone``.
    public var shard: String? {
        switch self {
        case .standalone: return nil
        case .writer(let shard, _), .replica(let shard), .deposed(let shard, _, _): return shard
        }
    }

    /// E.g. `writer of shard s1 (term 2)`.
    public var description: String {
        switch self {
        case .standalone: return "standalone"
        case .writer(let shard, let term): return "writer of shard \(shard) (term \(term))"
        case .replica(let shard): return "replica of shard \(shard)"
        case .deposed(let shard, let term, let newer):
            return "deposed writer of shard \(shard) (term \(term); term \(newer.map(String.init) ?? "newer") took over)"
        }
    }

    private struct Record: Codable {
        var role: String
        var shard: String?
        var term: UInt64?
        var newerTerm: UInt64?
    }

    /// The role recorded in the directory at `path` (``standalone`` when none is).
    ///
    /// - Throws: ``LedgerError/Code/corruptedData`` when `role.json` is there but unreadable (a
    ///   damaged role is never taken for standalone).
    public static func read(at path: String) throws(LedgerError) -> LedgerRole {
        try read(file: (path as NSString).appendingPathComponent(fileName))
    }

    /// The role recorded in `file`, a directory's `role.json` (``standalone`` when there is none).
    private static func read(file: String) throws(LedgerError) -> LedgerRole {
        guard let bytes = try RoleFiles.readSmallFile(file) else { return .standalone }
        guard let record = try? JSONDecoder().decode(Record.self, from: Data(bytes)) else {
            throw LedgerError(.corruptedData, "\(file) does not hold a ledger role; restore it or write it again (share-ledger role)")
        }
        switch (record.role, record.shard, record.term) {
        case ("standalone", _, _): return .standalone
        case ("writer", let shard?, let term?): return .writer(shard: shard, term: term)
        case ("replica", let shard?, _): return .replica(shard: shard)
        case ("deposed", let shard?, let term?): return .deposed(shard: shard, term: term, newerTerm: record.newerTerm)
        default:
            throw LedgerError(.corruptedData, "\(file) names an unknown role; restore it or write it again (share-ledger role)")
        }
    }

    /// Records this role in the directory at `path`, durably (written beside, flushed, renamed over).
    public func write(at path: String) throws(LedgerError) {
        let record: Record
        switch self {
        case .standalone: record = Record(role: "standalone")
        case .writer(let shard, let term): record = Record(role: "writer", shard: shard, term: term)
        case .replica(let shard): record = Record(role: "replica", shard: shard)
        case .deposed(let shard, let term, let newer): record = Record(role: "deposed", shard: shard, term: term, newerTerm: newer)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        guard let data = try? encoder.encode(record) else {
            throw LedgerError(.invalidArguments, "the role could not be encoded")
        }
        try RoleFiles.replaceFile((path as NSString).appendingPathComponent(LedgerRole.fileName), with: Array(data) + [10], durably: true)
    }

    /// Checks that an append may commit in the directory at `path` now (`now`: the monotonic clock,
    /// ``monotonicNanos()``), and returns the role it may commit under.
    ///
    /// - Throws: ``LedgerError/Code/notWriter`` for a replica, a deposed writer, or a writer whose
    ///   lease token is missing, of another term or boot, or has no more than its safety margin left.
    public static func checkWritable(at path: String, now: UInt64) throws(LedgerError) -> LedgerRole {
        try checkWritable(Files(directory: path), now: now)
    }

    /// The paths of a directory's role and lease token files, made once: a writer checks them before
    /// every commit, and joining path components costs more than the check itself.
    package struct Files: Sendable {
        /// The directory's `role.json`.
        let role: String
        /// The directory's lease token.
        let leaseToken: String

        /// The files of the ledger directory at `directory`.
        package init(directory: String) {
            role = (directory as NSString).appendingPathComponent(LedgerRole.fileName)
            leaseToken = (directory as NSString).appendingPathComponent(WriterLeaseToken.fileName)
        }
    }

    /// ``checkWritable(at:now:)`` for the directory whose files are `files`.
    package static func checkWritable(_ files: Files, now: UInt64) throws(LedgerError) -> LedgerRole {
        let role = try read(file: files.role)
        switch role {
        case .standalone:
            return role
        case .replica(let shard):
            throw LedgerError(
                .notWriter, "this ledger is a replica of shard \(shard): it takes no writes (logged fetches included); "
                    + "send commands to the shard's writer")
        case .deposed(let shard, let term, let newer):
            throw LedgerError(
                .notWriter, "this ledger was the writer of shard \(shard) in term \(term) and was deposed (term "
                    + "\(newer.map(String.init) ?? "newer") took over): it takes no writes; re-join it as a replica "
                    + "(share-ledger rejoin) or rebuild it from the stream")
        case .writer(let shard, let term):
            guard let token = WriterLeaseToken.read(file: files.leaseToken) else {
                throw LedgerError(
                    .notWriter, "this ledger is the writer of shard \(shard) (term \(term)) but no process holds its lease "
                        + "now: start share-ledger failover on it, or send commands to the shard's writer")
            }
            guard token.shard == shard, token.term == term, token.boot == WriterLeaseToken.currentBoot else {
                throw LedgerError(
                    .notWriter, "the lease token of this ledger is for shard \(token.shard) term \(token.term), not shard "
                        + "\(shard) term \(term): refusing to write; restart share-ledger failover")
            }
            guard now < token.heldUntilNanos, token.heldUntilNanos - now > token.marginNanos else {
                throw LedgerError(
                    .notWriter, "the writer lease of shard \(shard) (term \(term)) is lost or has less than its safety margin "
                        + "left: refusing to write until it is renewed (retry), or until this writer steps down")
            }
            return role
        }
    }

    /// The system's monotonic clock (`CLOCK_MONOTONIC`, the same in every process of a boot), in
    /// nanoseconds: what lease tokens measure against.
    public static func monotonicNanos() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return UInt64(spec.tv_sec) &* 1_000_000_000 &+ UInt64(spec.tv_nsec)
    }
}

/// The proof, next to a writer's ledger, that a process holds the shard's writer lease now:
/// `writer-lease.json`, written by the process that holds and renews the lease after every
/// renewal. It says until when the lease is held on the monotonic clock of this boot (measured from
/// before the renewal was sent, so never later than the lease's real expiry) and the safety margin
/// a commit must leave. Not flushed: after a reboot the boot id differs and the token is void.
public struct WriterLeaseToken: Sendable, Hashable, Codable {
    /// The token's file name in the ledger directory.
    public static let fileName = "writer-lease.json"

    /// The shard.
    public var shard: String
    /// The lease term.
    public var term: UInt64
    /// The holder's name.
    public var holder: String
    /// The boot it was written in (`/proc/sys/kernel/random/boot_id`).
    public var boot: String
    /// Until when the lease is held, on ``LedgerRole/monotonicNanos()``.
    public var heldUntilNanos: UInt64
    /// Appends stop this long before `heldUntilNanos` (covers a commit's duration and clock drift).
    public var marginNanos: UInt64

    /// Makes a token for this boot.
    public init(shard: String, term: UInt64, holder: String, heldUntilNanos: UInt64, marginNanos: UInt64) {
        self.shard = shard
        self.term = term
        self.holder = holder
        self.boot = WriterLeaseToken.currentBoot
        self.heldUntilNanos = heldUntilNanos
        self.marginNanos = marginNanos
    }

    /// This boot's id ("" where the system has none).
    public static let currentBoot: String = {
        guard let bytes = try? RoleFiles.readSmallFile("/proc/sys/kernel/random/boot_id") else { return "" }
        return String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }()

    /// The token in the directory at `path`, nil when there is none (or it does not decode).
    public static func read(at path: String) -> WriterLeaseToken? {
        read(file: (path as NSString).appendingPathComponent(fileName))
    }

    /// The token in `file`, nil when there is none (or it does not decode).
    static func read(file: String) -> WriterLeaseToken? {
        guard let bytes = try? RoleFiles.readSmallFile(file) else { return nil }
        return try? JSONDecoder().decode(WriterLeaseToken.self, from: Data(bytes))
    }

    /// Writes the token into the directory at `path` (atomically, not flushed).
    public func write(at path: String) throws(LedgerError) {
        guard let data = try? JSONEncoder().encode(self) else {
            throw LedgerError(.invalidArguments, "the lease token could not be encoded")
        }
        try RoleFiles.replaceFile((path as NSString).appendingPathComponent(WriterLeaseToken.fileName), with: Array(data), durably: false)
    }

    /// Removes the token from the directory at `path` (appends stop at once).
    public static func remove(at path: String) {
        unlink((path as NSString).appendingPathComponent(fileName))
    }
}

/// Reading and replacing the small files of a ledger directory's role and lease token.
enum RoleFiles {
    /// The bytes of a small file, nil when it does not exist.
    static func readSmallFile(_ file: String) throws(LedgerError) -> [UInt8]? {
        let descriptor = open(file, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            if errno == ENOENT { return nil }
            throw LedgerError(.storageFailure, "cannot read \(file): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1024)
        while bytes.count < 65_536 {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes.append(contentsOf: buffer[0..<count])
        }
        return bytes
    }

    /// Writes `bytes` beside `file` and renames them over it (readers see the old or the new
    /// content, never a mix); `durably` flushes the file and the directory too.
    static func replaceFile(_ file: String, with bytes: [UInt8], durably: Bool) throws(LedgerError) {
        let temporary = file + ".tmp"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw LedgerError(.storageFailure, "cannot write \(temporary): \(String(cString: strerror(errno)))")
        }
        var written = 0
        while written < bytes.count {
            let count = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress! + written, $0.count - written) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else {
                let reason = String(cString: strerror(errno))
                close(descriptor)
                throw LedgerError(.storageFailure, "cannot write \(temporary): \(reason)")
            }
            written += count
        }
        if durably && fsync(descriptor) != 0 {
            let reason = String(cString: strerror(errno))
            close(descriptor)
            throw LedgerError(.storageFailure, "cannot flush \(temporary): \(reason)")
        }
        close(descriptor)
        guard rename(temporary, file) == 0 else {
            throw LedgerError(.storageFailure, "cannot rename \(temporary) to \(file): \(String(cString: strerror(errno)))")
        }
        if durably {
            let directory = open((file as NSString).deletingLastPathComponent, O_RDONLY | O_CLOEXEC)
            if directory >= 0 {
                _ = fsync(directory)
                close(directory)
            }
        }
    }
}
