//! The caller and per-sandbox resource figures.

use serde::{Deserialize, Serialize};

/// `GET /v1/me`: the workspace the key belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Me {
    /// `ws-` + 32 hex digits.
    pub workspace_id: String,
    /// The public prefix of the key used (`pds_` + 8 characters).
    pub key_prefix: String,
}

/// `GET /v1/sandboxes/{id}/metrics` (seed 003 "health monitor"): figures from the sandbox's
/// cgroup; zero while it has no instance (hibernated).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// Bytes the sandbox has written to its disk (root and `/tmp`), when it has one running.
    /// `df` inside the sandbox cannot show this (gVisor 20240729 reports its overlay as
    /// unbounded); this and ENOSPC at `disk_limit_bytes` are the truth.
    #[serde(default)]
    pub disk_used_bytes: Option<u64>,
    /// Size of that disk, bytes.
    #[serde(default)]
    pub disk_limit_bytes: Option<u64>,
}
