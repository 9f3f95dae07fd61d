//! `POST .../fork`, `.../fork-tree`, `.../promote` (contract §2.1). fork answers the child's
//! sandbox object (both SDKs accept one with `id`); fork-tree a bare array of children.

use super::openapi::{BodyTooLarge, Errors, HostStorage};
use super::sandbox_json;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{sandbox_id, JsonBody, RequiredJson};
use crate::host::{ForkTransfer, Live};
use crate::AppState;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pandastack_api::{ForkRequest, ForkTreeRequest, PromoteRequest, Promotion, Sandbox};
use pandastack_store::HostRow;
use std::sync::Arc;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        // Host to host only (node token), so not in the OpenAPI document.
        .route(TRANSFER_PATH, axum::routing::post(restore_transfer))
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
    headers: HeaderMap,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<ForkRequest>,
) -> Result<Response, ApiError> {
    crate::extract::metadata(b.metadata.as_ref())?;
    let live = st
        .host
        .get_awake(&caller.workspace_id, &sandbox_id(&id)?)
        .await?;
    let t = std::time::Instant::now();
    let metadata = b.metadata.unwrap_or_default();
    if let Some(target) = hinted_host(&st, b.host.as_deref()).await? {
        return fork_elsewhere(&st, &headers, live, metadata, target, None).await;
    }
    let host = st.host.clone();
    let detach = b.volumes == Some(pandastack_api::ForkVolumes::Detach);
    let (parent, md) = (live.clone(), metadata.clone());
    let forked = super::detached(async move { host.fork(&parent, 1, md, detach).await }).await;
    let mut children = match forked {
        // Seed 000 / issue 12 point 4: the parent's host is full, so the child goes to
        // another host through object storage.
        Err(ApiError::Busy {
            message,
            retry_after_s,
        }) if b.host.is_none() && st.cluster.cfg.shared && st.host.objects().is_some() => {
            match roomy_host(&st, &live, 1).await? {
                Some((target, claim)) => {
                    let resp = fork_elsewhere(&st, &headers, live, metadata, target, None).await;
                    return answered(resp, claim);
                }
                None => {
                    return Err(ApiError::Busy {
                        message,
                        retry_after_s,
                    })
                }
            }
        }
        other => other?,
    };
    crate::metrics::observe("fork", t);
    let child = children
        .pop()
        .ok_or_else(|| ApiError::internal("fork", "no child"))?;
    Ok((
        StatusCode::CREATED,
        Json(sandbox_json(&child.snapshot_row().await)),
    )
        .into_response())
}

/// The internal path of the second half of a fork onto another host (under `/v1`).
const TRANSFER_PATH: &str = "/internal/fork-transfers";

/// The host a fork's `host` hint names when it is not this one.
///
/// # Errors
/// 400 for a host the cluster does not know (or any other name on a single host); 503 when
/// it is down or draining.
async fn hinted_host(st: &AppState, hint: Option<&str>) -> Result<Option<HostRow>, ApiError> {
    let Some(name) = hint.filter(|h| *h != st.cluster.cfg.host_name) else {
        return Ok(None);
    };
    if !st.cluster.cfg.shared {
        return Err(ApiError::BadRequest(format!(
            "host: no host named '{name}' (this server is the only host)"
        )));
    }
    let hosts = st.cluster.hosts().await?;
    let h = hosts
        .into_iter()
        .find(|h| h.name == name)
        .ok_or_else(|| ApiError::BadRequest(format!("host: no host named '{name}'")))?;
    if crate::cluster::is_down(&h) || h.state != "active" {
        return Err(ApiError::Busy {
            message: format!("host {name} is down or draining; retry later"),
            retry_after_s: crate::host::RETRY_AFTER_S,
        });
    }
    Ok(Some(h))
}

/// Another host with room for `count` children of `parent` (the scheduler's choice, asked
/// for their memory together), if any.
async fn roomy_host(
    st: &AppState,
    parent: &Live,
    count: usize,
) -> Result<Option<(HostRow, crate::cluster::Placing)>, ApiError> {
    use crate::cluster::place::{place, Need, Placement};
    let (template, memory_mb) = {
        let r = parent.row.lock().await;
        (r.template.clone(), r.memory_mb)
    };
    let need = Need::like(&template, memory_mb, count);
    Ok(match place(&st.cluster, &st.host, &need).await {
        Ok((Placement::There(h), claim)) => Some((h, claim)),
        _ => None,
    })
}

/// `resp`, after marking the scheduler's claim answered when the other host made the children.
fn answered(
    resp: Result<Response, ApiError>,
    claim: crate::cluster::Placing,
) -> Result<Response, ApiError> {
    if resp.as_ref().is_ok_and(|r| r.status().is_success()) {
        claim.answered();
    }
    resp
}

/// A fork whose child runs on `target` (issue 12 point 4): captured and uploaded here,
/// restored there ([`restore_transfer`]), whose answer (the child, 201; with `count`, the
/// fork tree's children) is the reply.
async fn fork_elsewhere(
    st: &AppState,
    headers: &HeaderMap,
    parent: Arc<Live>,
    metadata: std::collections::BTreeMap<String, String>,
    target: HostRow,
    count: Option<usize>,
) -> Result<Response, ApiError> {
    let t = std::time::Instant::now();
    let host = st.host.clone();
    let mut transfer =
        super::detached(async move { host.fork_for_transfer(&parent, metadata).await }).await?;
    transfer.count = count;
    let tree_id = transfer.base.id.clone();
    let resp = crate::cluster::forward::post_to_host(
        &st.cluster,
        &target,
        &format!("/v1{TRANSFER_PATH}"),
        Some(&transfer),
        Some(headers),
    )
    .await;
    // The child (if any) is restored once the answer's head is here: its image goes.
    let host = st.host.clone();
    tokio::spawn(async move { host.end_transfer(&tree_id).await });
    crate::metrics::observe("fork_cross_host", t);
    resp
}

/// Host to host: restores the fork image a parent's host uploaded into a child here.
async fn restore_transfer(
    State(st): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    RequiredJson(t): RequiredJson<ForkTransfer>,
) -> Result<Response, ApiError> {
    if !st.cluster.is_node(&headers) {
        return Err(ApiError::Forbidden("host-to-host route".into()));
    }
    // It names a directory here: only what this server makes (`tree-` and 32 hex digits).
    let tree_ok = t
        .base
        .id
        .strip_prefix("tree-")
        .is_some_and(|h| h.len() == 32 && h.bytes().all(|b| b.is_ascii_hexdigit()));
    if !tree_ok || t.prefix != crate::objects::fork_prefix(&t.base.id) {
        return Err(ApiError::BadRequest("base.id: not a fork tree id".into()));
    }
    if t.base.workspace_id != caller.workspace_id {
        return Err(ApiError::NotFound(format!(
            "sandbox {} not found",
            t.base.sandbox_id
        )));
    }
    let tree = t.count.is_some();
    let host = st.host.clone();
    let mut children = super::detached(async move { host.restore_transfer(t).await }).await?;
    if tree {
        let mut out = Vec::with_capacity(children.len());
        for c in children {
            out.push(sandbox_json(&c.snapshot_row().await));
        }
        return Ok((StatusCode::CREATED, Json(out)).into_response());
    }
    let child = children
        .pop()
        .ok_or_else(|| ApiError::internal("fork", "no child"))?;
    Ok((
        StatusCode::CREATED,
        Json(sandbox_json(&child.snapshot_row().await)),
    )
        .into_response())
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
    headers: HeaderMap,
    Path(id): Path<String>,
    RequiredJson(b): RequiredJson<ForkTreeRequest>,
) -> Result<Response, ApiError> {
    crate::extract::metadata(b.metadata.as_ref())?;
    let live = st
        .host
        .get_awake(&caller.workspace_id, &sandbox_id(&id)?)
        .await?;
    let t = std::time::Instant::now();
    let host = st.host.clone();
    let metadata = b.metadata.unwrap_or_default();
    let detach = b.volumes == Some(pandastack_api::ForkVolumes::Detach);
    let (parent, md) = (live.clone(), metadata.clone());
    let forked =
        super::detached(async move { host.fork(&parent, b.count, md, detach).await }).await;
    let children = match forked {
        // Issue 12 point 4: the parent's host has no room for the tree, so the whole tree
        // goes to one other host with room for it, through object storage (one capture).
        Err(ApiError::Busy {
            message,
            retry_after_s,
        }) if st.cluster.cfg.shared && st.host.objects().is_some() => {
            match roomy_host(&st, &live, b.count).await? {
                Some((target, claim)) => {
                    let resp =
                        fork_elsewhere(&st, &headers, live, metadata, target, Some(b.count)).await;
                    return answered(resp, claim);
                }
                None => {
                    return Err(ApiError::Busy {
                        message,
                        retry_after_s,
                    })
                }
            }
        }
        other => other?,
    };
    crate::metrics::observe("fork_tree", t);
    let mut out = Vec::with_capacity(children.len());
    for c in children {
        out.push(sandbox_json(&c.snapshot_row().await));
    }
    Ok((StatusCode::CREATED, Json(out)).into_response())
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
