//! The REST API under `/v1`: one module per resource, each with its own `router()`, merged in
//! [`crate::app`]. Handlers parse input into typed values, call the host agent, and map the
//! result to the wire types of `pandastack-api`.

pub mod events;
pub mod exec;
pub mod fork;
pub mod fs;
pub mod lifecycle;
pub mod logs;
pub mod metrics;
pub mod repl;
pub mod sandboxes;
pub mod snapshots;
pub mod templates;
pub mod tokens;

use pandastack_store::SandboxRow;

/// RFC 3339 (UTC, seconds) of a Unix-ms time.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The wire form of a sandbox row (contract §7 "Sandbox JSON": integer cpu and memory_mb,
/// metadata echoed; envs never shown).
pub fn sandbox_json(r: &SandboxRow) -> pandastack_api::Sandbox {
    pandastack_api::Sandbox {
        id: r.id.clone(),
        template: r.template.clone(),
        status: r.status.clone(),
        cpu: r.cpu,
        memory_mb: r.memory_mb,
        metadata: r.metadata.clone(),
        guest_ip: None,
        boot_ms: r.boot_ms,
        boot_mode: r.boot_mode.clone(),
        created_at: rfc3339(r.created_at),
        persistent: r.persistent,
        ttl_seconds: r.ttl_seconds,
        from_snapshot: r.from_snapshot.clone(),
    }
}
