//! `POST .../fork`, `.../fork-tree`, `.../promote` (contract §2.1). fork answers the child's
//! sandbox object (both SDKs accept one with `id`); fork-tree a bare array of children.

use super::openapi::{BodyTooLarge, Errors, HostStorage};
use super::sandbox_json;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{sandbox_id, JsonBody, RequiredJson};
use crate::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use pandastack_api::{ForkRequest, ForkTreeRequest, PromoteRequest, Promotion, Sandbox};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(fork))
        .routes(routes!(fork_tree))
        .routes(routes!(promote))
}

/// Fork a running sandbox into one copy-on-write child carrying `parent_id` and `fork_tree_id`
/// in its metadata (seed 000 §3); the parent keeps running. The body may be empty.
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/fork",
    tag = "fork",
    operation_id = "fork_sandbox",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    request_body(content = Option<ForkRequest>),
    responses((status = 201, description = "The child.", body = Sandbox), BodyTooLarge, HostStorage, Errors)
)]
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
    let detach = b.volumes == Some(pandastack_api::ForkVolumes::Detach);
    let mut children =
        super::detached(async move { host.fork(&live, 1, metadata, detach).await }).await?;
    crate::metrics::observe("fork", t);
    let child = children
        .pop()
        .ok_or_else(|| ApiError::internal("fork", "no child"))?;
    Ok((
        StatusCode::CREATED,
        Json(sandbox_json(&child.snapshot_row().await)),
    ))
}

/// Fork into `count` children from one capture (contract §2.1; a bare array of children).
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/fork-tree",
    tag = "fork",
    operation_id = "fork_tree",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    request_body(content = ForkTreeRequest),
    responses((status = 201, description = "The children.", body = Vec<Sandbox>), BodyTooLarge, HostStorage, Errors)
)]
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
    let detach = b.volumes == Some(pandastack_api::ForkVolumes::Detach);
    let children =
        super::detached(async move { host.fork(&live, b.count, metadata, detach).await }).await?;
    crate::metrics::observe("fork_tree", t);
    let mut out = Vec::with_capacity(children.len());
    for c in children {
        out.push(sandbox_json(&c.snapshot_row().await));
    }
    Ok((StatusCode::CREATED, Json(out)))
}

/// Make a fork child standalone (it no longer dies with its parent), optionally deleting its
/// siblings.
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/promote",
    tag = "fork",
    operation_id = "promote_sandbox",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    request_body(content = Option<PromoteRequest>),
    responses((status = 200, description = "What was done.", body = Promotion), BodyTooLarge, Errors)
)]
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
