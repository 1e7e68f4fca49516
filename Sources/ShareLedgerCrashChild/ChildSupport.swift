import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Says on standard error why the child stops, and exits with `status` (the tests tell a child that
/// failed from one they killed by it: 66 no acknowledgement file, 70 no ledger, 71 a failed call).
func fail(_ message: String, status: Int32) -> Never {
    FileHandle.standardError.write(Data("\(message)\n".utf8))
    exit(status)
}

/// Ends this process with status 75 once the process that started it is gone: its parent is init
/// (pid 1, which adopts orphans; also when the parent was gone before this process looked), or its
/// parent changes (a subreaper adopted it). A child runs forever until a test kills it; when the
/// test process itself dies first (a timeout killing `swift test`), nothing else would stop it. A
/// thread that looks at the parent's id five times a second, not `PR_SET_PDEATHSIG`: that signal
/// follows the thread that spawned the child, and the test's threads come and go.
func exitWithParent() {
    let parent = getppid()
    let watcher = Thread {
        while parent != 1 && getppid() == parent { usleep(200_000) }
        _exit(75)
    }
    watcher.start()
}

/// The container the client modes act in.
let crashContainer = "iCloud.com.example.crash"

/// The arguments of a client mode, `LEDGER_DIR ACK_FILE [CLIENTS]`: the ledger's path, the
/// acknowledgement file opened (``openAcknowledgements(_:)``) and the number of clients.
func clientArguments(_ arguments: [String], defaultClients: Int) -> (ledgerPath: String, ackFD: Int32, clients: Int) {
    let clients = arguments.count > 2 ? Int(arguments[2]) ?? defaultClients : defaultClients
    return (arguments[0], openAcknowledgements(arguments[1]), clients)
}

/// The acknowledgement file at `path`, opened for appending (created when missing); exits with 66
/// when it cannot be opened.
func openAcknowledgements(_ path: String) -> Int32 {
    let fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0o644)
    guard fd >= 0 else { fail("cannot open \(path)", status: 66) }
    return fd
}

/// Appends `line` to the acknowledgement file `fd` in one write.
func acknowledge(_ line: String, to fd: Int32) {
    _ = line.withCString { write(fd, $0, strlen($0)) }
}
