import Metrics
import Prometheus
import ShareLedger

/// The server's metrics: per endpoint (request counts by status, latency, items per request) through
/// swift-metrics, and the ledger's gauges (events, commands committed, the writer's queue depth,
/// residual tasks and their lag)
/// read from ``ShareLedger/statistics()`` each time `/metrics` is scraped. Their names start with
/// `shareledger_ledger_`, which no swift-metrics metric of the library uses: the registry refuses (it
/// traps) one name registered twice with different help texts.
struct ServerMetrics: Sendable {
    let registry: PrometheusCollectorRegistry?

    func recordRequest(endpoint: String, status: Int, items: Int, duration: Duration) {
        Counter(label: "shareledger_http_requests_total", dimensions: [("endpoint", endpoint), ("status", String(status))])
            .increment()
        Metrics.Timer(label: "shareledger_http_request_duration_seconds", dimensions: [("endpoint", endpoint)])
            .recordNanoseconds(duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000)
        if items > 0 {
            Recorder(label: "shareledger_http_request_items", dimensions: [("endpoint", endpoint)], aggregate: true).record(items)
        }
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
        return registry.emitToBuffer()
    }
}
