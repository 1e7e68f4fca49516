import ArgumentParser
import Foundation
import ShareLedger
import ShareLedgerAudit

/// `share-ledger keygen`: a new Ed25519 key pair for signing checkpoints.
struct KeygenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keygen",
        abstract: "Make an Ed25519 key pair for signing checkpoints: PREFIX.key (private, mode 0600) and PREFIX.pub.",
        discussion: """
            Each file holds the base64 text of the key's 32 raw bytes and a newline (the private key is \
            the RFC 8032 seed). Keep PREFIX.key away from the ledger's host if you can; give PREFIX.pub \
            to whoever audits (`share-ledger audit --trusted-key PREFIX.pub`). Refuses to overwrite.
            """)

    @Option(help: "Where to write PREFIX.key and PREFIX.pub.")
    var out: String

    @Flag(help: "Print machine-readable JSON instead of text.")
    var json = false

    struct Summary: Encodable {
        var privateKeyFile: String
        var publicKeyFile: String
        var publicKey: String
    }

    func run() throws {
        let keyPath = out + ".key"
        let pubPath = out + ".pub"
        for path in [keyPath, pubPath] where FileManager.default.fileExists(atPath: path) {
            Output.failure(LedgerError(.invalidArguments, "\(path) exists; choose another --out prefix or move it away"), json: json)
            throw ExitCode(1)
        }
        let key = CheckpointSigningKey.generate()
        // Created with mode 0600 from the start, so the secret is never readable by others.
        let fd = open(keyPath, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard fd >= 0 else {
            Output.failure(LedgerError(.invalidArguments, "cannot create \(keyPath): \(String(cString: strerror(errno)))"), json: json)
            throw ExitCode(1)
        }
        let handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        do {
            try handle.write(contentsOf: Data(CheckpointKeyFile.text(key.rawRepresentation).utf8))
            try handle.close()
            try Data(CheckpointKeyFile.text(key.publicKey.rawRepresentation).utf8).write(to: URL(fileURLWithPath: pubPath))
        } catch {
            Output.failure(LedgerError(.invalidArguments, "writing the key files failed: \(error)"), json: json)
            throw ExitCode(1)
        }
        let publicKey = Data(key.publicKey.rawRepresentation).base64EncodedString()
        if json {
            Output.printJSON(Summary(privateKeyFile: keyPath, publicKeyFile: pubPath, publicKey: publicKey))
        } else {
            print("wrote \(keyPath) (private, mode 0600) and \(pubPath) (public key \(publicKey))")
        }
    }
}

/// `share-ledger checkpoint`: sign the current head and store the checkpoint in the ledger.
struct CheckpointCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "checkpoint",
        abstract: "Sign the current head with an Ed25519 key and store the checkpoint (no event is appended).",
        discussion: """
            A later `share-ledger audit --trusted-key PREFIX.pub` fails if the history up to any \
            checkpoint was rewritten, even with the whole hash chain recomputed.
            """)

    @OptionGroup var ledger: LedgerOptions

    @Option(name: .customLong("signing-key"), help: "The private key file (PREFIX.key from `share-ledger keygen`).")
    var signingKey: String

    struct Summary: Encodable {
        var position: UInt64
        var hash: String
        var headRecordedAtMicros: Int64
        var signedAtMicros: Int64
        var publicKey: String
        var signature: String
    }

    func run() async throws {
        let key: CheckpointSigningKey
        do {
            key = try CheckpointSigningKey(contentsOfFile: signingKey)
        } catch {
            Output.failure(error, json: ledger.json)
            throw ExitCode(1)
        }
        let checkpoint = try await ledger.withLedger { shareLedger in try await LedgerAudit(shareLedger).checkpoint(signingKey: key) }
        let summary = Summary(
            position: checkpoint.position.rawValue, hash: checkpoint.hash.hex,
            headRecordedAtMicros: checkpoint.headRecordedAtMicros, signedAtMicros: checkpoint.signedAtMicros,
            publicKey: Data(checkpoint.publicKey).base64EncodedString(),
            signature: Data(checkpoint.signature).base64EncodedString())
        if ledger.json {
            Output.printJSON(summary)
        } else {
            print("checkpoint signed at position \(summary.position) hash \(summary.hash) (key \(summary.publicKey))")
        }
    }
}

/// `share-ledger export`: the log as NDJSON on standard output.
struct ExportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write the log to standard output as NDJSON, one event per line (docs/log-format.md).",
        discussion: """
            The output is deterministic: the same log exports to the same bytes. --since POS writes only \
            the events after POS (what a copy whose head is POS lacks). With --json, a summary goes to \
            standard error.
            """)

    @OptionGroup var ledger: LedgerOptions

    @Option(help: "Write only the events after this position.")
    var since: UInt64 = 0

    func run() async throws {
        let shareLedger = try ledger.openWithoutWorker(readOnly: true)
        let summary: ExportSummary
        do {
            summary = try LedgerAudit(shareLedger).export(since: LogPosition(since), to: FileHandle.standardOutput) { done, total in
                Output.progress("export: \(done) of \(total) events")
            }
        } catch {
            Output.endProgress()
            await shareLedger.close()
            Output.failure(error, json: false)
            throw ExitCode(1)
        }
        Output.endProgress()
        await shareLedger.close()
        if ledger.json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            if let data = try? encoder.encode(summary) {
                FileHandle.standardError.write(data + Data("\n".utf8))
            }
        }
    }
}

/// `share-ledger import`: a new ledger from an NDJSON export on standard input, or, with
/// `--reseal-personal-data --from OLD`, from another ledger's events with their personal data sealed.
struct ImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import an NDJSON export from standard input into an empty ledger (or one whose head it continues).",
        discussion: """
            Every line is checked (canonical form, consecutive positions, previous hash, the hash \
            recomputed from the fields, streams, commands) before anything is written; a bad file is \
            refused with the first bad line number and exit 1, and the ledger is left as it was. A \
            non-empty ledger is refused unless the file continues its head (an `export --since HEAD`).

            With --reseal-personal-data --from OLD it reads the ledger at OLD (and its key store) instead \
            of standard input and writes every event into the new, empty ledger at --path with its \
            personal data sealed under new keys: a new hash chain, the same positions, times, actors, \
            commands and streams (docs/operations.md, "Personal data written before crypto-shredding"). \
            A non-empty target is refused (exit 1).
            """)

    @OptionGroup var ledger: LedgerOptions

    @Flag(help: "Re-encrypt: write the events of the ledger at --from with every personal field sealed under new keys.")
    var resealPersonalData = false

    @Option(help: "With --reseal-personal-data: the old ledger's directory (only read).")
    var from: String?

    func validate() throws {
        guard resealPersonalData == (from != nil) else {
            throw ValidationError("--reseal-personal-data and --from OLD go together")
        }
    }

    func run() async throws {
        if let from {
            try await reseal(from: from)
            return
        }
        let created = NewLedgerCleanup(path: ledger.path)
        let shareLedger = try ledger.openWithoutWorker(create: true)
        let summary: ImportSummary
        do {
            summary = try await LedgerAudit(shareLedger).importLog(from: FileHandle.standardInput) { done, total in
                Output.progress("import: \(done) of \(total) events")
            }
        } catch {
            throw await failed(error, shareLedger, created)
        }
        Output.endProgress()
        await shareLedger.close()
        if ledger.json {
            Output.printJSON(summary)
        } else {
            print(
                "imported \(summary.events) events; head \(summary.headPosition) \(summary.headHash); "
                    + "read models projected in the same transactions")
        }
    }

    /// Reports a failed import and closes `target`; a refused import into a ledger this command
    /// created leaves nothing behind. Returns the exit code to throw.
    private func failed(_ error: LedgerError, _ target: ShareLedger, _ created: NewLedgerCleanup) async -> ExitCode {
        Output.endProgress()
        let empty = (try? target.log.head().position.rawValue) == 0
        await target.close()
        if empty { created.removeCreated() }
        Output.failure(error, json: ledger.json)
        return ExitCode(1)
    }

    /// `--reseal-personal-data --from OLD`: `LedgerAudit.importResealingPersonalData(from:progress:)`.
    private func reseal(from path: String) async throws {
        var old = ledger
        old.path = path
        let source = try old.openWithoutWorker(readOnly: true)
        let created = NewLedgerCleanup(path: ledger.path)
        let target: ShareLedger
        do {
            target = try ledger.openWithoutWorker(create: true)
        } catch {
            await source.close()
            throw error
        }
        let summary: ResealSummary
        do {
            summary = try await LedgerAudit(target).importResealingPersonalData(from: source) { done, total in
                Output.progress("import --reseal-personal-data: \(done) of \(total) events")
            }
        } catch {
            await source.close()
            throw await failed(error, target, created)
        }
        Output.endProgress()
        await target.close()
        await source.close()
        if ledger.json {
            Output.printJSON(summary)
        } else {
            print(
                "re-encrypted \(summary.events) events (\(summary.resealedEvents) with personal data sealed anew; "
                    + "\(summary.plaintextEventsInSource) held plaintext in the source, \(summary.plaintextEventsLeft) do now; "
                    + "\(summary.unopenedBoxes) sealed fields the source could not open stay unreadable); new head "
                    + "\(summary.headPosition) \(summary.headHash)")
        }
    }
}

extension CheckpointPublicKey {
    /// The public keys in the files at `paths` (`--trusted-key`); exits 2 with a clear message when
    /// one cannot be read.
    static func read(_ paths: [String], json: Bool) throws -> [CheckpointPublicKey] {
        var keys: [CheckpointPublicKey] = []
        for path in paths {
            do {
                keys.append(try CheckpointPublicKey(contentsOfFile: path))
            } catch {
                Output.failure(error, json: json)
                throw ExitCode(2)
            }
        }
        return keys
    }
}
