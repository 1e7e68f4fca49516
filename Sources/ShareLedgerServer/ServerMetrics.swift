import Metrics
import Prometheus
import ShareLedger

/// The server's metrics: per endpoint (request counts by status, latency, items per request) through
/// swift-metrics, and the ledger's gauges (events, commands committed, residual tasks and their lag)
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
        if let stats = try? ledger.statistics() {
            registry.makeGauge(descriptor: MetricNameDescriptor(metricName: "shareledger_ledger_events", unitName: "", helpText: "Events in the log")).set(Double(stats.events))
            registry.makeGauge(descriptor: MetricNameDescriptor(metricName: "shareledger_ledger_commands", unitName: "", helpText: "Commands committed")).set(Double(stats.commands))
            registry.makeGauge(descriptor: MetricNameDescriptor(metricName: "shareledger_ledger_residual_tasks_pending", unitName: "", helpText: "Residual tasks not done yet"))
                .set(Double(stats.pendingResidualTasks))
            registry.makeGauge(descriptor: MetricNameDescriptor(metricName: "shareledger_ledger_residual_tasks_parked", unitName: "", helpText: "Residual tasks parked after failing"))
                .set(Double(stats.parkedResidualTasks))
            registry.makeGauge(descriptor: MetricNameDescriptor(metricName: "shareledger_ledger_residual_task_lag_seconds", unitName: "", helpText: "Age of the oldest pending residual task"))
                .set(stats.oldestPendingTaskAgeSeconds)
            registry.makeGauge(descriptor: MetricNameDescriptor(metricName: "shareledger_ledger_used_bytes", unitName: "", helpText: "Bytes of the ledger's map in use")).set(Double(stats.usedBytes))
        }
        return registry.emitToBuffer()
    }
}
