import CLMDB
import Foundation

/// An error from LMDB or from the wrapper around it.
///
/// Every LMDB return code the ledger can meet has its own ``Code``; `errno` values (LMDB passes
/// them through from the system calls it makes) keep their number in ``errno``. The message names
/// the operation, the path where one is involved, and what to do about it.
package struct LMDBError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong, one value per LMDB return code plus the wrapper's own cases.
    package enum Code: Sendable, Hashable {
        /// `MDB_KEYEXIST`: a put with `noOverwrite`, `append` or `appendDup` met an existing key
        /// (for `append`: a key that does not sort after the last one).
        case keyExists
        /// `MDB_NOTFOUND`.
        case notFound
        /// `MDB_PAGE_NOTFOUND`: a page the tree points at is missing; the file is damaged.
        case pageNotFound
        /// `MDB_CORRUPTED`: a page has the wrong type; the file is damaged.
        case corrupted
        /// `MDB_PANIC`: a fatal error earlier left the environment unusable; close and reopen it.
        case panic
        /// `MDB_VERSION_MISMATCH`: the file was written by an incompatible LMDB version.
        case versionMismatch
        /// `MDB_INVALID`: the file is not an LMDB data file.
        case invalid
        /// `MDB_MAP_FULL`: the environment's map size is reached.
        case mapFull
        /// `MDB_DBS_FULL`: more named databases than `maxDatabases`.
        case databasesFull
        /// `MDB_READERS_FULL`: every reader slot is taken.
        case readersFull
        /// `MDB_TLS_FULL`: too many thread-local slots (cannot happen with `MDB_NOTLS`).
        case tlsFull
        /// `MDB_TXN_FULL`: a transaction has too many dirty pages.
        case transactionFull
        /// `MDB_CURSOR_FULL`: cursor stack too deep (a damaged tree).
        case cursorFull
        /// `MDB_PAGE_FULL`: internal page has no more space.
        case pageFull
        /// `MDB_MAP_RESIZED`: another process grew the map beyond this process's size.
        case mapResized
        /// `MDB_INCOMPATIBLE`: the operation does not fit the database's flags, or a named database
        /// was opened with flags other than those it was created with.
        case incompatible
        /// `MDB_BAD_RSLOT`: a reader slot was used on the wrong thread.
        case badReaderSlot
        /// `MDB_BAD_TXN`: the transaction had an error and must be aborted.
        case badTransaction
        /// `MDB_BAD_VALSIZE`: a key or value has an unsupported size (keys: 1...511 bytes).
        case badValueSize
        /// `MDB_BAD_DBI`: the database handle was closed or changed.
        case badDatabaseHandle
        /// A system error (`errno`) that LMDB passed through.
        case system
        /// The wrapper's own: the map would have to grow beyond the configured maximum.
        case storageFull
        /// The wrapper's own: the environment was closed.
        case closed
        /// The wrapper's own: a raw cursor or a drop asked of a database that goes through an
        /// overlay (``Overlay``), which would see or change LMDB alone.
        case throughOverlay
        /// The wrapper's own: the path is not usable (missing, not a directory, not writable).
        case badPath
        /// An LMDB code this wrapper does not know.
        case unknown
    }

    /// What went wrong.
    package var code: Code
    /// The raw return value of the LMDB call (an `MDB_*` code or an `errno`), 0 for the wrapper's own.
    package var returnCode: Int32
    /// The operation that failed, e.g. `mdb_env_open`.
    package var operation: String
    /// The path involved, if any.
    package var path: String?
    /// What happened and what to do, in words.
    package var message: String

    /// The `errno` value for ``Code/system`` errors.
    package var errno: Int32? { code == .system ? returnCode : nil }

    package init(code: Code, returnCode: Int32 = 0, operation: String, path: String? = nil, message: String) {
        self.code = code
        self.returnCode = returnCode
        self.operation = operation
        self.path = path
        self.message = message
    }

    /// Maps the return value of an LMDB call to an error: LMDB's own codes, the system's error
    /// numbers, or ``Code/unknown``.
    package init(returnCode rc: Int32, operation: String, path: String? = nil) {
        let (code, advice): (Code, String)
        if let known = Self.lmdbCodes[rc] {
            (code, advice) = known
        } else if rc > 0 {
            (code, advice) = (.system, Self.systemAdvice(rc))
        } else {
            (code, advice) = (.unknown, String(cString: mdb_strerror(rc)))
        }
        self.init(code: code, returnCode: rc, operation: operation, path: path, message: advice)
    }

    /// LMDB's own return codes: the code each maps to, and what to do.
    private static let lmdbCodes: [Int32: (Code, String)] = [
        MDB_KEYEXIST: (.keyExists, "the key already exists (for an append: the key does not sort after the last key)"),
        MDB_NOTFOUND: (.notFound, "no such key"),
        MDB_PAGE_NOTFOUND: (.pageNotFound, "the data file is damaged (a page is missing); restore from a backup or export"),
        MDB_CORRUPTED: (.corrupted, "the data file is damaged; restore from a backup or export"),
        MDB_PANIC: (.panic, "a fatal error left the environment unusable; close it and open it again"),
        MDB_VERSION_MISMATCH: (.versionMismatch, "the environment was written by an incompatible LMDB version"),
        MDB_INVALID: (.invalid, "the file is not an LMDB data file; check the path"),
        MDB_MAP_FULL: (.mapFull, "the map size is reached; the environment grows it, or raise the maximum size"),
        MDB_DBS_FULL: (.databasesFull, "too many named databases; raise maxDatabases"),
        MDB_READERS_FULL: (.readersFull, "every reader slot is taken; raise maxReaders or look for stale readers (mdb_stat -r)"),
        MDB_TLS_FULL: (.tlsFull, "too many thread-local reader slots"),
        MDB_TXN_FULL: (.transactionFull, "the transaction is too large; use smaller batches"),
        MDB_CURSOR_FULL: (.cursorFull, "cursor stack too deep; the data file may be damaged"),
        MDB_PAGE_FULL: (.pageFull, "internal page full"),
        MDB_MAP_RESIZED: (.mapResized, "another process grew the map; the environment adopts the new size and retries"),
        MDB_INCOMPATIBLE: (.incompatible, "the database exists with other flags, or the operation does not fit its flags"),
        MDB_BAD_RSLOT: (.badReaderSlot, "a reader slot was used on the wrong thread (the environment must be opened with MDB_NOTLS)"),
        MDB_BAD_TXN: (.badTransaction, "the transaction failed earlier and can only be aborted"),
        MDB_BAD_VALSIZE: (.badValueSize, "a key is empty or longer than 511 bytes"),
        MDB_BAD_DBI: (.badDatabaseHandle, "the database handle is not valid in this environment"),
    ]

    /// The system's text for error number `rc`, with what to do for the ones an open meets.
    private static func systemAdvice(_ rc: Int32) -> String {
        let text = String(cString: strerror(rc))
        switch rc {
        case ENOENT: return "\(text): the directory does not exist; create it first"
        case EACCES, EPERM, EROFS: return "\(text): the directory or its files are not writable"
        case ENOSPC: return "\(text): the disk is full; free space and retry"
        case ENOTDIR: return "\(text): the path is not a directory"
        case EAGAIN: return "\(text): the environment is locked by another process"
        default: return text
        }
    }

    package var description: String {
        if let path {
            return "LMDB \(operation) failed for \(path): \(message) (code \(returnCode))"
        }
        return "LMDB \(operation) failed: \(message) (code \(returnCode))"
    }
}

/// Throws an ``LMDBError`` when an LMDB call did not return `MDB_SUCCESS`.
@inline(__always)
package func check(_ rc: Int32, _ operation: @autoclosure () -> String, path: String? = nil) throws(LMDBError) {
    if rc != MDB_SUCCESS {
        throw LMDBError(returnCode: rc, operation: operation(), path: path)
    }
}
