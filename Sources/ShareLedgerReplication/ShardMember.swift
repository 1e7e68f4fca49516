import Foundation
import Logging
import ServiceLifecycle
import ShareLedger
import Synchronization

/// One node of a shard inside a long-running process (`share-ledger serve --shard`): the same
/// service runs on every node. It stands by as a replica that follows the stream, takes the writer
/// lease when it is free or expired (``Failover/takeOver(lease:follower:timeout:margin:catchUpTimeout:streamReplicas:monotonic:)``),
/// and then writes: it ships every commit, keeps the lease (``WriterLeaseKeeper``), runs the
/// residual-task worker and answers the shard's commands (``ShardResponder``, role writer) with
/// `commands`. When the lease is lost or a newer term fences it, the directory is recorded deposed
/// (every append stops), then re-joined as a replica when its log is a prefix of the stream, and the
/// member stands by again; a directory holding events the stream lacks stays deposed (the member
/// then only serves reads; retire the directory, docs/operations.md). At graceful shutdown a writer
/// ships what it committed, steps down to a replica and releases the lease.
///
/// Open the ledger without a residual-task worker: the member runs one while it writes.
public final class ShardMember: Service, Sendable {
    /// How the member runs.
    public struct Configuration: Sendable {
        /// NATS servers.
        public var servers: [String]
        /// The shard.
        public var shard: ShardNames
        /// This node's name in the lease.
        public var holder: String
        /// How long the lease lasts unless renewed.
        public var leaseDuration: Duration = .seconds(5)
        /// Replicas of the stream and the lease bucket when they are created.
        public var replicas: Int = 3
        /// Where it logs.
        public var logger: Logger

        /// A configuration with a 5-second lease and 3 replicas.
        public init(servers: [String], shard: ShardNames, holder: String, logger: Logger) {
            self.servers = servers
            self.shard = shard
            self.holder = holder
            self.logger = logger
        }
    }

    /// What the member is now.
    public enum State: Sendable, Hashable, CustomStringConvertible {
        /// Connecting, or checking the directory against the stream.
        case starting
        /// A replica that follows the stream and waits for the lease.
        case standby
        /// The shard's writer in `term`.
        case writer(term: UInt64)
        /// Deposed with events the stream lacks: serves reads only until an operator retires the directory.
        case deposed(reason: String)
        /// Stopped.
        case stopped

        /// E.g. `writer (term 3)`.
        public var description: String {
            switch self {
            case .starting: return "starting"
            case .standby: return "standby"
            case .writer(let term): return "writer (term \(term))"
            case .deposed(let reason): return "deposed: \(reason)"
            case .stopped: return "stopped"
            }
        }
    }

    private let ledger: ShareLedger
    private let configuration: Configuration
    private let commands: ShardResponder.Handler?
    private let current = Mutex<State>(.starting)
    private let onChange: @Sendable (State) -> Void

    /// Makes a member of `configuration.shard` writing to and following into `ledger`; `commands`
    /// answers the commands other nodes forward to the writer (nil: none are answered); `onChange`
    /// is called at every change of state.
    public init(
        ledger: ShareLedger, configuration: Configuration, commands: ShardResponder.Handler? = nil,
        onChange: @escaping @Sendable (State) -> Void = { _ in }
    ) {
        self.ledger = ledger
        self.configuration = configuration
        self.commands = commands
        self.onChange = onChange
    }

    /// What the member is now.
    public var state: State { current.withLock { $0 } }

    private func set(_ state: State) {
        let changed = current.withLock { old in
            defer { old = state }
            return old != state
        }
        guard changed else { return }
        configuration.logger.info("shard member", metadata: ["shard": "\(configuration.shard.shard)", "state": "\(state)"])
        onChange(state)
    }

    private var stopping: Bool { Task.isCancelled || Task.isShuttingDownGracefully }

    /// Stands by, writes, stands by again..., until cancelled or graceful shutdown.
    public func run() async throws {
        var backoff = Backoff(initial: .milliseconds(100), cap: .seconds(2))
        let logger = configuration.logger
        defer { set(.stopped) }
        while !stopping {
            do {
                let again = try await cancelWhenGracefulShutdown { try await self.round() }
                guard again else { break }
                backoff.reset()
            } catch is CancellationError {
                break
            } catch let error as ReplicationError where error.code == .fenced || error.code == .diverged {
                // This directory holds events that are not part of the history: it takes no writes and
                // stays as it is for an operator (it still answers reads).
                logger.error("this ledger cannot stand by", metadata: ["error": "\(error)"])
                set(.deposed(reason: error.message))
                try? await gracefulShutdown()
                break
            } catch {
                if stopping { break }
                logger.warning("the shard member failed; standing by again", metadata: ["error": "\(error)"])
                await backoff.wait()
            }
        }
    }

    /// One standby and (when it takes the lease) one term of writing. Returns whether to stand by again.
    private func round() async throws -> Bool {
        let shard = configuration.shard
        set(.starting)
        let lease = try await WriterLease.open(
            servers: configuration.servers, shard: shard, holder: configuration.holder, duration: configuration.leaseDuration,
            replicas: configuration.replicas)
        defer { lease.close() }
        let follower = LedgerFollower(
            ledger: ledger, configuration: FollowerConfiguration(servers: configuration.servers, shard: shard, logger: configuration.logger))
        set(.standby)
        let takeover: Failover.Takeover
        do {
            // A standby waits as long as the writer lives (ten years, in effect).
            takeover = try await Failover.takeOver(
                lease: lease, follower: follower, timeout: .seconds(315_360_000), streamReplicas: configuration.replicas)
        } catch {
            follower.close()
            throw error
        }
        follower.close()
        let term = takeover.grant.record.term
        set(.writer(term: term))
        let ended = await write(lease: lease, term: term)
        let path = ledger.log.configuration.path
        switch ended {
        case .shutdown:
            await stepDown(lease: lease, term: term)
            return false
        case .lost(let reason):
            configuration.logger.warning(
                "this node stopped writing shard \(shard.shard)", metadata: ["term": "\(term)", "reason": "\(reason)"])
            WriterLeaseToken.remove(at: path)
            if case .writer? = try? LedgerRole.read(at: path) {
                try? LedgerRole.deposed(shard: shard.shard, term: term, newerTerm: nil).write(at: path)
            }
            // A deposed writer whose log is a prefix of the stream (it shipped all it committed)
            // re-joins as a replica and stands by again; otherwise it stays deposed.
            _ = try await Failover.retrying(until: ContinuousClock.now + .seconds(60)) { () throws(ReplicationError) in
                try await Failover.rejoin(log: ledger.log, servers: configuration.servers, shard: shard)
            }
            return true
        }
    }

    /// Why a term of writing ended, set by whichever service saw it first.
    private final class LostReason: Sendable {
        let value = Mutex<String?>(nil)
    }

    private enum Ended {
        case shutdown
        case lost(String)
    }

    /// Ships, keeps the lease, runs the worker and answers commands until the lease is lost, the
    /// shipper is fenced, or graceful shutdown.
    private func write(lease: WriterLease, term: UInt64) async -> Ended {
        let shard = configuration.shard
        let logger = configuration.logger
        let path = ledger.log.configuration.path
        var shipping = ShipperConfiguration(servers: configuration.servers, shard: shard, logger: logger)
        shipping.replicas = configuration.replicas
        let shipper = LedgerShipper(log: ledger.log, configuration: shipping)
        defer { shipper.close() }
        let lost = LostReason()
        let keeper = WriterLeaseKeeper(lease: lease, logger: logger, ledgerPath: path, term: term) { record in
            try? LedgerRole.deposed(shard: shard.shard, term: term, newerTerm: record?.term).write(at: path)
            lost.value.withLock {
                $0 = record.map { "the lease went to \($0.holder) (term \($0.term))" } ?? "the lease could not be renewed before it expired"
            }
        }
        let worker = ResidualTaskWorker(ledger: ledger, configuration: ResidualTaskWorker.Configuration(logger: logger))
        let responder = commands.map {
            ShardResponder(servers: configuration.servers, shard: shard, role: .writer, logger: logger, handler: $0)
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await keeper.run() }
            group.addTask {
                do {
                    try await shipper.run()
                } catch {
                    lost.value.withLock { $0 = $0 ?? "shipping stopped: \(error)" }
                }
            }
            group.addTask { try? await worker.run() }
            if let responder {
                // A responder that fails (NATS lost) subscribes again while the lease is held.
                group.addTask {
                    var backoff = Backoff(initial: .milliseconds(100), cap: .seconds(2))
                    while !Task.isCancelled && !Task.isShuttingDownGracefully {
                        do {
                            try await responder.run()
                        } catch {
                            logger.warning("answering forwarded commands failed; subscribing again", metadata: ["error": "\(error)"])
                            await backoff.wait()
                        }
                    }
                }
            }
            // The first to end (the keeper on a lost lease, the shipper fenced, or all at shutdown)
            // ends the term.
            await group.next()
            group.cancelAll()
        }
        if let reason = lost.value.withLock({ $0 }) { return .lost(reason) }
        return Task.isShuttingDownGracefully || Task.isCancelled ? .shutdown : .lost("the writer's services stopped")
    }

    /// A graceful stop: ships what was committed (when NATS answers and the lease is still held),
    /// then steps down: the token goes (appends stop), the role becomes replica once everything is
    /// shipped (deposed otherwise), the lease is released so the next writer need not wait for it.
    private func stepDown(lease: WriterLease, term: UInt64) async {
        let path = ledger.log.configuration.path
        let shard = configuration.shard
        WriterLeaseToken.remove(at: path)
        var shipping = ShipperConfiguration(servers: configuration.servers, shard: shard, logger: configuration.logger)
        shipping.replicas = configuration.replicas
        shipping.checksRole = false  // the lease is still this node's; no append commits any more
        let shipper = LedgerShipper(log: ledger.log, configuration: shipping)
        defer { shipper.close() }
        let shipped = try? await shipper.shipAvailable()
        let all = shipped.map { $0.lagPositions == 0 } ?? false
        try? (all ? LedgerRole.replica(shard: shard.shard) : LedgerRole.deposed(shard: shard.shard, term: term, newerTerm: nil)).write(at: path)
        _ = try? await lease.release()
    }
}
