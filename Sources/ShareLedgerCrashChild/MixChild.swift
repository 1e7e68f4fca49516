import Foundation
import ShareLedger
import ShareLedgerCrashHarness

#if canImport(Glibc)
import Glibc
#endif

/// `--mix LEDGER_DIR ACK_FILE [CLIENTS] [DURABILITY] [RUN] [rebuild]`: the mixed workload, until
/// killed; with `rebuild`, read models rewritten into their second copies over and over meanwhile.
func runMixChild(_ arguments: [String]) async -> Never {
    guard arguments.count >= 2 else {
        FileHandle.standardError.write(
            Data("usage: ShareLedgerCrashChild --mix LEDGER_DIR ACK_FILE [CLIENTS] [DURABILITY] [RUN] [rebuild]\n".utf8))
        exit(64)
    }
    let clients = arguments.count > 2 ? Int(arguments[2]) ?? 6 : 6
    let durability = arguments.count > 3 ? Durability(rawValue: arguments[3]) ?? .durable : .durable
    let run = arguments.count > 4 ? arguments[4] : nil
    let flags = Set(arguments.dropFirst(5))
    await CrashWorkload.run(
        ledgerPath: arguments[0], ackPath: arguments[1], clients: clients, durability: durability, run: run,
        rebuilding: flags.contains("rebuild"))
}

/// `--soak-driver [KILLS] [--seed N] [--dir DIR] [--quiet] [--rebuild]`: kills a --mix child KILLS
/// times (with `--rebuild`, one that also rewrites the read models over and over) and verifies after
/// each kill; prints a line per kill and, last, `kills survived: N, acknowledged
/// commands lost: L`. Exits 0 only when nothing was lost or duplicated and every check passed.
func runSoakDriver(_ arguments: [String]) async -> Int32 {
    var kills = 200
    var seed: UInt64 = 0x50AC
    var directory: String?
    var quiet = false
    var rebuilding = false
    var index = 0
    while index < arguments.count {
        let argument = arguments[index]
        switch argument {
        case "--seed" where index + 1 < arguments.count:
            index += 1
            seed = UInt64(arguments[index]) ?? seed
        case "--dir" where index + 1 < arguments.count:
            index += 1
            directory = arguments[index]
        case "--quiet":
            quiet = true
        case "--rebuild":
            rebuilding = true
        default:
            guard let value = Int(argument), value > 0 else {
                FileHandle.standardError.write(
                    Data("usage: ShareLedgerCrashChild --soak-driver [KILLS] [--seed N] [--dir DIR] [--quiet] [--rebuild]\n".utf8))
                return 64
            }
            kills = value
        }
        index += 1
    }
    let fileManager = FileManager.default
    let work = directory ?? fileManager.temporaryDirectory.appendingPathComponent("shareledger-soak-\(getpid())").path
    try? fileManager.createDirectory(atPath: work, withIntermediateDirectories: true)
    defer { if directory == nil { try? fileManager.removeItem(atPath: work) } }
    let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    var options = SoakDriver.Options(kills: kills, seed: seed, childExecutable: executable, workDirectory: work)
    options.killsPerLedger = 10
    options.rebuilding = rebuilding
    if !quiet { options.progress = { line in print(line) } }
    print("soak: \(kills) kills, seed \(seed), in \(work)" + (rebuilding ? ", rebuilding meanwhile" : ""))
    let report = await SoakDriver.run(options)
    for line in report.lost.prefix(20) { print("LOST: \(line)") }
    for line in report.duplicated.prefix(20) { print("DUPLICATED: \(line)") }
    for line in report.problems.prefix(20) { print("PROBLEM: \(line)") }
    let seconds = Double(report.elapsed.components.seconds) + Double(report.elapsed.components.attoseconds) / 1e18
    print(
        "soak: \(report.kills) kills over \(report.ledgers) ledgers in \(String(format: "%.1f", seconds)) s; "
            + "\(report.acknowledged) acknowledged commands checked, \(report.cutLines) cut lines, "
            + "\(report.tasksDrained) residual tasks left pending by kills and drained, \(report.events) events; "
            + "\(report.duplicated.count) duplicated, \(report.problems.count) other problems")
    print(report.summaryLine)
    return report.isClean && report.killsSurvived == report.kills ? 0 : 1
}
