import Foundation
import ShareLedger
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
    try ledger.export(to: handle)
    try handle.close()
}

/// The JSON object a command printed.
func jsonObject(_ text: String) -> [String: Any]? {
    (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
}
