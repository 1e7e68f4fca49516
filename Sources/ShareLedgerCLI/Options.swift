import ArgumentParser
import Foundation
import Logging
import ShareLedger

/// Options every command that opens a ledger shares.
struct LedgerOptions: ParsableArguments {
    @Option(name: .long, help: "The ledger directory.")
    var path: String = "./.share-ledger"

    @Flag(name: .long, help: "Print machine-readable JSON instead of text.")
    var json = false

    @Flag(name: .long, help: "Log what the ledger does to standard error.")
    var verbose = false

    var logger: Logger {
        let verbose = self.verbose
        var logger = Logger(label: "share-ledger") { label -> any LogHandler in
            verbose ? StreamLogHandler.standardError(label: label) : SwiftLogNoOpLogHandler()
        }
        logger.logLevel = verbose ? Logger.Level.debug : Logger.Level.critical
        return logger
    }

    /// Opens the ledger; exits with code 2 (and a clear message) when it cannot be read, 1 when the
    /// disk is full.
    func open(create: Bool, readOnly: Bool = false, durability: Durability = .durable) throws -> EventLog {
        do {
            return try withUpgradeFallback(readOnly) { readOnly throws(LedgerError) in
                try ShareLedger.openLog(
                    EventLog.Configuration(
                        path: path, createIfMissing: create, readOnly: readOnly, durability: durability, logger: logger))
            }
        } catch {
            Output.failure(error, json: json)
            throw Output.exitCode(unreadable: error)
        }
    }

    /// Runs `open` read-only when asked; when the ledger needs the databases a later release added
    /// (``LedgerError/Code/readOnly`` from a read-only open) and its directory is writable, opens it
    /// for writing instead, which adds them, as every command did before reading commands opened
    /// ledgers read-only.
    func withUpgradeFallback<T>(_ readOnly: Bool, _ open: (Bool) throws(LedgerError) -> T) throws(LedgerError) -> T {
        do {
            return try open(readOnly)
        } catch where readOnly && error.code == .readOnly && FileManager.default.isWritableFile(atPath: path) {
            logger.notice("opening the ledger for writing once to add the databases it lacks", metadata: ["path": "\(path)"])
            return try open(false)
        }
    }
}

extension LedgerOptions {
    /// Opens the ledger for the sharing commands, configured as ``open(create:readOnly:durability:)``
    /// configures the log; exits with code 2 (and a clear message) when it cannot be read, 1 when the
    /// disk is full.
    func openSharing(
        create: Bool, readOnly: Bool = false, durability: Durability = .durable, maximumMapSize: Int? = nil
    ) throws -> ShareLedger {
        do {
            return try withUpgradeFallback(readOnly) { readOnly throws(LedgerError) in
                var configuration = ShareLedger.Configuration(
                    path: path, createIfMissing: create, readOnly: readOnly, durability: durability, logger: logger)
                configuration.maximumMapSize = maximumMapSize
                return try ShareLedger.open(configuration)
            }
        } catch {
            Output.failure(error, json: json)
            throw Output.exitCode(unreadable: error)
        }
    }
}

/// Printing for every command: text for people, JSON for programs, errors on standard error.
enum Output {
    static func printJSON(_ value: some Encodable) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(value) else { return }
        print(String(decoding: data, as: UTF8.self))
    }

    /// `value` as one line of compact JSON (keys sorted), or nil when it cannot be encoded.
    static func compactJSON(_ value: some Encodable) -> String? {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) }
    }

    /// Writes `line` and a newline straight to standard output, unbuffered: whoever started a
    /// long-running command and reads its output through a pipe sees the line when it happens.
    static func writeLine(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    struct ErrorBody: Encodable {
        struct Detail: Encodable {
            var code: Int
            var name: String
            var message: String
        }
        var error: Detail
    }

    /// Prints a failure: as JSON on standard output with --json, as text on standard error otherwise.
    static func failure(_ error: LedgerError, json: Bool) {
        if json {
            printJSON(ErrorBody(error: .init(code: error.code.rawValue, name: error.code.name, message: error.message)))
        } else {
            FileHandle.standardError.write(Data("share-ledger: \(error.message) (\(error.code.name))\n".utf8))
        }
    }

    /// The exit code for a ledger that could not be opened or read: 1 when the file system is full
    /// (``LedgerError/Code/storageFull``: free space and retry; nothing is wrong with the ledger),
    /// 2 otherwise (it could not be read, or is damaged).
    static func exitCode(unreadable error: LedgerError) -> ExitCode {
        ExitCode(error.code == .storageFull ? 1 : 2)
    }

    /// Whether standard error is a terminal (progress lines are shown only there).
    static var isTerminal: Bool { isatty(STDERR_FILENO) != 0 }

    /// Rewrites the progress line on a terminal; does nothing otherwise.
    static func progress(_ text: String) {
        guard isTerminal else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[2K\(text)".utf8))
    }

    /// Ends the progress line.
    static func endProgress() {
        guard isTerminal else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[2K".utf8))
    }

    static func grouped(_ value: Double) -> String {
        let formatter = NumberFormatter()
        formatter.numberStyle = .decimal
        formatter.maximumFractionDigits = value < 100 ? 2 : 0
        formatter.locale = Locale(identifier: "en_US")
        return formatter.string(from: NSNumber(value: value)) ?? String(value)
    }
}

/// Runs `body` and turns a ``LedgerError`` into exit code 1 with a clear message.
func runReportingErrors<R>(json: Bool, _ body: () async throws -> R) async throws -> R {
    do {
        return try await body()
    } catch let error as LedgerError {
        Output.failure(error, json: json)
        throw ExitCode(1)
    }
}
