import Foundation
import ShareLedger
import TestSupport

/// How a run of `share-ledger` ended: an exit code, or a signal (a crash).
struct CLIOutcome {
    var signaled: Bool
    var status: Int32
    var stdout: String
    var stderr: String

    /// "exit N" or "signal N", with the output, for expectation messages.
    var summary: String { (signaled ? "signal \(status)" : "exit \(status)") + ": \(stdout) \(stderr)" }

    /// Exit code `code`, not a signal.
    func exited(_ code: Int32) -> Bool { !signaled && status == code }
}

/// Runs `share-ledger` with `input` on its standard input and says whether it exited or died of a signal.
func runCLI(_ arguments: [String], input: Data = Data()) throws -> CLIOutcome {
    try runProductWithFiles("share-ledger", arguments, input: input)
}

/// Runs a built product with `input` on its standard input. Standard input, output and error are
/// files, not pipes: nothing to read while the child runs, so no read is interrupted by a signal.
func runProductWithFiles(_ name: String, _ arguments: [String], input: Data) throws -> CLIOutcome {
    let dir = TemporaryDirectory("run")
    let (inPath, outPath, errPath) = (dir.child("in"), dir.child("out"), dir.child("err"))
    for (path, contents) in [(inPath, input), (outPath, Data()), (errPath, Data())] {
        _ = FileManager.default.createFile(atPath: path, contents: contents)
    }
    let process = Process()
    process.executableURL = builtProduct(name)
    process.arguments = arguments
    process.standardInput = FileHandle(forReadingAtPath: inPath)
    process.standardOutput = FileHandle(forWritingAtPath: outPath)
    process.standardError = FileHandle(forWritingAtPath: errPath)
    try process.run()
    process.waitUntilExit()
    return CLIOutcome(
        signaled: process.terminationReason == .uncaughtSignal, status: process.terminationStatus,
        stdout: String(decoding: FileManager.default.contents(atPath: outPath) ?? Data(), as: UTF8.self),
        stderr: String(decoding: FileManager.default.contents(atPath: errPath) ?? Data(), as: UTF8.self))
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
