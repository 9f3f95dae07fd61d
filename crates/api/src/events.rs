//! Lifecycle events (seed 003 "events stream").

use serde::{Deserialize, Serialize};

/// One state transition of a sandbox: an element of `GET /v1/sandboxes/{id}/events` and the
/// data of each `event: transition` of the `GET /v1/events` stream (whose SSE `id:` is `seq`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    /// Increasing per server; resume a stream after it with `?since=` or `Last-Event-ID`.
    pub seq: i64,
    pub sandbox_id: String,
    /// State before, e.g. `running` (`creating` for a new sandbox).
    pub from: String,
    /// State after, e.g. `paused`.
    pub to: String,
    /// What caused it: `api`, `ttl`, `idle`, `health`, `parent`, `recovery`, ...
    pub cause: String,
    /// RFC 3339 with milliseconds.
    pub at: String,
    /// The same time as Unix ms.
    pub at_ms: i64,
}
