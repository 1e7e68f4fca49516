import Foundation
import ShareLedger
import ShareLedgerAudit
import TestSupport

/// How a run of `share-ledger` ended: an exit code, or a signal (a crash), with its output.
typealias CLIOutcome = ProcessOutcome

/// Runs `share-ledger` with `input` on its standard input and says whether it exited or died of a
/// signal. Awaits the child off the cooperative pool (TestSupport's runner).
func runCLI(_ arguments: [String], input: Data = Data()) async throws -> CLIOutcome {
    try await runProduct("share-ledger", arguments, input: input)
}

/// Writes `ledger`'s export to a new file at `path`.
func exportToFile(_ ledger: ShareLedger, _ path: String) throws {
    _ = FileManager.default.createFile(atPath: path, contents: nil)
    guard let handle = FileHandle(forWritingAtPath: path) else { throw CocoaError(.fileNoSuchFile) }
    try LedgerAudit(ledger).export(to: handle)
    try handle.close()
}

/// A new ledger at `path` holding the export at `exported`, imported with a copy of the key store of
/// the ledger directory `keysFrom` put in place first (docs/operations.md: how an import keeps the
/// sealed personal data readable).
func importWithKeys(_ exported: String, keysFrom: String, into path: String) async throws -> ShareLedger {
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    try FileManager.default.copyItem(
        atPath: keysFrom + "/" + ShareLedger.keyStoreFileName, toPath: path + "/" + ShareLedger.keyStoreFileName)
    var configuration = ShareLedger.Configuration(path: path, durability: .unsafeNoSync)
    configuration.residualTaskWorker = nil
    let imported = try ShareLedger.open(configuration)
    let input = try FileHandle(forReadingFrom: URL(fileURLWithPath: exported))
    _ = try await LedgerAudit(imported).importLog(from: input)
    try input.close()
    return imported
}

/// The JSON object a command printed.
func jsonObject(_ text: String) -> [String: Any]? {
    (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
}
