//! Prometheus metrics (`GET /metrics`, text format): API request latency by route, lifecycle
//! operation latency, sandboxes created, runsc (engine) failures, sandboxes by state, and
//! databases by state with each one's storage in use and open connections (computed at
//! scrape time from the host agent and the databases).

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};
use std::sync::OnceLock;

/// The server's metric families.
pub struct Metrics {
    pub registry: Registry,
    /// `pandastack_http_request_duration_seconds{method,route,status}`.
    pub http: HistogramVec,
    /// `pandastack_lifecycle_duration_seconds{op}`: create, restore, fork, snapshot, pause,
    /// resume, hibernate, wake, kill.
    pub lifecycle: HistogramVec,
    /// `pandastack_sandboxes_created_total{template,boot_mode}`.
    pub created: IntCounterVec,
    /// `pandastack_engine_failures_total{op}`: runsc operations that failed.
    pub engine_failures: IntCounterVec,
    /// `pandastack_sandboxes{state}`.
    pub sandboxes: IntGaugeVec,
    /// `pandastack_pool_claims_total{template,result}`: creates that found a warm-pool
    /// instance (`hit`) or had to restore (`miss`).
    pub pool_claims: IntCounterVec,
    /// `pandastack_pool_instances{template,state}`: pooled instances `ready` and restores
    /// `in_flight` (computed at scrape time).
    pub pool: IntGaugeVec,
    /// `pandastack_restore_targets`: containers made in advance for restores (issue 11).
    pub restore_targets: prometheus::IntGauge,
    /// `pandastack_databases{state}`.
    pub databases: IntGaugeVec,
    /// `pandastack_database_storage_used_bytes{database}`: bytes in use on its storage.
    pub database_storage: IntGaugeVec,
    /// `pandastack_database_connections{database}`: open connections through the front end.
    pub database_connections: IntGaugeVec,
}

const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

fn build() -> Result<Metrics, prometheus::Error> {
    let registry = Registry::new();
    let http = HistogramVec::new(
        HistogramOpts::new(
            "pandastack_http_request_duration_seconds",
            "API request latency by route",
        )
        .buckets(BUCKETS.to_vec()),
        &["method", "route", "status"],
    )?;
    let lifecycle = HistogramVec::new(
        HistogramOpts::new(
            "pandastack_lifecycle_duration_seconds",
            "Sandbox lifecycle operation latency",
        )
        .buckets(BUCKETS.to_vec()),
        &["op"],
    )?;
    let created = IntCounterVec::new(
        Opts::new("pandastack_sandboxes_created_total", "Sandboxes created"),
        &["template", "boot_mode"],
    )?;
    let engine_failures = IntCounterVec::new(
        Opts::new(
            "pandastack_engine_failures_total",
            "Failed runsc operations",
        ),
        &["op"],
    )?;
    let sandboxes = IntGaugeVec::new(
        Opts::new("pandastack_sandboxes", "Sandboxes by state"),
        &["state"],
    )?;
    let databases = IntGaugeVec::new(
        Opts::new("pandastack_databases", "Databases by state"),
        &["state"],
    )?;
    let database_storage = IntGaugeVec::new(
        Opts::new(
            "pandastack_database_storage_used_bytes",
            "Bytes in use on each database's storage",
        ),
        &["database"],
    )?;
    let database_connections = IntGaugeVec::new(
        Opts::new(
            "pandastack_database_connections",
            "Open connections of each database",
        ),
        &["database"],
    )?;
    registry.register(Box::new(databases.clone()))?;
    registry.register(Box::new(database_storage.clone()))?;
    registry.register(Box::new(database_connections.clone()))?;
    registry.register(Box::new(http.clone()))?;
    registry.register(Box::new(lifecycle.clone()))?;
    registry.register(Box::new(created.clone()))?;
    registry.register(Box::new(engine_failures.clone()))?;
    let pool_claims = IntCounterVec::new(
        Opts::new("pandastack_pool_claims_total", "Warm-pool claims by result"),
        &["template", "result"],
    )?;
    let pool = IntGaugeVec::new(
        Opts::new("pandastack_pool_instances", "Warm-pool instances"),
        &["template", "state"],
    )?;
    registry.register(Box::new(sandboxes.clone()))?;
    registry.register(Box::new(pool_claims.clone()))?;
    let restore_targets = prometheus::IntGauge::new(
        "pandastack_restore_targets",
        "Containers made in advance for restores (ready or being made)",
    )?;
    registry.register(Box::new(pool.clone()))?;
    registry.register(Box::new(restore_targets.clone()))?;
    Ok(Metrics {
        restore_targets,
        pool_claims,
        pool,
        registry,
        http,
        lifecycle,
        created,
        engine_failures,
        sandboxes,
        databases,
        database_storage,
        database_connections,
    })
}

/// The process-wide metrics.
///
/// # Panics
/// Never in practice: registration only fails on duplicate names, which are fixed above.
pub fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| build().expect("metric names are unique"))
}

/// Records the duration of a lifecycle operation that started at `started`.
pub fn observe(op: &str, started: std::time::Instant) {
    metrics()
        .lifecycle
        .with_label_values(&[op])
        .observe(started.elapsed().as_secs_f64());
}

/// Counts a failed engine operation.
pub fn engine_failed(op: &str) {
    metrics().engine_failures.with_label_values(&[op]).inc();
}
