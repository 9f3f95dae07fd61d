//! `POST .../pause`, `.../resume`, `.../hibernate`, `.../wake` (contract §2.2, seed 003). The
//! SDKs send no body (TS: an empty text/plain one) and ignore the reply; we answer the
//! sandbox's JSON after the transition.

use super::sandbox_json;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::sandbox_id;
use crate::AppState;
use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Json, Router};
use pandastack_api::Sandbox;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/sandboxes/:id/pause", post(pause))
        .route("/sandboxes/:id/resume", post(resume))
        .route("/sandboxes/:id/hibernate", post(hibernate))
        .route("/sandboxes/:id/wake", post(wake))
}

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
