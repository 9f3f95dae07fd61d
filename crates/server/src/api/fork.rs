//! `POST .../fork`, `.../fork-tree`, `.../promote` (contract §2.1). fork answers the child's
//! sandbox object (both SDKs accept one with `id`); fork-tree a bare array of children.

use super::sandbox_json;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{sandbox_id, JsonBody, RequiredJson};
use crate::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use pandastack_api::{ForkRequest, ForkTreeRequest, PromoteRequest, Promotion, Sandbox};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/sandboxes/:id/fork", post(fork))
        .route("/sandboxes/:id/fork-tree", post(fork_tree))
        .route("/sandboxes/:id/promote", post(promote))
}

async fn fork(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<ForkRequest>,
) -> Result<(StatusCode, Json<Sandbox>), ApiError> {
    crate::extract::metadata(b.metadata.as_ref())?;
    let live = st
        .host
        .get_awake(&caller.workspace_id, &sandbox_id(&id)?)
        .await?;
    let t = std::time::Instant::now();
    let host = st.host.clone();
    let metadata = b.metadata.unwrap_or_default();
    let mut children = super::detached(async move { host.fork(&live, 1, metadata).await }).await?;
    crate::metrics::observe("fork", t);
    let child = children
        .pop()
        .ok_or_else(|| ApiError::internal("fork", "no child"))?;
    Ok((
        StatusCode::CREATED,
        Json(sandbox_json(&child.snapshot_row().await)),
    ))
}

async fn fork_tree(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    RequiredJson(b): RequiredJson<ForkTreeRequest>,
) -> Result<(StatusCode, Json<Vec<Sandbox>>), ApiError> {
    crate::extract::metadata(b.metadata.as_ref())?;
    let live = st
        .host
        .get_awake(&caller.workspace_id, &sandbox_id(&id)?)
        .await?;
    let t = std::time::Instant::now();
    let host = st.host.clone();
    let metadata = b.metadata.unwrap_or_default();
    let children =
        super::detached(async move { host.fork(&live, b.count, metadata).await }).await?;
    crate::metrics::observe("fork_tree", t);
    let mut out = Vec::with_capacity(children.len());
    for c in children {
        out.push(sandbox_json(&c.snapshot_row().await));
    }
    Ok((StatusCode::CREATED, Json(out)))
}

async fn promote(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<PromoteRequest>,
) -> Result<Json<Promotion>, ApiError> {
    let live = st.host.get(&caller.workspace_id, &sandbox_id(&id)?)?;
    Ok(Json(
        st.host
            .promote(&live, b.tree_id, b.cleanup_siblings)
            .await?,
    ))
}
