import Metrics
import Prometheus
import ShareLedger
import Synchronization

/// The server's metrics: per endpoint (request counts by status, latency, items per request) through
/// swift-metrics, and the ledger's gauges (events, commands committed, the writer's queue depth,
/// residual tasks and their lag) and group-commit histogram (commands per commit), read from the
/// ledger's public API each time `/metrics` is scraped. Their names start with
/// `shareledger_ledger_`, which no swift-metrics metric of the library uses: the registry refuses (it
/// traps) one name registered twice with different help texts.
struct ServerMetrics: Sendable {
    let registry: PrometheusCollectorRegistry?
    private let handles = Handles()

    init(registry: PrometheusCollectorRegistry?) {
        self.registry = registry
    }

    /// The swift-metrics handles of each endpoint and status, made once: making one asks the
    /// factory (a lock and a label lookup) for every request otherwise.
    private final class Handles: Sendable {
        struct Endpoint {
            var duration: Metrics.Timer
            var items: Metrics.Recorder
            var requests: [Int: Metrics.Counter] = [:]
        }
        private let byEndpoint = Mutex<[String: Endpoint]>([:])

        func record(endpoint: String, status: Int, items: Int, nanoseconds: Int64) {
            let (counter, timer, recorder) = byEndpoint.withLock { all in
                var entry =
                    all[endpoint]
                    ?? Endpoint(
                        duration: Metrics.Timer(label: "shareledger_http_request_duration_seconds", dimensions: [("endpoint", endpoint)]),
                        items: Metrics.Recorder(label: "shareledger_http_request_items", dimensions: [("endpoint", endpoint)], aggregate: true))
                let counter =
                    entry.requests[status]
                    ?? Metrics.Counter(label: "shareledger_http_requests_total", dimensions: [("endpoint", endpoint), ("status", String(status))])
                entry.requests[status] = counter
                all[endpoint] = entry
                return (counter, entry.duration, entry.items)
            }
            counter.increment()
            timer.recordNanoseconds(nanoseconds)
            if items > 0 { recorder.record(items) }
        }
    }

    func recordRequest(endpoint: String, status: Int, items: Int, duration: Duration) {
        handles.record(
            endpoint: endpoint, status: status, items: items,
            nanoseconds: duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000)
    }

    /// The Prometheus text page, after refreshing the ledger's gauges; nil without a registry.
    func page(ledger: ShareLedger) -> [UInt8]? {
        guard let registry else { return nil }
        func gauge(_ name: String, _ help: String, _ value: Double) {
            registry.makeGauge(descriptor: MetricNameDescriptor(metricName: name, unitName: "", helpText: help)).set(value)
        }
        if let stats = try? ledger.statistics() {
            gauge("shareledger_ledger_events", "Events in the log", Double(stats.events))
            gauge("shareledger_ledger_commands", "Commands committed", Double(stats.commands))
            gauge("shareledger_ledger_residual_tasks_pending", "Residual tasks not done yet", Double(stats.pendingResidualTasks))
            gauge(
                "shareledger_ledger_residual_tasks_parked", "Residual tasks parked after failing",
                Double(stats.parkedResidualTasks))
            gauge(
                "shareledger_ledger_residual_task_lag_seconds", "Age of the oldest pending residual task",
                stats.oldestPendingTaskAgeSeconds)
            gauge("shareledger_ledger_used_bytes", "Bytes of the ledger's map in use", Double(stats.usedBytes))
        }
        gauge("shareledger_ledger_writer_queue_depth", "Commands waiting for the writer thread", Double(ledger.writerQueueDepth))
        var page = registry.emitToBuffer()
        Self.appendGroupCommits(ledger.log.groupCommits, to: &page)
        return page
    }

    /// `shareledger_ledger_group_commit_commands`: a Prometheus histogram of the commands in each of
    /// the writer's commits since the server opened the ledger, written from the ledger's own counts
    /// (the registry's histograms take observations one by one; these are counted by the writer).
    static func appendGroupCommits(_ commits: EventLog.GroupCommits, to page: inout [UInt8]) {
        let name = "shareledger_ledger_group_commit_commands"
        var text = "# HELP \(name) Commands per group commit of the ledger's writer (since the server opened it)\n"
        text += "# TYPE \(name) histogram\n"
        var cumulative: UInt64 = 0
        for (bound, count) in zip(commits.upperBounds, commits.buckets) {
            cumulative += count
            text += "\(name)_bucket{le=\"\(bound)\"} \(cumulative)\n"
        }
        text += "\(name)_bucket{le=\"+Inf\"} \(commits.commits)\n"
        text += "\(name)_sum \(commits.commands)\n"
        text += "\(name)_count \(commits.commits)\n"
        page.append(contentsOf: text.utf8)
    }
}
