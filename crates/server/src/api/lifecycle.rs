//! `POST .../pause`, `.../resume`, `.../hibernate`, `.../wake` (contract §2.2, seed 003). The
//! SDKs send no body (TS: an empty text/plain one) and ignore the reply; we answer the
//! sandbox's JSON after the transition.

use super::openapi::{Errors, HostStorage};
use super::sandbox_json;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::sandbox_id;
use crate::AppState;
use axum::extract::{Path, State};
use axum::Json;
use pandastack_api::Sandbox;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(pause))
        .routes(routes!(resume))
        .routes(routes!(hibernate))
        .routes(routes!(wake))
}

/// running -> paused: no CPU, memory kept (seed 003). No body.
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/pause",
    tag = "lifecycle",
    operation_id = "pause_sandbox",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    responses((status = 200, description = "The sandbox after the transition.", body = Sandbox), Errors)
)]
async fn pause(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Sandbox>, ApiError> {
    let live = st.host.get(&caller.workspace_id, &sandbox_id(&id)?)?;
    let t = std::time::Instant::now();
    let (host, l) = (st.host.clone(), live.clone());
    super::detached(async move { host.pause(&l).await }).await?;
    crate::metrics::observe("pause", t);
    Ok(Json(sandbox_json(&live.snapshot_row().await)))
}

/// paused -> running.
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/resume",
    tag = "lifecycle",
    operation_id = "resume_sandbox",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    responses((status = 200, description = "The sandbox after the transition.", body = Sandbox), Errors)
)]
async fn resume(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Sandbox>, ApiError> {
    let live = st.host.get(&caller.workspace_id, &sandbox_id(&id)?)?;
    let t = std::time::Instant::now();
    let (host, l) = (st.host.clone(), live.clone());
    super::detached(async move { host.resume(&l).await }).await?;
    crate::metrics::observe("resume", t);
    Ok(Json(sandbox_json(&live.snapshot_row().await)))
}

/// running | paused -> hibernated: memory written to disk, no process left (seed 003).
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/hibernate",
    tag = "lifecycle",
    operation_id = "hibernate_sandbox",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    responses((status = 200, description = "The sandbox after the transition.", body = Sandbox), HostStorage, Errors)
)]
async fn hibernate(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Sandbox>, ApiError> {
    let live = st.host.get(&caller.workspace_id, &sandbox_id(&id)?)?;
    let t = std::time::Instant::now();
    let (host, l) = (st.host.clone(), live.clone());
    super::detached(async move { host.hibernate(&l, "api").await }).await?;
    crate::metrics::observe("hibernate", t);
    Ok(Json(sandbox_json(&live.snapshot_row().await)))
}

/// hibernated -> running (any other request to the sandbox wakes it too).
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/wake",
    tag = "lifecycle",
    operation_id = "wake_sandbox",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    responses((status = 200, description = "The sandbox after the transition.", body = Sandbox), Errors)
)]
async fn wake(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Sandbox>, ApiError> {
    let live = st.host.get(&caller.workspace_id, &sandbox_id(&id)?)?;
    let t = std::time::Instant::now();
    let (host, l) = (st.host.clone(), live.clone());
    super::detached(async move { host.wake(&l, "api").await }).await?;
    crate::metrics::observe("wake", t);
    Ok(Json(sandbox_json(&live.snapshot_row().await)))
}
