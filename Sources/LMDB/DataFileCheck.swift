import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Checks on `data.mdb` made before liblmdb maps it: liblmdb trusts the file, and a page it reads
/// beyond the end of a cut file is a bus error, not an error code. What is read here is read with
/// `pread` into checked buffers, so no damage can crash the check itself.
///
/// Checked: the file is at least its two meta pages long (a 0-byte `data.mdb`, which liblmdb would
/// silently initialize as a new environment, is refused); each meta page is a meta page (flags,
/// magic, version, a page size that is a power of two from 512 to 64 KiB); and the root pages of the
/// main and free-page databases of the meta liblmdb will use lie inside the file and inside the
/// used pages. Not checked: the B-tree pages below the roots (the file would have to be read whole);
/// `share-ledger` runs each command in a child process, so that a fault there becomes an error.
package enum DataFileCheck {
    /// LMDB 0.9's meta page: a 16-byte page header (page number, pad, flags, bounds), then `MDB_meta`.
    private static let magic: UInt32 = 0xBEEF_C0DE
    private static let dataVersion: UInt32 = 1
    private static let metaFlag: UInt16 = 0x08
    private static let invalidPage = UInt64.max

    struct Meta {
        var pageSize: UInt32
        var freeRoot: UInt64
        var mainRoot: UInt64
        var lastPage: UInt64
        var transactionID: UInt64
    }

    /// Checks `directory/data.mdb` when it exists; does nothing when it does not (a new environment).
    ///
    /// - Throws: ``LMDBError`` with ``LMDBError/Code/corrupted`` (return code 0: the wrapper's own)
    ///   naming the file and saying what to do.
    package static func check(directory: String) throws(LMDBError) {
        let path = (directory as NSString).appendingPathComponent("data.mdb")
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return }  // missing (a new environment) or unreadable: mdb_env_open reports it
        defer { close(fd) }
        var status = stat()
        guard fstat(fd, &status) == 0 else { return }
        let size = UInt64(status.st_size)
        func damaged(_ what: String) -> LMDBError {
            LMDBError(
                code: .corrupted, operation: "checking data.mdb", path: path,
                message: "\(path) is damaged: \(what). Nothing was changed; restore the ledger from a backup, or import an "
                    + "export (`share-ledger export` of a good copy) into a new directory")
        }
        if size == 0 {
            throw LMDBError(
                code: .corrupted, operation: "checking data.mdb", path: path,
                message: "\(path) is empty (0 bytes): it is not a ledger (a creation that was interrupted, or a damaged "
                    + "file), and nothing opens it as one. Nothing was changed; remove the directory to start a new ledger "
                    + "there, or restore it from a backup")
        }
        guard let first = readMeta(fd, at: 0) else {
            // Not an LMDB file at all (what liblmdb reports as MDB_INVALID): not a ledger, not a damaged one.
            throw LMDBError(
                code: .invalid, operation: "checking data.mdb", path: path,
                message: "\(path) is not an LMDB file (its first page is not an LMDB meta page)")
        }
        guard let second = readMeta(fd, at: off_t(first.pageSize)) else {
            throw damaged("it is \(size) bytes, too short for its second meta page, or that page is not an LMDB meta page")
        }
        let pageSize = UInt64(first.pageSize)
        guard second.pageSize == first.pageSize else {
            throw damaged("its two meta pages disagree on the page size (\(first.pageSize) and \(second.pageSize))")
        }
        // liblmdb reads through the meta with the higher transaction id.
        let meta = second.transactionID > first.transactionID ? second : first
        let (used, overflow) = (meta.lastPage.addingReportingOverflow(1).partialValue).multipliedReportingOverflow(by: pageSize)
        guard !overflow, meta.lastPage >= 1 else {
            throw damaged("its meta page names \(meta.lastPage) as its last used page")
        }
        for (root, name) in [(meta.mainRoot, "main"), (meta.freeRoot, "free-page")] where root != invalidPage {
            guard root >= 2, root <= meta.lastPage else {
                throw damaged("the root of its \(name) database is page \(root), outside the used pages 2...\(meta.lastPage)")
            }
            guard (root + 1) * pageSize <= size else {
                throw damaged(
                    "it is \(size) bytes, but the root of its \(name) database is page \(root) of \(pageSize) bytes, "
                        + "beyond its end (its used pages fill \(used) bytes): the file was cut short")
            }
        }
    }

    /// Reads and checks the meta page at `offset`; nil when it is short or not a meta page.
    private static func readMeta(_ fd: Int32, at offset: off_t) -> Meta? {
        var page = [UInt8](repeating: 0, count: 152)
        let count = page.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, offset) }
        guard count == page.count else { return nil }
        func u16(_ at: Int) -> UInt16 { page.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: UInt16.self) } }
        func u32(_ at: Int) -> UInt32 { page.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: UInt32.self) } }
        func u64(_ at: Int) -> UInt64 { page.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: UInt64.self) } }
        // Native byte order, as liblmdb writes it. Page header: pgno 0, pad 8, flags 10; MDB_meta from 16:
        // magic 16, version 20, address 24, mapsize 32, dbs[FREE] 40 (md_pad = page size, md_root at +40),
        // dbs[MAIN] 88 (md_root at 128), last_pg 136, txnid 144.
        let pageSize = u32(40)
        guard u16(10) & metaFlag != 0, u32(16) == magic, u32(20) == dataVersion,
            pageSize >= 512, pageSize <= 65_536, pageSize & (pageSize - 1) == 0
        else { return nil }
        return Meta(pageSize: pageSize, freeRoot: u64(80), mainRoot: u64(128), lastPage: u64(136), transactionID: u64(144))
    }
}
