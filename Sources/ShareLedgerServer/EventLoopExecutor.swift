import Hummingbird
import HummingbirdCore
import Logging
import NIOCore

/// A task executor that runs its jobs on one SwiftNIO event loop.
///
/// Hummingbird handles each connection in a task of its own on Swift's cooperative pool: every
/// request then hops from the channel's event loop to the pool (to read it) and back (to write the
/// answer), and the ledger's writer resumes the caller on the pool too. Run with this executor
/// preferred, the connection's task stays on the event loop that owns its channel: the request parts
/// arrive without a hop, the answer is written on the loop directly, and the writer's answer (from
/// its thread or its resumer queue) is one `execute` onto that loop. The loop runs the endpoint's (short, synchronous) work between its I/O,
/// as a NIO handler would.
final class EventLoopExecutor: TaskExecutor {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) { self.eventLoop = eventLoop }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// Hummingbird's HTTP/1 child channel, with each connection's task run on its channel's event loop
/// (``EventLoopExecutor``) instead of the cooperative pool. Setup, parsing, keep-alive, idle
/// timeouts and graceful shutdown are HTTP1Channel's own.
struct EventLoopBoundHTTP1Channel: ServerChildChannel {
    typealias Value = HTTP1Channel.Value
    let inner: HTTP1Channel

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        inner.setup(channel: channel, logger: logger)
    }

    func handle(value: Value, logger: Logger) async {
        await withTaskExecutorPreference(EventLoopExecutor(value.channel.eventLoop)) {
            await inner.handle(value: value, logger: logger)
        }
    }
}

extension HTTPServerBuilder {
    /// HTTP/1 with each connection's task on its channel's event loop (``EventLoopBoundHTTP1Channel``).
    static func http1OnEventLoop(configuration: HTTP1Channel.Configuration) -> HTTPServerBuilder {
        HTTPServerBuilder { responder in EventLoopBoundHTTP1Channel(inner: HTTP1Channel(responder: responder, configuration: configuration)) }
    }
}
