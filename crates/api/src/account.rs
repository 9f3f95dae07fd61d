//! The caller and per-sandbox resource figures.

use serde::{Deserialize, Serialize};

/// `GET /v1/me`: the workspace the key belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Me {
    /// `ws-` + 32 hex digits.
    pub workspace_id: String,
    /// The public prefix of the key used (`pds_` + 8 characters).
    pub key_prefix: String,
}

/// `GET /v1/sandboxes/{id}/metrics` (seed 003 "health monitor"): figures from the sandbox's
/// cgroup; zero while it has no instance (hibernated).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxMetrics {
    pub sandbox_id: String,
    pub status: String,
    /// Memory charged to the sandbox, bytes.
    pub memory_bytes: u64,
    /// The same figure under the name E2B-style clients read, bytes.
    pub rss_bytes: u64,
    /// CPU time used since boot, ns.
    pub cpu_ns: u64,
    /// CPU use over the health monitor's last interval, percent of one core.
    pub cpu_percent: f64,
}
