//! `POST/GET /v1/sandboxes`, `GET/DELETE /v1/sandboxes/{id}`, `GET/PATCH .../lifecycle`
//! (contract §2.1, §2.2).

use super::openapi::{BodyTooLarge, Errors, HostStorage};
use super::sandbox_json;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{sandbox_id, JsonBody};
use crate::host::CreateSpec;
use crate::AppState;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pandastack_api::{CreateSandbox, Lifecycle, LifecyclePatch, Sandbox};
use pandastack_store::now_ms;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Largest accepted `ttl_seconds` (30 days).
pub const MAX_TTL_SECONDS: i64 = 30 * 24 * 3600;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(get_one, delete))
        .routes(routes!(lifecycle, patch_lifecycle))
}

fn check_ttl(ttl: i64) -> Result<i64, ApiError> {
    if !(1..=MAX_TTL_SECONDS).contains(&ttl) {
        return Err(ApiError::BadRequest(format!(
            "ttl_seconds must be between 1 and {MAX_TTL_SECONDS}, got {ttl}"
        )));
    }
    Ok(ttl)
}

/// The disk size of a create: the request's, else the template's (`size_mb` of a user
/// template, issue 13 "Size"), else the server default.
///
/// # Errors
/// 400 naming `disk_mb` when it is below the smallest disk or above `--max-disk-mb`.
fn check_disk(
    asked: Option<u32>,
    template_mb: Option<u32>,
    cfg: &crate::host::HostConfig,
) -> Result<u32, ApiError> {
    let mb = asked.or(template_mb).unwrap_or(cfg.default_disk_mb);
    let bounds = disk_bounds(cfg);
    if !bounds.contains(&mb) {
        return Err(ApiError::BadRequest(format!(
            "disk_mb must be between {} and {}, got {mb}",
            bounds.start(),
            bounds.end()
        )));
    }
    Ok(mb)
}

/// The disk sizes a sandbox may have, MiB: from the smallest disk the engine makes (at least
/// 256) to `--max-disk-mb`. Template builds check their `size_mb` against it too.
pub(crate) fn disk_bounds(cfg: &crate::host::HostConfig) -> std::ops::RangeInclusive<u32> {
    pandastack_gvisor::disk::MIN_DISK_MB.max(256)..=cfg.max_disk_mb
}

/// A `cpu` / `memory_mb` value of a create body: absent, or a positive integer.
///
/// # Errors
/// 400 naming the field.
fn size_field(field: &str, v: Option<&serde_json::Value>) -> Result<Option<u32>, ApiError> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| *n > 0)
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                ApiError::BadRequest(format!("{field} must be a positive integer, got {v}"))
            }),
    }
}

/// Sandboxes take their size from their template: a create asking for another size is refused
/// rather than silently given the template's (issue 8).
///
/// # Errors
/// 400 naming the field, the template's value and the request's.
fn same_size(
    field: &str,
    asked: Option<u32>,
    template_value: u32,
    template: &str,
    unit: &str,
) -> Result<(), ApiError> {
    match asked {
        Some(n) if n != template_value => Err(ApiError::BadRequest(format!(
            "{field}: sandboxes of template {template} have {template_value} {unit}, got {n}; sizes come from the template"
        ))),
        _ => Ok(()),
    }
}

/// Create a sandbox from a template (warm pool first) or, with `from_snapshot`, restore a
/// snapshot into a new sandbox whose template comes from the snapshot (seed 000 §2).
#[utoipa::path(
    post,
    path = "/sandboxes",
    operation_id = "create_sandbox",
    tag = "sandboxes",
    request_body(content = Option<CreateSandbox>, description = "May be empty: template `code-interpreter`, ttl 3600 s."),
    responses((status = 201, description = "The new sandbox, running.", body = Sandbox), BodyTooLarge, HostStorage, Errors)
)]
async fn create(
    State(st): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    JsonBody(req): JsonBody<CreateSandbox>,
) -> Result<Response, ApiError> {
    let ttl = check_ttl(req.ttl_seconds.unwrap_or(st.host.cfg.default_ttl_seconds))?;
    let template = req
        .template
        .clone()
        .unwrap_or_else(|| "code-interpreter".into());
    crate::extract::env_vars("envs", req.envs.as_ref())?;
    crate::extract::metadata(req.metadata.as_ref())?;
    let cpu = size_field("cpu", req.cpu.as_ref())?;
    let memory_mb = size_field("memory_mb", req.memory_mb.as_ref())?;
    let mut template_disk_mb = None;
    if req.from_snapshot.is_none() {
        // Seed 000: "bake the size you need into the template". With from_snapshot the
        // snapshot's sizes win and request values are ignored (same seed).
        let tpl = st.host.template(&caller.workspace_id, &template)?;
        same_size("cpu", cpu, tpl.cpu, &tpl.name, "CPUs")?;
        same_size("memory_mb", memory_mb, tpl.memory_mb, &tpl.name, "MiB")?;
        template_disk_mb = tpl.disk_mb;
    }
    let network = super::sandbox_network::policy_of_create(&st.host.cfg, &req)?;
    let disk_mb = check_disk(req.disk_mb, template_disk_mb, &st.host.cfg)?;
    let volumes = st
        .host
        .resolve_volumes(
            &caller.workspace_id,
            req.volumes.as_deref().unwrap_or_default(),
        )
        .await?;
    // A volume's image is on one host's disk: sandboxes that attach it are made there.
    let volume_host = st.host.volumes_host(&volumes).await?;
    // Counts this create in this host's load until it is answered (the scheduler's claim).
    let _claim = match place_elsewhere(&st, &caller, &headers, &req, &template, volume_host).await?
    {
        Routed::Relayed(resp) => return Ok(resp),
        Routed::Here(claim) => claim,
    };
    let spec = CreateSpec {
        volumes,
        network,
        disk_mb,
        workspace_id: caller.workspace_id,
        template,
        ttl_seconds: ttl,
        persistent: req.persistent.unwrap_or(false),
        metadata: req.metadata.unwrap_or_default(),
        envs: req.envs.unwrap_or_default(),
    };
    let t = std::time::Instant::now();
    let host = st.host.clone();
    let live = super::detached(async move {
        match req.from_snapshot {
            Some(snap) => host.create_from_snapshot(spec, &snap).await,
            None => host.create(spec).await,
        }
    })
    .await?;
    // The TTL counts from the end of the create (a slow restore must not eat into it).
    live.touch().await;
    let row = live.snapshot_row().await;
    crate::metrics::observe(
        if row.from_snapshot.is_some() {
            "restore"
        } else {
            "create"
        },
        t,
    );
    // User template names would make the label set unbounded: they count as "custom".
    let label = if crate::host::catalog::is_builtin(&row.template) {
        row.template.as_str()
    } else {
        "custom"
    };
    crate::metrics::metrics()
        .created
        .with_label_values(&[label, &row.boot_mode])
        .inc();
    Ok((StatusCode::CREATED, Json(sandbox_json(&row))).into_response())
}

/// Where [`place_elsewhere`] sent a create.
enum Routed {
    /// Another host answered it: its answer.
    Relayed(Response),
    /// It is this host's to make: the scheduler's claim, to hold until it is answered.
    Here(crate::cluster::Placing),
}

/// Issue 12 point 4: when the scheduler puts this create on another host, relays it there
/// (the body as parsed, its `host` set to the chosen host so that host serves it) and returns
/// that host's answer; else the claim of a create here.
///
/// # Errors
/// The scheduler's 400/409/503; 502 when the chosen host cannot be reached.
async fn place_elsewhere(
    st: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    req: &CreateSandbox,
    template: &str,
    volume_host: Option<String>,
) -> Result<Routed, ApiError> {
    use crate::cluster::place::{place, Need, Placement};
    let snapshot = match &req.from_snapshot {
        Some(id) => st.host.store.snapshot(&caller.workspace_id, id).await?,
        None => None,
    };
    let memory_mb = match &snapshot {
        Some(s) => s.memory_mb,
        None => st
            .host
            .template(&caller.workspace_id, template)
            .map(|t| t.memory_mb)
            .unwrap_or(0),
    };
    // An image in the object store can be restored on any host (issue 12 point 6), best on
    // the one that has it on disk; else only there.
    let uploaded = match &snapshot {
        Some(s) => st.host.uploaded(&s.id).await,
        None => false,
    };
    let snapshot_host = snapshot.as_ref().map(|s| s.host.as_str());
    let need = Need {
        template: snapshot.as_ref().map_or(template, |s| s.template.as_str()),
        memory_mb,
        sandboxes: 1,
        hint: req.host.as_deref(),
        image_host: snapshot_host
            .filter(|_| !uploaded)
            .or(volume_host.as_deref()),
        prefer: snapshot_host.filter(|_| uploaded),
    };
    if let (Some(snap), Some(vol)) = (&snapshot, &volume_host) {
        if &snap.host != vol {
            return Err(ApiError::Conflict(format!(
                "the snapshot is on host {} and the volumes on host {vol}; a sandbox attaches only volumes of its own host",
                snap.host
            )));
        }
    }
    let (target, placing) = match place(&st.cluster, &st.host, &need).await? {
        (Placement::There(target), placing) => (target, placing),
        (Placement::Here, claim) => return Ok(Routed::Here(claim)),
    };
    let mut body = req.clone();
    body.host = Some(target.name.clone());
    let bytes = serde_json::to_vec(&body).map_err(|e| ApiError::internal("create body", e))?;
    let mut relayed = axum::http::Request::builder()
        .method(axum::http::Method::POST)
        .uri("/v1/sandboxes")
        .header(axum::http::header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(bytes))
        .map_err(|e| ApiError::internal("create request", e))?;
    if let Some(auth) = headers.get(axum::http::header::AUTHORIZATION) {
        relayed
            .headers_mut()
            .insert(axum::http::header::AUTHORIZATION, auth.clone());
    }
    let resp = crate::cluster::forward::to_host(&st.cluster, &target, relayed, ()).await;
    match resp {
        Ok(resp) => {
            if resp.status().is_success() {
                placing.answered();
            }
            Ok(Routed::Relayed(resp))
        }
        // The chosen host died since its last heartbeat: this host takes the create, unless
        // the caller asked for that host or the image is only there.
        Err(ApiError::BadGateway(why)) if need.hint.is_none() && need.image_host.is_none() => {
            tracing::warn!(host = %target.name, error = %why, "placement target unreachable: creating here");
            drop(placing);
            Ok(Routed::Here(st.cluster.claim(&st.cluster.cfg.host_name, 1)))
        }
        Err(e) => Err(e),
    }
}

/// The workspace's live sandboxes (a bare array, contract §2.1).
#[utoipa::path(
    get,
    path = "/sandboxes",
    operation_id = "list_sandboxes",
    tag = "sandboxes",
    responses((status = 200, description = "Every live sandbox of the workspace.", body = Vec<Sandbox>), Errors)
)]
async fn list(State(st): State<AppState>, caller: Caller) -> Result<Json<Vec<Sandbox>>, ApiError> {
    let rows = st
        .host
        .store
        .live_sandboxes(Some(&caller.workspace_id))
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        // The in-memory row is fresher (last activity, boot figures) than the stored one.
        match st.host.get(&caller.workspace_id, &r.id) {
            Ok(live) => out.push(sandbox_json(&live.snapshot_row().await)),
            Err(_) => out.push(sandbox_json(&r)),
        }
    }
    Ok(Json(out))
}

/// One sandbox.
#[utoipa::path(
    get,
    path = "/sandboxes/{id}",
    operation_id = "get_sandbox",
    tag = "sandboxes",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    responses((status = 200, description = "The sandbox.", body = Sandbox), Errors)
)]
async fn get_one(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Sandbox>, ApiError> {
    let id = sandbox_id(&id)?;
    match st.host.get(&caller.workspace_id, &id) {
        Ok(live) => Ok(Json(sandbox_json(&live.snapshot_row().await))),
        // Not on this host: one of a host that is down (requests for the others' sandboxes
        // are relayed to them); the store has its last state.
        Err(e) => match stored_elsewhere(&st, &caller, &id).await? {
            Some(row) => Ok(Json(sandbox_json(&row))),
            None => Err(e),
        },
    }
}

/// The stored row of sandbox `id` of the caller's workspace when it lives on another host
/// (issue 12: one that is down, as requests for a live host's sandboxes are relayed to it).
///
/// # Errors
/// Store errors.
async fn stored_elsewhere(
    st: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Option<pandastack_store::SandboxRow>, ApiError> {
    Ok(st.host.store.sandbox(id).await?.filter(|r| {
        r.workspace_id == caller.workspace_id
            && r.deleted_at.is_none()
            && r.host != st.cluster.cfg.host_name
    }))
}

/// Delete a sandbox: its processes, files and fork children (unless promoted) are gone.
#[utoipa::path(
    delete,
    path = "/sandboxes/{id}",
    operation_id = "delete_sandbox",
    tag = "sandboxes",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    responses((status = 204, description = "Deleted."), Errors)
)]
async fn delete(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = sandbox_id(&id)?;
    let live = match st.host.get(&caller.workspace_id, &id) {
        Ok(live) => live,
        Err(e) => match stored_elsewhere(&st, &caller, &id).await? {
            // Its host is down: only its row is left to delete here (the host's start-up
            // recovery destroys what it left of the instance).
            Some(mut row) => {
                // Its instance and images are on that host's disk, not this one's.
                (row.instance_id, row.instance_dir, row.hibernate_image) = (None, None, None);
                std::sync::Arc::new(crate::host::Live::new(row))
            }
            None => return Err(e),
        },
    };
    let t = std::time::Instant::now();
    let host = st.host.clone();
    super::detached(async move { host.destroy(&live, "api").await }).await?;
    crate::metrics::observe("kill", t);
    Ok(StatusCode::NO_CONTENT)
}

async fn lifecycle_of(live: &crate::host::Live) -> Lifecycle {
    let r = live.row.lock().await;
    Lifecycle {
        ttl_seconds: r.ttl_seconds,
        persistent: r.persistent,
        idle_seconds: (now_ms() - r.last_active_at).max(0) / 1000,
    }
}

/// TTL, persistence and idle seconds (seed 003); wakes a hibernated sandbox.
#[utoipa::path(
    get,
    path = "/sandboxes/{id}/lifecycle",
    operation_id = "get_lifecycle",
    tag = "lifecycle",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    responses((status = 200, description = "The lifecycle settings.", body = Lifecycle), Errors)
)]
async fn lifecycle(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Lifecycle>, ApiError> {
    let live = st
        .host
        .get_awake(&caller.workspace_id, &sandbox_id(&id)?)
        .await?;
    let out = lifecycle_of(&live).await;
    live.touch().await;
    Ok(Json(out))
}

/// Change the TTL and/or persistence; only the keys given change.
#[utoipa::path(
    patch,
    path = "/sandboxes/{id}/lifecycle",
    operation_id = "patch_lifecycle",
    tag = "lifecycle",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    request_body(content = Option<LifecyclePatch>),
    responses((status = 200, description = "The lifecycle settings after the change.", body = Lifecycle), BodyTooLarge, Errors)
)]
async fn patch_lifecycle(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(p): JsonBody<LifecyclePatch>,
) -> Result<Json<Lifecycle>, ApiError> {
    let live = st
        .host
        .get_awake(&caller.workspace_id, &sandbox_id(&id)?)
        .await?;
    let ttl = p.ttl_seconds.map(check_ttl).transpose()?;
    {
        let mut r = live.row.lock().await;
        if let Some(t) = ttl {
            r.ttl_seconds = t;
        }
        if let Some(pers) = p.persistent {
            r.persistent = pers;
        }
        r.last_active_at = now_ms();
        st.host.store.put_sandbox(&r).await?;
    }
    Ok(Json(lifecycle_of(&live).await))
}
