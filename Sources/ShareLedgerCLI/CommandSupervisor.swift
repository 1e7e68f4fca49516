import Foundation
import ShareLedger

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Runs every `share-ledger` command in a child process, so that a damaged `data.mdb` that makes
/// liblmdb fault (a bus error or segmentation fault while it walks a B-tree page: liblmdb trusts
/// the file) ends as an error — `corruptedData` naming the file, exit 2 — instead of a crash. A
/// bus error while the ledger's file system is full (less than ``fullBelowBytes`` free) is a full
/// disk, not damage: a page of a mapped file found no block. It ends as `storageFull`, exit 1.
///
/// The parent re-runs this executable with the same arguments and ``childVariable`` set, waits for
/// it, and exits with its exit code. It forwards SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to it by
/// another process (a terminal's Ctrl-C already reaches the child, which is in the same process
/// group). The child exits at once when the parent dies (it watches a pipe), so killing the parent
/// stops the command as killing it directly did. A child killed by another signal makes the parent
/// die of the same signal. A crashed write transaction never commits, so a fault changes nothing.
enum CommandSupervisor {
    /// Set in the child's environment: run the command here.
    static let childVariable = "SHARE_LEDGER_SUPERVISED_CHILD"
    /// The child's descriptor for the read end of the parent-death pipe.
    static let pipeVariable = "SHARE_LEDGER_PARENT_PIPE"

    /// In the parent: runs the command in a child and exits with its outcome (never returns). In the
    /// child: starts watching the parent and returns.
    static func superviseOrReturn() {
        #if os(Linux)
        let environment = ProcessInfo.processInfo.environment
        if environment[childVariable] != nil {
            if let text = environment[pipeVariable], let fd = Int32(text) { watchParent(fd) }
            // A fault dies quietly here (no runtime backtrace): the parent reports it as an error.
            _ = Glibc.signal(SIGSEGV, SIG_DFL)
            _ = Glibc.signal(SIGBUS, SIG_DFL)
            _ = Glibc.signal(SIGABRT, SIG_DFL)
            return
        }
        // Without a child (spawning failed), the command runs in this process, as before.
        if let code = supervise() { exit(code) }
        #endif
    }

    private static func watchParent(_ fd: Int32) {
        Thread.detachNewThread {
            var byte: UInt8 = 0
            while read(fd, &byte, 1) < 0 && errno == EINTR {}
            // End of file: the parent is gone; stop as if killed with it.
            _exit(137)
        }
    }

    #if os(Linux)
    private static func supervise() -> Int32? {
        let executable = Bundle.main.executablePath ?? CommandLine.arguments[0]
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return nil }
        // The write end stays with the parent only.
        _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
        var environment = ProcessInfo.processInfo.environment
        environment[childVariable] = "1"
        environment[pipeVariable] = String(fds[0])
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup(executable)] + CommandLine.arguments.dropFirst().map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        installForwarding()
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, nil, &attributes, argv, envp)
        posix_spawnattr_destroy(&attributes)
        close(fds[0])
        guard spawned == 0 else {
            close(fds[1])
            return nil
        }
        supervisedChild = pid
        let child = pid
        // The async runtime's threads block signals; a thread of our own takes them (the handlers
        // forward them) and waits for the child, then ends the process.
        Thread.detachNewThread {
            var forwarded = sigset_t()
            sigemptyset(&forwarded)
            for signal in forwardedSignals { sigaddset(&forwarded, signal) }
            pthread_sigmask(SIG_UNBLOCK, &forwarded, nil)
            var status: Int32 = 0
            while waitpid(child, &status, 0) < 0 {
                guard errno == EINTR else { exit(70) }
            }
            exit(outcome(status))
        }
        while true { pause() }
    }

    static let forwardedSignals = [SIGTERM, SIGINT, SIGHUP, SIGQUIT]

    /// The parent's exit code for the child's wait status.
    private static func outcome(_ status: Int32) -> Int32 {
        let signal = status & 0x7F
        if signal == 0 { return (status >> 8) & 0xFF }
        if signal == SIGBUS, let free = freeBytes(), free < fullBelowBytes {
            // liblmdb's shared maps fault when the file system has no block for a page they touch:
            // a full disk, not damage.
            reportFull(freeBytes: free)
            return 1
        }
        // SIGABRT: liblmdb's assertions (`mdb_assert`) abort on pages that do not hold together,
        // which only a damaged file makes; Swift's own traps are SIGILL and SIGTRAP, passed on below.
        if signal == SIGSEGV || signal == SIGBUS || signal == SIGABRT {
            reportFault(signal: signal)
            return 2
        }
        // Any other signal: die of it too, as the command would have without the supervisor.
        _ = Glibc.signal(signal, SIG_DFL)
        var only = sigset_t()
        sigemptyset(&only)
        sigaddset(&only, signal)
        pthread_sigmask(SIG_UNBLOCK, &only, nil)
        raise(signal)
        return 128 + signal
    }

    private static func installForwarding() {
        for signal in forwardedSignals {
            var action = sigaction()
            action.__sigaction_handler.sa_sigaction = { signal, info, _ in
                // Forward what another process sent; a terminal's signals reach the child directly.
                guard supervisedChild > 0, let info, info.pointee.si_code <= 0 else { return }
                kill(supervisedChild, signal)
            }
            action.sa_flags = SA_SIGINFO | SA_RESTART
            sigemptyset(&action.sa_mask)
            sigaction(signal, &action, nil)
        }
    }

    /// Free space below which a SIGBUS is taken for a full file system: less than a few of LMDB's
    /// pages (a map faults when the one page it touches finds no block).
    static let fullBelowBytes: UInt64 = 1 << 20

    /// The ledger directory the command names (`--path`), as the command would read it.
    private static var ledgerPath: String {
        let arguments = Array(CommandLine.arguments.dropFirst())
        var path = "./.share-ledger"
        for (index, argument) in arguments.enumerated() {
            if argument == "--path", index + 1 < arguments.count { path = arguments[index + 1] }
            if argument.hasPrefix("--path=") { path = String(argument.dropFirst("--path=".count)) }
        }
        return path
    }

    /// The bytes free to this user on the file system of the ledger directory (or of the nearest
    /// directory above it that exists); nil when it cannot be told.
    private static func freeBytes() -> UInt64? {
        var url = URL(fileURLWithPath: ledgerPath).standardizedFileURL
        for _ in 0..<64 {
            var info = statvfs()
            if statvfs(url.path, &info) == 0 { return UInt64(info.f_bavail) * UInt64(info.f_frsize) }
            guard url.path != "/" else { return nil }
            url.deleteLastPathComponent()
        }
        return nil
    }

    /// Says the file system is full, as a `storageFull` `LedgerError` would (JSON with --json).
    private static func reportFull(freeBytes: UInt64) {
        let error = LedgerError(
            .storageFull, "the file system holding \(ledgerPath) is full (\(freeBytes) bytes free): LMDB could not get a "
                + "block for a page of the ledger's files it maps (SIGBUS), so the command stopped before committing "
                + "anything. Free space and run it again; the ledger is not damaged by this")
        Output.failure(error, json: CommandLine.arguments.contains("--json"))
    }

    /// Says which file is damaged, as a `LedgerError` would (JSON with --json).
    private static func reportFault(signal: Int32) {
        let arguments = Array(CommandLine.arguments.dropFirst())
        let file = (ledgerPath as NSString).appendingPathComponent("data.mdb")
        let derived = ((ledgerPath as NSString).appendingPathComponent("derived") as NSString).appendingPathComponent("data.mdb")
        let fault = signal == SIGBUS ? "SIGBUS" : signal == SIGABRT ? "SIGABRT: an LMDB assertion" : "SIGSEGV"
        let error: LedgerError
        if FileManager.default.fileExists(atPath: derived) {
            // Which of the two files faulted is not known here; derived/ is a cache, the log is not.
            error = LedgerError(
                .corruptedData, "\(file) or \(derived) is damaged: reading it made LMDB fault (\(fault)), so the command "
                    + "stopped before committing anything. derived/ is a cache of the log: when `share-ledger verify` "
                    + "passes, the log is whole; delete derived/ and open the ledger for writing (e.g. `share-ledger "
                    + "rebuild`), which derives it again from the log. When `verify` fails too, restore the ledger from a "
                    + "backup, or import an export of a good copy into a new directory")
        } else {
            error = LedgerError(
                .corruptedData, "\(file) is damaged: reading it made LMDB fault (\(fault)), "
                    + "so the command stopped before committing anything. Restore the ledger from a backup, or import an "
                    + "export (`share-ledger export` of a good copy) into a new directory")
        }
        Output.failure(error, json: arguments.contains("--json"))
    }
    #endif
}

/// The supervised child's process id, for the signal handlers (set once, before any signal is forwarded).
nonisolated(unsafe) private var supervisedChild: pid_t = 0
