/// A live, catch-up subscription to the log: ``EventLog/events(after:)``.
///
/// Iterating yields every committed event after the starting position, in position order, each
/// exactly once. It reads committed history in chunks (a fresh short read transaction per chunk),
/// then waits for the writer to publish a new head, without holding a read transaction while it
/// waits. Because positions are gapless and visible only after commit, it cannot skip an event.
///
/// The sequence ends (returns `nil`) when the iterating task is cancelled or the log is closed; it
/// throws ``LedgerError`` when stored data cannot be read. It follows commits made by this process;
/// a subscription does not notice appends made by another process until its next chunk read.
public struct EventSubscription: AsyncSequence, Sendable {
    /// Each element is one event.
    public typealias Element = EventEnvelope

    package let log: EventLog
    package let start: LogPosition
    /// Events read per read transaction while catching up.
    public var chunkSize = 512

    package init(log: EventLog, after position: LogPosition) {
        self.log = log
        self.start = position
    }

    /// Makes the iterator.
    public func makeAsyncIterator() -> Iterator {
        Iterator(log: log, last: start, chunkSize: Swift.max(1, chunkSize))
    }

    /// Iterates a subscription.
    public struct Iterator: AsyncIteratorProtocol {
        let log: EventLog
        var last: LogPosition
        let chunkSize: Int
        var buffer: [EventEnvelope] = []
        var index = 0

        /// The next event, waiting for one to be committed when caught up; `nil` when the task is
        /// cancelled or the log closes.
        public mutating func next() async throws(LedgerError) -> EventEnvelope? {
            while true {
                if index < buffer.count {
                    let event = buffer[index]
                    index += 1
                    last = event.position
                    return event
                }
                if Task.isCancelled { return nil }
                if log.writer.notifier.isClosed { return nil }
                buffer = try log.events(after: last, limit: chunkSize)
                index = 0
                if buffer.isEmpty {
                    await log.writer.notifier.wait(after: last.rawValue)
                }
            }
        }
    }
}
