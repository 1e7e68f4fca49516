import EventLog
import Foundation
import LMDB
import SharingDomain

extension ShareLedger {
    /// Gives the ledger at `path` a new key store when its own is lost for good: missing, emptied,
    /// cut or damaged, with no backup to restore. Opening the ledger works again; everything sealed
    /// under the lost keys (emails, phone numbers, names, titles, invitation addresses) answers as
    /// erased, as if each person had been forgotten, and users can no longer be found by email or
    /// phone until they register again. The lost file, when there is one, is kept beside it as
    /// `personal-data.keys.lost-<seconds since 1970>`.
    ///
    /// Restore `personal-data.keys` from its backup instead whenever there is one: a new store cannot
    /// be undone (what is sealed from then on is sealed under keys the old file never held). Run it
    /// with no process using the ledger.
    ///
    /// - Parameters:
    ///   - path: The ledger directory.
    ///   - randomSource: Where the new lookup key comes from.
    /// - Returns: Where the lost file was moved, or nil when there was none.
    /// - Throws: `LedgerError.Code.invalidArguments` when the key store is intact (nothing is
    ///   lost: nothing changes); the errors of opening the log (`LedgerError.Code.notALedger`, …);
    ///   `LedgerError.Code.storageFailure` when the files cannot be moved or written.
    public static func replaceLostKeyStore(at path: String, randomSource: any LedgerRandomSource = SystemRandomSource())
        async throws(LedgerError) -> String?
    {
        let log = try EventLog.open(ReadModels.ledgerConfiguration(EventLog.Configuration(path: path, createIfMissing: false)))
        let result: Result<String?, LedgerError>
        do {
            let meta = log.store.meta
            let witness = try log.read("reading what the log needs of the key store") { txn in
                try txn.get(meta, key: PersonalDataVault.Witness.metaKey).flatMap(PersonalDataVault.Witness.init)
            }
            result = .success(try PersonalDataVault.replaceLost(directory: path, witness: witness, random: randomSource))
        } catch {
            result = .failure(error)
        }
        await log.close()
        return try result.get()
    }
}
