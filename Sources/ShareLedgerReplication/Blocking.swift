import Dispatch
import ShareLedger
import Synchronization

/// Runs blocking C calls off Swift's cooperative thread pool and bounds every wait.
///
/// The NATS C client blocks its calling thread (and, before a later fix, a fetch may not time out
/// during a leader election), so each call runs on a Dispatch worker thread and the caller resumes
/// with ``ReplicationError/Code/timedOut`` when `timeout` passes first. A call that outlives its
/// timeout finishes on its thread and its result is dropped; it keeps what it uses alive until then.
enum Blocking {
    static func run<T: Sendable>(
        _ what: String, timeout: Duration, _ body: @escaping @Sendable () throws(ReplicationError) -> T
    ) async throws(ReplicationError) -> T {
        let result: Result<T, ReplicationError> = await withCheckedContinuation { continuation in
            let once = ResumeOnce(continuation)
            DispatchQueue.global().async {
                do throws(ReplicationError) {
                    once.resume(.success(try body()))
                } catch {
                    once.resume(.failure(error))
                }
            }
            let nanos = Int(CheckedConversion.nanoseconds(clamping: timeout))
            DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(nanos)) {
                once.resume(.failure(ReplicationError(.timedOut, "\(what) got no answer within \(timeout); retry")))
            }
        }
        return try result.get()
    }

    /// Resumes a continuation the first time only.
    private final class ResumeOnce<T: Sendable>: Sendable {
        private let continuation: Mutex<CheckedContinuation<Result<T, ReplicationError>, Never>?>

        init(_ continuation: CheckedContinuation<Result<T, ReplicationError>, Never>) {
            self.continuation = Mutex(continuation)
        }

        func resume(_ result: Result<T, ReplicationError>) {
            let taken = continuation.withLock { slot in
                defer { slot = nil }
                return slot
            }
            taken?.resume(returning: result)
        }
    }
}
