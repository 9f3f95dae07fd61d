//! `POST/GET /v1/volumes`, `GET/PATCH/DELETE /v1/volumes/{name}` (contract §2.6; seed 001
//! §3). Volumes are addressed by name within the caller's workspace; the list is a bare array
//! (both SDKs also accept `{"items"}`).
//!
//! In a cluster (issue 12) a volume belongs to the host whose disk holds its image: its holds
//! and its space are known there, so a request for one volume is relayed to that host
//! ([`on_its_host`]).

use super::openapi::{BodyTooLarge, Errors, HostStorage};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::RequiredJson;
use crate::AppState;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pandastack_api::{CreateVolume, ResizeVolume, Volume};
use pandastack_store::VolumeRow;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(get_one, resize, delete))
}

/// Create an empty volume (seed 001 §3: `client.volumes.create(name=..., size_mb=8192)`): a
/// sparse ext4 image with a journal; a sandbox attaches it with `volumes` in its create and
/// finds it at `/mnt/{name}`. 409 for a name the workspace has; 429 past the workspace's volume
/// quotas (`--workspace-max-volumes`, `--workspace-max-volume-gb`).
#[utoipa::path(
    post,
    path = "/volumes",
    tag = "volumes",
    operation_id = "create_volume",
    request_body = CreateVolume,
    responses((status = 201, description = "Created, detached.", body = Volume), BodyTooLarge, HostStorage, Errors)
)]
async fn create(
    State(st): State<AppState>,
    caller: Caller,
    RequiredJson(b): RequiredJson<CreateVolume>,
) -> Result<(StatusCode, Json<Volume>), ApiError> {
    let host = st.host.clone();
    let row = super::detached(async move {
        host.create_volume(&caller.workspace_id, &b.name, b.size_mb)
            .await
    })
    .await?;
    Ok((StatusCode::CREATED, Json(st.host.volume_json(&row).await)))
}

/// The workspace's volumes, by name (a bare array; both SDKs also accept `{"items"}`).
#[utoipa::path(
    get,
    path = "/volumes",
    tag = "volumes",
    operation_id = "list_volumes",
    responses((status = 200, description = "The volumes.", body = Vec<Volume>), Errors)
)]
async fn list(State(st): State<AppState>, caller: Caller) -> Result<Json<Vec<Volume>>, ApiError> {
    let rows = st
        .host
        .store
        .list_volumes(Some(&caller.workspace_id))
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        out.push(st.host.volume_json(r).await);
    }
    Ok(Json(out))
}

/// One volume: its size, the space in use and the sandboxes holding it.
#[utoipa::path(
    get,
    path = "/volumes/{name}",
    tag = "volumes",
    operation_id = "get_volume",
    params(("name" = String, Path, description = "The volume's name (`[A-Za-z0-9._-]{1,64}`, not `.` or `..`).", pattern = "^([A-Za-z0-9_-][A-Za-z0-9._-]{0,63}|\\.[A-Za-z0-9_-][A-Za-z0-9._-]{0,62}|\\.\\.[A-Za-z0-9._-]{1,62})$")),
    responses((status = 200, description = "The volume.", body = Volume), Errors)
)]
async fn get_one(
    State(st): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let row = st.host.volume(&caller.workspace_id, &name).await?;
    if let Some(resp) = on_its_host(&st, &row, Method::GET, &headers, None).await? {
        return Ok(resp);
    }
    Ok(Json(st.host.volume_json(&row).await).into_response())
}

/// Grow a detached volume (seed 001: it cannot shrink); its files are kept. 400 for a smaller
/// size, 409 while a sandbox holds it.
#[utoipa::path(
    patch,
    path = "/volumes/{name}",
    tag = "volumes",
    operation_id = "resize_volume",
    params(("name" = String, Path, description = "The volume's name (`[A-Za-z0-9._-]{1,64}`, not `.` or `..`).", pattern = "^([A-Za-z0-9_-][A-Za-z0-9._-]{0,63}|\\.[A-Za-z0-9_-][A-Za-z0-9._-]{0,62}|\\.\\.[A-Za-z0-9._-]{1,62})$")),
    request_body = ResizeVolume,
    responses((status = 200, description = "The volume at its new size.", body = Volume), BodyTooLarge, HostStorage, Errors)
)]
async fn resize(
    State(st): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Path(name): Path<String>,
    RequiredJson(b): RequiredJson<ResizeVolume>,
) -> Result<Response, ApiError> {
    let row = st.host.volume(&caller.workspace_id, &name).await?;
    let body = serde_json::to_vec(&b).map_err(|e| ApiError::internal("resize body", e))?;
    if let Some(resp) = on_its_host(&st, &row, Method::PATCH, &headers, Some(body)).await? {
        return Ok(resp);
    }
    let host = st.host.clone();
    let row = super::detached(async move {
        host.resize_volume(&caller.workspace_id, &name, b.size_mb)
            .await
    })
    .await?;
    Ok(Json(st.host.volume_json(&row).await).into_response())
}

/// Delete a detached volume and its data, irreversibly (contract §2.6: refused with 409,
/// naming the sandbox, while attached).
#[utoipa::path(
    delete,
    path = "/volumes/{name}",
    tag = "volumes",
    operation_id = "delete_volume",
    params(("name" = String, Path, description = "The volume's name (`[A-Za-z0-9._-]{1,64}`, not `.` or `..`).", pattern = "^([A-Za-z0-9_-][A-Za-z0-9._-]{0,63}|\\.[A-Za-z0-9_-][A-Za-z0-9._-]{0,62}|\\.\\.[A-Za-z0-9._-]{1,62})$")),
    responses((status = 204, description = "Deleted."), Errors)
)]
async fn delete(
    State(st): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let row = st.host.volume(&caller.workspace_id, &name).await?;
    if let Some(resp) = on_its_host(&st, &row, Method::DELETE, &headers, None).await? {
        return Ok(resp);
    }
    st.host.delete_volume(&caller.workspace_id, &name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Relays a request for volume `row` to the host that holds its image, when that is another
/// host of the cluster (`None`: this host serves it). A `GET` of a volume whose host is down
/// is answered here (without its live holders and usage); anything else then answers 503.
///
/// # Errors
/// 503 when the volume's host is down (or unknown) and the request would change it; 502 when
/// it cannot be reached.
async fn on_its_host(
    st: &AppState,
    row: &VolumeRow,
    method: Method,
    headers: &HeaderMap,
    body: Option<Vec<u8>>,
) -> Result<Option<Response>, ApiError> {
    if !st.cluster.cfg.shared || row.host == st.cluster.cfg.host_name {
        return Ok(None);
    }
    let owner = st
        .cluster
        .hosts()
        .await?
        .into_iter()
        .find(|h| h.name == row.host && !crate::cluster::is_down(h));
    let Some(owner) = owner else {
        if method == Method::GET {
            return Ok(None);
        }
        return Err(ApiError::Unavailable(format!(
            "volume {} is on host {}, which is down; try again when it is back",
            row.name, row.host
        )));
    };
    let mut req = axum::http::Request::builder()
        .method(method)
        .uri(format!("/v1/volumes/{}", row.name));
    if body.is_some() {
        req = req.header(axum::http::header::CONTENT_TYPE, "application/json");
    }
    let mut req = req
        .body(axum::body::Body::from(body.unwrap_or_default()))
        .map_err(|e| ApiError::internal("volume request", e))?;
    if let Some(auth) = headers.get(axum::http::header::AUTHORIZATION) {
        req.headers_mut()
            .insert(axum::http::header::AUTHORIZATION, auth.clone());
    }
    crate::cluster::forward::to_host(&st.cluster, &owner, req, ())
        .await
        .map(Some)
}
