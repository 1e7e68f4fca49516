import Foundation
import ShareLedger

/// What a command that may create a ledger found before it did, so that it can remove what it
/// created when it fails before writing anything (a refused import must not leave an empty ledger).
struct NewLedgerCleanup {
    let path: String
    let directoryExisted: Bool
    let dataFileExisted: Bool
    let lockFileExisted: Bool
    let keyStoreExisted: Bool

    init(path: String) {
        self.path = path
        let fileManager = FileManager.default
        directoryExisted = fileManager.fileExists(atPath: path)
        dataFileExisted = fileManager.fileExists(atPath: (path as NSString).appendingPathComponent("data.mdb"))
        lockFileExisted = fileManager.fileExists(atPath: (path as NSString).appendingPathComponent("lock.mdb"))
        keyStoreExisted = fileManager.fileExists(atPath: (path as NSString).appendingPathComponent(ShareLedger.keyStoreFileName))
    }

    /// Removes the files (and the directory) that were not there before; does nothing to a ledger
    /// that existed.
    func removeCreated() {
        guard !dataFileExisted else { return }
        let fileManager = FileManager.default
        try? fileManager.removeItem(atPath: (path as NSString).appendingPathComponent("data.mdb"))
        // The derived state's environment is made with the ledger (``DerivedState``).
        try? fileManager.removeItem(atPath: (path as NSString).appendingPathComponent(DerivedState.directoryName))
        if !lockFileExisted { try? fileManager.removeItem(atPath: (path as NSString).appendingPathComponent("lock.mdb")) }
        if !keyStoreExisted {
            try? fileManager.removeItem(atPath: (path as NSString).appendingPathComponent(ShareLedger.keyStoreFileName))
        }
        if !directoryExisted, (try? fileManager.contentsOfDirectory(atPath: path))?.isEmpty == true {
            try? fileManager.removeItem(atPath: path)
        }
    }
}
