//! Snapshots (contract §2.2, §2.7): `POST .../snapshots` takes one (Py reads `id`, TS the whole
//! object), `GET /v1/snapshots[?sandbox_id=]` lists them as `{"snapshots": [...]}`,
//! `GET/DELETE /v1/snapshots/{id}`.

use super::rfc3339;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::sandbox_id;
use crate::AppState;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use pandastack_store::SnapshotRow;
use serde::Deserialize;
use serde_json::{json, Value};

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/sandboxes/:id/snapshots",
            post(create).get(list_for_sandbox),
        )
        .route("/snapshots", get(list))
        .route("/snapshots/:snap", get(get_one).delete(delete))
}

/// The wire form: the documented keys plus `snapshot_id` (Py's fallback key).
pub fn wire(s: &SnapshotRow) -> Value {
    json!({
        "id": s.id,
        "snapshot_id": s.id,
        "sandbox_id": s.sandbox_id,
        "template": s.template,
        "template_generation": s.template_generation,
        "size_bytes": s.size_bytes,
        "created_at": rfc3339(s.created_at),
        "kernels": s.kernels,
    })
}

async fn create(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let live = st
        .host
        .get_awake(&caller.workspace_id, &sandbox_id(&id)?)
        .await?;
    let t = std::time::Instant::now();
    let snap = st.host.snapshot(&live).await?;
    crate::metrics::observe("snapshot", t);
    Ok((StatusCode::CREATED, Json(wire(&snap))))
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    sandbox_id: Option<String>,
}

async fn list(
    State(st): State<AppState>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let rows = st
        .host
        .store
        .list_snapshots(&caller.workspace_id, q.sandbox_id.as_deref())?;
    Ok(Json(
        json!({"snapshots": rows.iter().map(wire).collect::<Vec<_>>()}),
    ))
}

async fn list_for_sandbox(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = sandbox_id(&id)?;
    let rows = st
        .host
        .store
        .list_snapshots(&caller.workspace_id, Some(&id))?;
    Ok(Json(
        json!({"snapshots": rows.iter().map(wire).collect::<Vec<_>>()}),
    ))
}

async fn get_one(
    State(st): State<AppState>,
    caller: Caller,
    Path(snap): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let row = st
        .host
        .store
        .snapshot(&caller.workspace_id, &snap)?
        .ok_or_else(|| ApiError::NotFound(format!("snapshot {snap} not found")))?;
    Ok(Json(wire(&row)))
}

async fn delete(
    State(st): State<AppState>,
    caller: Caller,
    Path(snap): Path<String>,
) -> Result<StatusCode, ApiError> {
    st.host.delete_snapshot(&caller.workspace_id, &snap)?;
    Ok(StatusCode::NO_CONTENT)
}
