//! The hosts of the cluster (issue 12 point 2): `GET /v1/hosts` lists every host with its
//! state (`active`, `draining`, or `down` when its heartbeat is older than 20 s), its last
//! heartbeat and the load it reported. Operators only: a key of the first workspace (the one
//! the first server created, whose key is in its `admin.env`); 403 for any other.
//! `POST /v1/hosts/{name}/drain` moves every sandbox off a host, live, and marks it
//! `draining` (issue 12 point 8, `cluster::drain`); `POST /v1/hosts/{name}/activate` lets
//! new sandboxes land on it again.

use crate::auth::Caller;
use crate::cluster::drain::{Adoption, DrainReport, ADOPTION_PATH};
use crate::cluster::HostView;
use crate::error::ApiError;
use crate::extract::RequiredJson;
use crate::AppState;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use pandastack_api::Sandbox;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        // Host to host only (node token), so not in the OpenAPI document.
        .route(ADOPTION_PATH, axum::routing::post(adopt))
        .routes(routes!(list))
        .routes(routes!(drain))
        .routes(routes!(activate))
}

/// 403 for a caller that is not an operator.
#[allow(dead_code)] // a description, never constructed
#[derive(utoipa::IntoResponses)]
enum OperatorOnly {
    /// The key is not one of the first workspace's.
    #[response(status = 403)]
    Forbidden(pandastack_api::ErrorBody),
}

/// Refuses a caller that is not the operator's (403).
///
/// # Errors
/// 403 for a key of any workspace but the first; store errors.
pub async fn require_operator(st: &AppState, caller: &Caller) -> Result<(), ApiError> {
    match st.host.store.first_workspace_id().await? {
        Some(ws) if ws == caller.workspace_id => Ok(()),
        _ => Err(ApiError::Forbidden(
            "this needs an operator key (a key of the first workspace)".into(),
        )),
    }
}

/// The hosts of the cluster with their state and load (operator key only).
#[utoipa::path(
    get,
    path = "/hosts",
    tag = "hosts",
    operation_id = "list_hosts",
    responses((status = 200, description = "Every host, this one included.", body = Vec<HostView>), OperatorOnly, super::openapi::Errors)
)]
async fn list(State(st): State<AppState>, caller: Caller) -> Result<Json<Vec<HostView>>, ApiError> {
    require_operator(&st, &caller).await?;
    let hosts = st.cluster.hosts().await?;
    Ok(Json(hosts.iter().map(HostView::of).collect()))
}

/// `POST /v1/hosts/{name}/<action>` answered by host `name`: `Ok(None)` when it is this one,
/// else its answer (relayed with the caller's key).
///
/// # Errors
/// 404 for a host the cluster does not know; 503 when it is down; relay errors.
async fn on_host(
    st: &AppState,
    name: &str,
    action: &str,
    headers: &HeaderMap,
) -> Result<Option<Response>, ApiError> {
    if name == st.cluster.cfg.host_name {
        return Ok(None);
    }
    // Known first: an unknown name (any bytes a client sends) is a 404, never part of a URI.
    let h = host_named(st, name).await?;
    if crate::cluster::is_down(&h) {
        return Err(ApiError::Busy {
            message: format!("host {name} is down"),
            retry_after_s: crate::host::RETRY_AFTER_S,
        });
    }
    let path = format!("/v1/hosts/{name}/{action}");
    let answer =
        crate::cluster::forward::post_to_host::<()>(&st.cluster, &h, &path, None, Some(headers))
            .await?;
    Ok(Some(answer))
}

/// The row of host `name`.
///
/// # Errors
/// 404 for a host the cluster does not know; store errors.
async fn host_named(st: &AppState, name: &str) -> Result<pandastack_store::HostRow, ApiError> {
    st.cluster
        .hosts()
        .await?
        .into_iter()
        .find(|h| h.name == name)
        .ok_or_else(|| ApiError::NotFound(format!("host {name} not found")))
}

/// Move every sandbox off host `name`, live, and mark it `draining` (operator key only; a
/// cluster with an object store). Each running, paused or hibernated sandbox is checkpointed,
/// uploaded and taken over by another host under the same id, with its kernels' state and
/// files, in the state it had; one holding volumes (they stay on their host), or for which no
/// host has room, stays, and `left` says why. The drained host takes no new sandboxes until
/// `activate`. Answers when every sandbox has been tried (seconds per sandbox).
#[utoipa::path(
    post,
    path = "/hosts/{name}/drain",
    tag = "hosts",
    operation_id = "drain_host",
    params(("name" = String, Path, description = "The host's name (`GET /v1/hosts`).")),
    responses((status = 200, description = "What moved and what stayed.", body = DrainReport), OperatorOnly, super::openapi::Errors)
)]
async fn drain(
    State(st): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    require_operator(&st, &caller).await?;
    if let Some(answer) = on_host(&st, &name, "drain", &headers).await? {
        return Ok(answer);
    }
    let state = st.clone();
    let report =
        super::detached(async move { crate::cluster::drain::drain_here(&state).await }).await?;
    Ok(Json(report).into_response())
}

/// Let new sandboxes land on host `name` again after a drain (operator key only).
#[utoipa::path(
    post,
    path = "/hosts/{name}/activate",
    tag = "hosts",
    operation_id = "activate_host",
    params(("name" = String, Path, description = "The host's name (`GET /v1/hosts`).")),
    responses((status = 200, description = "The host, `active` again.", body = HostView), OperatorOnly, super::openapi::Errors)
)]
async fn activate(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<HostView>, ApiError> {
    require_operator(&st, &caller).await?;
    // 404 ("host NAME not found") when no row has that name.
    st.host.store.set_host_state(&name, "active").await?;
    Ok(Json(HostView::of(&host_named(&st, &name).await?)))
}

/// Host to host: takes over a sandbox of a draining host (`cluster::drain`).
async fn adopt(
    State(st): State<AppState>,
    headers: HeaderMap,
    RequiredJson(a): RequiredJson<Adoption>,
) -> Result<Json<Sandbox>, ApiError> {
    if !st.cluster.is_node(&headers) {
        return Err(ApiError::Forbidden("host-to-host route".into()));
    }
    let state = st.clone();
    let live =
        super::detached(async move { crate::cluster::drain::adopt_here(&state, a).await }).await?;
    Ok(Json(super::sandbox_json(&live.snapshot_row().await)))
}
