//! Snapshots (contract §2.2, §2.7): `POST .../snapshots` takes one (Py reads `id`, TS the whole
//! object), `GET /v1/snapshots[?sandbox_id=]` lists them as `{"snapshots": [...]}`,
//! `GET/DELETE /v1/snapshots/{id}`.

use super::openapi::{Errors, HostStorage};
use super::rfc3339;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::sandbox_id;
use crate::extract::Query;
use crate::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use pandastack_api::{KernelInfo, Snapshot, SnapshotList};
use pandastack_store::SnapshotRow;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list_for_sandbox))
        .routes(routes!(list))
        .routes(routes!(get_one, delete))
}

/// The wire form: the documented keys plus `snapshot_id` (Py's fallback key) and whether the
/// image is uploaded (`uploaded`, issue 12).
pub fn wire(s: &SnapshotRow, uploaded: bool) -> Snapshot {
    // Rows made before kernels were recorded hold `null`.
    let kernels: Vec<KernelInfo> = serde_json::from_value(s.kernels.clone()).unwrap_or_default();
    Snapshot {
        id: s.id.clone(),
        snapshot_id: s.id.clone(),
        sandbox_id: s.sandbox_id.clone(),
        template: s.template.clone(),
        template_generation: s.template_generation,
        size_bytes: s.size_bytes,
        created_at: rfc3339(s.created_at),
        kernels,
        volumes: crate::host::volumes::sandbox_volumes(&s.volumes),
        uploaded,
    }
}

async fn list_of(host: &crate::host::Host, rows: &[SnapshotRow]) -> SnapshotList {
    let mut snapshots = Vec::with_capacity(rows.len());
    for r in rows {
        snapshots.push(wire(r, host.uploaded(&r.id).await));
    }
    SnapshotList { snapshots }
}

/// Capture the sandbox (memory, processes, files) into a snapshot that outlives it (seed 000
/// §2). No body. A paused sandbox is thawed for the capture.
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/snapshots",
    tag = "snapshots",
    operation_id = "create_snapshot",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    responses((status = 201, description = "The snapshot.", body = Snapshot), HostStorage, Errors)
)]
async fn create(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Snapshot>), ApiError> {
    let live = st
        .host
        .get_awake(&caller.workspace_id, &sandbox_id(&id)?)
        .await?;
    let t = std::time::Instant::now();
    let host = st.host.clone();
    let snap = super::detached(async move { host.snapshot(&live).await }).await?;
    crate::metrics::observe("snapshot", t);
    Ok((StatusCode::CREATED, Json(wire(&snap, false))))
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    sandbox_id: Option<String>,
}

/// The workspace's snapshots (contract §2.7: `{"snapshots": [...]}`).
#[utoipa::path(
    get,
    path = "/snapshots",
    tag = "snapshots",
    operation_id = "list_snapshots",
    params(("sandbox_id" = Option<String>, Query, description = "Only the snapshots of this sandbox.")),
    responses((status = 200, description = "The snapshots.", body = SnapshotList), Errors)
)]
async fn list(
    State(st): State<AppState>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> Result<Json<SnapshotList>, ApiError> {
    let rows = st
        .host
        .store
        .list_snapshots(&caller.workspace_id, q.sandbox_id.as_deref())
        .await?;
    Ok(Json(list_of(&st.host, &rows).await))
}

/// One sandbox's snapshots.
#[utoipa::path(
    get,
    path = "/sandboxes/{id}/snapshots",
    tag = "snapshots",
    operation_id = "list_sandbox_snapshots",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    responses((status = 200, description = "The snapshots.", body = SnapshotList), Errors)
)]
async fn list_for_sandbox(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<SnapshotList>, ApiError> {
    let id = sandbox_id(&id)?;
    // The sandbox must be the caller's (deleted ones included: their snapshots outlive them);
    // another workspace's id is a 404, as everywhere else.
    let owned = st
        .host
        .store
        .sandbox(&id)
        .await?
        .is_some_and(|r| r.workspace_id == caller.workspace_id);
    if !owned {
        return Err(ApiError::NotFound(format!("sandbox {id} not found")));
    }
    let rows = st
        .host
        .store
        .list_snapshots(&caller.workspace_id, Some(&id))
        .await?;
    Ok(Json(list_of(&st.host, &rows).await))
}

/// One snapshot.
#[utoipa::path(
    get,
    path = "/snapshots/{snap}",
    tag = "snapshots",
    operation_id = "get_snapshot",
    params(("snap" = String, Path, description = "The snapshot id (`snap-` + 32 hex digits).")),
    responses((status = 200, description = "The snapshot.", body = Snapshot), Errors)
)]
async fn get_one(
    State(st): State<AppState>,
    caller: Caller,
    Path(snap): Path<String>,
) -> Result<Json<Snapshot>, ApiError> {
    let row = st
        .host
        .store
        .snapshot(&caller.workspace_id, &snap)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("snapshot {snap} not found")))?;
    let uploaded = st.host.uploaded(&row.id).await;
    Ok(Json(wire(&row, uploaded)))
}

/// Delete a snapshot and its image.
#[utoipa::path(
    delete,
    path = "/snapshots/{snap}",
    tag = "snapshots",
    operation_id = "delete_snapshot",
    params(("snap" = String, Path, description = "The snapshot id (`snap-` + 32 hex digits).")),
    responses((status = 204, description = "Deleted."), Errors)
)]
async fn delete(
    State(st): State<AppState>,
    caller: Caller,
    Path(snap): Path<String>,
) -> Result<StatusCode, ApiError> {
    st.host.delete_snapshot(&caller.workspace_id, &snap).await?;
    Ok(StatusCode::NO_CONTENT)
}
