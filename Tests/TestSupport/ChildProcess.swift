import Foundation
import ShareLedgerTestSupport
import Synchronization

/// How a child process ended.
public struct Termination: Sendable, Equatable {
    /// The exit code, or the number of the signal that ended it.
    public var status: Int32
    /// Whether a signal ended it (a crash, or a kill).
    public var signaled: Bool
    /// Whether the runner killed it because its time limit passed.
    public var timedOut: Bool

    /// Exit code `code`, not a signal.
    public func exited(_ code: Int32) -> Bool { !signaled && status == code }
    /// "exit N" or "signal N" (and "after the time limit").
    public var summary: String { (signaled ? "signal \(status)" : "exit \(status)") + (timedOut ? " (killed: time limit)" : "") }
}

/// A child process whose exit the tests await without blocking a thread of Swift's cooperative pool.
///
/// `Process.waitUntilExit()` and blocking reads of a pipe hold a pool thread until the child ends; on a
/// 2-core machine the pool has 2 threads, so two such waits starve every other task (the ledger's
/// writer, a worker, the NATS client) that the test or the child is waiting on. Here a thread of its
/// own waits for the child (`waitpid`) and resumes the waiting tasks. Standard input, output and
/// error are files or /dev/null, never pipes: nothing is read while the child runs. Started with
/// ``Spawned`` (`posix_spawn`), not Foundation's `Process`.
public final class ChildProcess: Sendable {
    private struct State {
        var termination: Termination?
        var waiters: [CheckedContinuation<Termination, Never>] = []
        var killedForTime = false
    }

    private final class Shared: Sendable {
        let mutex = Mutex(State())
    }

    /// The child's process ID.
    public let pid: pid_t
    private let shared = Shared()

    /// Starts `executable` with `arguments`. `stdin`, `stdout` and `stderr` are paths of files (standard
    /// input is read from it, the others are created or truncated); nil is /dev/null. `stdinHandle`
    /// (the read end of a pipe the test writes, say) replaces `stdin`; it is closed here once the
    /// child has its copy.
    public init(
        _ executable: URL, _ arguments: [String], stdin: String? = nil, stdinHandle: FileHandle? = nil,
        stdout: String? = nil, stderr: String? = nil, environment: [String: String]? = nil
    ) throws {
        let input = try stdinHandle ?? stdin.map { try FileHandle(forReadingFrom: URL(fileURLWithPath: $0)) }
        let output = try Self.output(stdout)
        let error = try Self.output(stderr)
        defer {
            // The child's copies are all it needs; close ours.
            for handle in [input, output, error] { try? handle?.close() }
        }
        let child = try Spawned(
            executable.path, arguments, environment: environment, stdin: input?.fileDescriptor,
            stdout: output?.fileDescriptor, stderr: error?.fileDescriptor)
        pid = child.pid
        let shared = shared
        // The end is awaited on a thread of its own (waitpid blocks), never on the cooperative pool.
        let waiter = Thread {
            let (status, signaled) = child.wait()
            let (termination, waiters) = shared.mutex.withLock { state in
                let termination = Termination(status: status, signaled: signaled, timedOut: state.killedForTime)
                state.termination = termination
                defer { state.waiters = [] }
                return (termination, state.waiters)
            }
            for waiter in waiters { waiter.resume(returning: termination) }
        }
        waiter.stackSize = 1 << 18
        waiter.start()
    }

    /// A child never outlives its handle: one a failed test left running is killed.
    deinit { send(SIGKILL) }

    private static func output(_ path: String?) throws -> FileHandle? {
        guard let path else { return nil }
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        return try FileHandle(forWritingTo: URL(fileURLWithPath: path))
    }

    /// How it ended, or nil while it runs.
    public var termination: Termination? { shared.mutex.withLock { $0.termination } }
    /// Whether it still runs.
    public var isRunning: Bool { termination == nil }

    /// Sends `signal` to the child (by its PID) if it still runs.
    public func send(_ signal: Int32) {
        // By PID: once the child has been reaped, `isRunning` is false (bar the moment between the
        // reaping and the handler), so a reused PID is not hit.
        if isRunning { kill(pid, signal) }
    }

    /// Waits for the child to end. After `timeLimit` (a safety net, not a schedule) the child is
    /// killed with SIGKILL and the result says `timedOut`. A cancelled wait kills the child too.
    @discardableResult
    public func exit(timeLimit: Duration = .seconds(600)) async -> Termination {
        let pid = pid
        let shared = shared
        let components = timeLimit.components
        let seconds = Double(components.seconds) + Double(components.attoseconds) / 1e18
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
            let running = shared.mutex.withLock { state -> Bool in
                guard state.termination == nil else { return false }
                state.killedForTime = true
                return true
            }
            if running { kill(pid, SIGKILL) }
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ended = shared.mutex.withLock { state -> Termination? in
                    if let termination = state.termination { return termination }
                    state.waiters.append(continuation)
                    return nil
                }
                if let ended { continuation.resume(returning: ended) }
            }
        } onCancel: {
            if shared.mutex.withLock({ $0.termination == nil }) { kill(pid, SIGKILL) }
        }
    }
}

/// How a run of a child process ended, with what it wrote.
public struct ProcessOutcome: Sendable {
    /// The exit code, or the signal's number when `signaled`.
    public var status: Int32
    /// Whether a signal ended it (a crash).
    public var signaled: Bool
    /// Whether it was killed because the time limit passed.
    public var timedOut: Bool
    /// Its standard output.
    public var stdout: String
    /// Its standard error.
    public var stderr: String

    /// Exit code `code`, not a signal.
    public func exited(_ code: Int32) -> Bool { !signaled && status == code }
    /// "exit N" or "signal N", with the output, for expectation messages.
    public var summary: String {
        Termination(status: status, signaled: signaled, timedOut: timedOut).summary + ": \(stdout) \(stderr)"
    }
}

/// Runs `executable` to its end, off the cooperative pool, and returns its exit and output.
/// Standard input is `input` (or the file at `stdinFile`); output goes through files in a temporary
/// directory. The child is killed with SIGKILL if it outlives `timeLimit` (a safety net only).
public func runProcess(
    _ executable: URL, _ arguments: [String], input: Data = Data(), stdinFile: String? = nil,
    environment: [String: String]? = nil, timeLimit: Duration = .seconds(600)
) async throws -> ProcessOutcome {
    let directory = TemporaryDirectory("process")
    let (inPath, outPath, errPath) = (directory.child("in"), directory.child("out"), directory.child("err"))
    if stdinFile == nil { _ = FileManager.default.createFile(atPath: inPath, contents: input) }
    let child = try ChildProcess(
        executable, arguments, stdin: stdinFile ?? inPath, stdout: outPath, stderr: errPath, environment: environment)
    let termination = await child.exit(timeLimit: timeLimit)
    return ProcessOutcome(
        status: termination.status, signaled: termination.signaled, timedOut: termination.timedOut,
        stdout: String(decoding: FileManager.default.contents(atPath: outPath) ?? Data(), as: UTF8.self),
        stderr: String(decoding: FileManager.default.contents(atPath: errPath) ?? Data(), as: UTF8.self))
}

/// Runs a product this package builds (`share-ledger`, the crash child) to its end; see ``runProcess``.
public func runProduct(
    _ name: String, _ arguments: [String], input: Data = Data(), stdin stdinFile: String? = nil,
    timeLimit: Duration = .seconds(600)
) async throws -> ProcessOutcome {
    try await runProcess(builtProduct(name), arguments, input: input, stdinFile: stdinFile, timeLimit: timeLimit)
}

/// Waits until `condition` holds, looking again every few milliseconds without holding a thread.
/// Fails (throws) only when `timeLimit`, a safety net, passes first.
public func waitUntil(
    _ what: @autoclosure () -> String, timeLimit: Duration = .seconds(120), _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeLimit
    while try await !condition() {
        guard ContinuousClock.now < deadline else { throw WaitTimedOut(description: "gave up waiting: \(what())") }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// A wait of ``waitUntil(_:timeLimit:_:)`` passed its time limit.
public struct WaitTimedOut: Error, CustomStringConvertible {
    public var description: String
    public init(description: String) { self.description = description }
}

/// Runs `body`, then `cleanup` whatever `body` did, and returns or rethrows what `body` did. For
/// clean-ups that run a child process (an unmount): a `defer` cannot await.
public func withCleanup<T>(_ body: () async throws -> T, cleanup: () async -> Void) async throws -> T {
    let result: Result<T, any Error>
    do {
        result = .success(try await body())
    } catch {
        result = .failure(error)
    }
    await cleanup()
    return try result.get()
}

/// A task executor on threads of its own, for async code the tests do not own that blocks its thread
/// while it waits (the crash harness's `waitUntilExit` and reads of a pipe, in Sources): run under
/// `withTaskExecutorPreference(BlockingWorkExecutor.shared) { ... }`, its waits hold one of these
/// threads instead of one of the cooperative pool's few.
public final class BlockingWorkExecutor: TaskExecutor, @unchecked Sendable {
    // @unchecked: `jobs` is guarded by `condition`.
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []

    /// One executor for the whole test run, with a few threads (each blocking wait holds one).
    public static let shared = BlockingWorkExecutor(threads: 6)

    private init(threads: Int) {
        for index in 0..<threads {
            let thread = Thread { [self] in work() }
            thread.name = "test-blocking-work-\(index)"
            thread.start()
        }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    private func work() {
        while true {
            condition.lock()
            while jobs.isEmpty { condition.wait() }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}
