//! Snapshots (contract §2.2 `snapshot()`, §2.7 `client.snapshots`).

use crate::KernelInfo;
use serde::{Deserialize, Serialize};

/// A snapshot: the reply of `POST /v1/sandboxes/{id}/snapshots` (201) and of
/// `GET /v1/snapshots/{id}`. The Python SDK reads `id` (then `snapshot_id`), the TypeScript SDK
/// keeps the whole object (contract §2.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Snapshot {
    /// `snap-` + 32 hex digits.
    pub id: String,
    /// The same id again: the Python SDK's fallback key (contract §2.2).
    pub snapshot_id: String,
    /// The sandbox it was taken of (which may since have been deleted).
    pub sandbox_id: String,
    pub template: String,
    /// Template generation at capture; restoring after a re-bake is a 409 (seed 000 "Gotchas").
    pub template_generation: i64,
    /// Bytes on disk (uncompressed checkpoint image).
    pub size_bytes: i64,
    /// RFC 3339.
    pub created_at: String,
    /// Kernels live at capture time; a context opened after restore adopts one (seed 000 §2).
    pub kernels: Vec<KernelInfo>,
    /// Volumes the sandbox held at capture time. Their content is not in the snapshot: a
    /// restore attaches them again (issue 9).
    #[serde(default)]
    pub volumes: Vec<crate::SandboxVolume>,
    /// Whether the image is in the cluster's object storage (issue 12 point 6), so that any
    /// host can restore it: false without `--object-store`, and until the background upload
    /// after the capture completes (it is retried until it does).
    #[serde(default)]
    pub uploaded: bool,
}

/// `GET /v1/snapshots[?sandbox_id=]` and `GET /v1/sandboxes/{id}/snapshots`: the envelope both
/// SDKs read (`items` is not read, contract §2.7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnapshotList {
    pub snapshots: Vec<Snapshot>,
}
