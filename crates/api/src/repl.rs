//! Code contexts and the kernels behind them (contract §2.2, §2.3).

use serde::{Deserialize, Serialize};

/// A live kernel in a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KernelInfo {
    pub kernel_id: String,
    /// `python`.
    pub language: String,
    /// Process id inside the sandbox (0 when not known, e.g. in a stored snapshot).
    #[serde(default)]
    pub pid: u32,
    /// Unix ms of the end of its last run (or of its start).
    pub last_used_ms: u64,
}

/// An open code context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReplSession {
    /// `ctx-` + 32 hex digits.
    pub id: String,
    pub kernel_id: String,
    pub language: String,
    /// RFC 3339.
    pub created_at: String,
}

/// A live kernel as `GET .../repl/sessions` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReplKernel {
    pub kernel_id: String,
    pub language: String,
    pub pid: u32,
    /// Unix ms of the end of its last run (or of its start).
    pub last_used_ms: u64,
    /// True when an open context is bound to it.
    pub attached: bool,
}

/// `GET /v1/sandboxes/{id}/repl/sessions`: open contexts and live kernels (neither published
/// SDK calls it; contract §2.3 "no call lists sessions").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReplSessions {
    pub sessions: Vec<ReplSession>,
    pub kernels: Vec<ReplKernel>,
}
