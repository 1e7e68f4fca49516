import Foundation

/// A child process started with `posix_spawn`, for tests and the crash harness.
///
/// Not Foundation's `Process`: on Linux, `Process.run()` (swift-corelibs-foundation of Swift 6.3)
/// lists `/proc/self/fd` to close the child's descriptors and copies each `dirent` whole, reading up
/// to 256 bytes past a short record; when the record ends glibc's buffer before an unmapped page the
/// test process crashes (swiftlang/swift-corelibs-foundation#5472). The more descriptors a process has
/// open (every open ledger holds several), the likelier; a full run of this suite met it. Here the
/// child gets `stdin`/`stdout`/`stderr` and closes every other descriptor
/// (`posix_spawn_file_actions_addclosefrom_np`), with no directory listing in this process.
public struct Spawned: Sendable {
    /// The child's process ID.
    public let pid: pid_t

    /// Starts `executable` with `arguments` (and `environment`, or this process's). The descriptors
    /// become the child's standard input, output and error (nil: `/dev/null`); the caller keeps and
    /// closes its own.
    public init(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil, stdin: Int32? = nil,
        stdout: Int32? = nil, stderr: Int32? = nil
    ) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (target, source) in [(Int32(0), stdin), (1, stdout), (2, stderr)] {
            if let source {
                posix_spawn_file_actions_adddup2(&actions, source, target)
            } else {
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
            }
        }
        if let closeFrom = Self.addCloseFrom { _ = closeFrom(&actions, 3) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let environment = environment ?? ProcessInfo.processInfo.environment
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard rc == 0 else {
            throw NSError(
                domain: NSPOSIXErrorDomain, code: Int(rc),
                userInfo: [NSLocalizedDescriptionKey: "posix_spawn \(executable): \(String(cString: strerror(rc)))"])
        }
        self.pid = pid
    }

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later), which Swift's Glibc module
    /// does not import: found at run time. Without it the child inherits this process's descriptors
    /// that lack close-on-exec, as with a plain `posix_spawn`.
    private static let addCloseFrom:
        (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? = {
            guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else {  // nil: RTLD_DEFAULT
                return nil
            }
            return unsafeBitCast(
                symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
        }()

    /// Waits for the child to end (blocking this thread) and returns its exit code, or the signal
    /// that ended it.
    public func wait() -> (status: Int32, signaled: Bool) {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            guard errno == EINTR else { return (-1, false) }
        }
        // WIFSIGNALED / WTERMSIG / WEXITSTATUS, which Swift does not import (they are macros).
        let signal = status & 0x7F
        if signal != 0 && signal != 0x7F { return (signal, true) }
        return ((status >> 8) & 0xFF, false)
    }
}
