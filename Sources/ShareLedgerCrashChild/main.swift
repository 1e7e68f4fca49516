// A child process for the crash tests. It appends to a ledger from several concurrent writers, forever,
// and after each append's `await` returns writes "<position> <command id>\n" to an acknowledgement file
// with one write(2) on an O_APPEND descriptor (it survives SIGKILL: it is in the page cache). The test
// kills it with SIGKILL at a random moment, reopens the ledger and checks every acknowledged append.
//
// Usage: ShareLedgerCrashChild LEDGER_DIR ACK_FILE [WRITERS]
//        ShareLedgerCrashChild --sharing LEDGER_DIR ACK_FILE [CLIENTS]
//
// With --sharing it runs the sharing API instead, with the in-process residual-task worker on: each
// client registers new users who fetch and accept a public share, and after each accept returns it
// writes "<user record name>\n" to the acknowledgement file. A kill can land between an accept's
// commit and its task's completion, or in the middle of an attempt.
//
//        ShareLedgerCrashChild --mix LEDGER_DIR ACK_FILE [CLIENTS] [DURABILITY] [RUN] [rebuild]
//        ShareLedgerCrashChild --soak-driver [KILLS] [--seed N] [--dir DIR] [--quiet] [--rebuild]
//        ShareLedgerCrashChild --import LEDGER_DIR NDJSON_FILE
//        ShareLedgerCrashChild --forget LEDGER_DIR ACK_FILE [CLIENTS]
//
// --mix runs the mixed sharing workload of ShareLedgerCrashHarness (CrashWorkload): concurrent
// clients registering users, saving records, creating shares, inviting, fetching metadata and
// accepting, with the in-process worker on; with `rebuild`, read models rewritten into their second
// copies and switched in over and over meanwhile. --soak-driver is scripts/soak: it runs this executable
// with --mix, kills it KILLS times (default 200) and verifies the ledger after each kill (SoakDriver).
// --forget registers users with personal data and forgets every second one (ForgetChild.swift).
// --import imports the file's lines after the ledger's head (ImportCrash): the crash tests kill it
// after a seeded number of committed batches and check the ledger after each kill.
import Foundation
import ShareLedger
import ShareLedgerCrashHarness

#if canImport(Glibc)
import Glibc
#endif

exitWithParent()

if CommandLine.arguments.count >= 4 && CommandLine.arguments[1] == "--sharing" {
    await runSharingChild(Array(CommandLine.arguments.dropFirst(2)))
    exit(0)
}
if CommandLine.arguments.count >= 4 && CommandLine.arguments[1] == "--forget" {
    await runForgetChild(Array(CommandLine.arguments.dropFirst(2)))
    exit(0)
}
if CommandLine.arguments.count >= 2 && CommandLine.arguments[1] == "--mix" {
    await runMixChild(Array(CommandLine.arguments.dropFirst(2)))
}
if CommandLine.arguments.count >= 4 && CommandLine.arguments[1] == "--import" {
    exit(await ImportCrash.runChild(ledgerPath: CommandLine.arguments[2], file: CommandLine.arguments[3]))
}
if CommandLine.arguments.count >= 2 && CommandLine.arguments[1] == "--soak-driver" {
    exit(await runSoakDriver(Array(CommandLine.arguments.dropFirst(2))))
}

let arguments = CommandLine.arguments
guard arguments.count >= 3 else {
    FileHandle.standardError.write(Data("usage: ShareLedgerCrashChild LEDGER_DIR ACK_FILE [WRITERS]\n".utf8))
    exit(64)
}
let ledgerPath = arguments[1]
let ackPath = arguments[2]
let writers = arguments.count > 3 ? Int(arguments[3]) ?? 8 : 8

let ackFD = openAcknowledgements(ackPath)

let log: EventLog
do {
    log = try EventLog.open(EventLog.Configuration(path: ledgerPath, durability: .durable))
} catch {
    fail("cannot open ledger: \(error)", status: 70)
}
FileHandle.standardOutput.write(Data("ready\n".utf8))

await withTaskGroup(of: Void.self) { group in
    for writer in 0..<writers {
        group.addTask {
            var index = 0
            while true {
                index += 1
                let metadata = CommandMetadata(container: "iCloud.com.example.crash", actor: "writer-\(writer)")
                let payload = Array("writer \(writer) append \(index)".utf8)
                do {
                    let result = try await log.append(
                        [EventDraft(type: "shareledger.test.CrashAppend", payload: payload)],
                        to: "crash/\(writer)", metadata: metadata)
                    acknowledge("\(result.positions.lowerBound.rawValue) \(metadata.commandID.uuidString)\n", to: ackFD)
                } catch {
                    fail("append failed: \(error)", status: 71)
                }
            }
        }
    }
}
