//! `GET /metrics` (Prometheus text format; authenticated unless `--public-metrics`) and
//! `GET /v1/sandboxes/{id}/metrics` (one sandbox's CPU and RSS, seed 003 "health monitor").

use super::metrics_scope::Scope;
use super::openapi::Errors;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::sandbox_id;
use crate::metrics::metrics;
use crate::state::SandboxState;
use crate::AppState;
use axum::extract::{MatchedPath, Path, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use prometheus::Encoder;
use std::time::Instant;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(sandbox_metrics))
}

/// Sets the database gauges from the databases that exist now (a deleted one's series go).
fn database_gauges(dbs: &crate::databases::Databases) {
    let m = metrics();
    m.database_storage.reset();
    m.database_connections.reset();
    let mut counts = std::collections::HashMap::new();
    for db in dbs.all() {
        let state = db.state();
        *counts.entry(state).or_insert(0i64) += 1;
        let used = db.dirs.storage().usage().map_or(0, |(used, _)| used);
        m.database_storage
            .with_label_values(&[&db.id])
            .set(i64::try_from(used).unwrap_or(i64::MAX));
        m.database_connections
            .with_label_values(&[&db.id])
            .set(i64::try_from(db.connections()).unwrap_or(i64::MAX));
    }
    for s in crate::databases::DatabaseState::LIVE {
        m.databases
            .with_label_values(&[s.as_str()])
            .set(counts.get(&s).copied().unwrap_or(0));
    }
}

/// `GET /metrics`: any valid API key may read it; `--public-metrics` opens it to requests
/// without one (for a scraper on a private network; issue 8). A workspace key sees only its
/// own series and the host-wide ones; an operator key (or public metrics) sees every series
/// (issue 23 finding 8, [`super::metrics_scope`]).
///
/// # Errors
/// 401 without a valid key unless metrics are public.
pub async fn prometheus_text(
    State(st): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let scope = if st.host.cfg.public_metrics {
        Scope::All
    } else {
        let caller = crate::auth::from_headers(&st.host.store, &headers).await?;
        scope_of(&st, caller).await?
    };
    let m = metrics();
    let mut counts = std::collections::HashMap::new();
    for live in st.host.all() {
        let status = live.row.lock().await.status.clone();
        *counts.entry(status).or_insert(0i64) += 1;
    }
    for s in [
        SandboxState::Creating,
        SandboxState::Running,
        SandboxState::Paused,
        SandboxState::Hibernated,
        SandboxState::Failed,
    ] {
        m.sandboxes
            .with_label_values(&[s.as_str()])
            .set(counts.get(s.as_str()).copied().unwrap_or(0));
    }
    for (template, ready, in_flight) in st.host.pool_sizes() {
        m.pool
            .with_label_values(&[&template, "ready"])
            .set(ready as i64);
        m.pool
            .with_label_values(&[&template, "in_flight"])
            .set(in_flight as i64);
    }
    m.restore_targets.set(st.host.engine.targets_held() as i64);
    database_gauges(&st.databases);
    let mut buf = Vec::new();
    prometheus::TextEncoder::new()
        .encode(&scope.filter(m.registry.gather()), &mut buf)
        .map_err(|e| ApiError::internal("metrics", e))?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        buf,
    )
        .into_response())
}

/// What `caller` may see of `/metrics`: everything for the operator (a key of the first
/// workspace, as for `/v1/hosts`), else its workspace's sandboxes and databases on this host
/// and its volumes.
///
/// # Errors
/// Store errors.
async fn scope_of(st: &AppState, caller: crate::auth::Caller) -> Result<Scope, ApiError> {
    if st.host.store.first_workspace_id().await?.as_deref() == Some(caller.workspace_id.as_str()) {
        return Ok(Scope::All);
    }
    let ws = caller.workspace_id;
    let mut owned: std::collections::HashSet<String> = st
        .host
        .all()
        .into_iter()
        .filter(|l| l.workspace_id == ws)
        .map(|l| l.id.clone())
        .collect();
    owned.extend(
        st.databases
            .all()
            .into_iter()
            .filter(|d| d.workspace_id == ws)
            .map(|d| d.id.clone()),
    );
    let volumes = st.host.store.list_volumes(Some(&ws)).await?;
    owned.extend(volumes.into_iter().map(|v| v.id));
    Ok(Scope::Workspace {
        workspace_id: ws,
        owned,
    })
}

/// Middleware: request latency by matched route (never by raw path, so ids do not explode
/// the label space).
pub async fn track(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().as_str().to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let resp = next.run(req).await;
    metrics()
        .http
        .with_label_values(&[&method, &route, resp.status().as_str()])
        .observe(started.elapsed().as_secs_f64());
    resp
}

/// CPU and memory from the sandbox's cgroup (seed 003 "health monitor").
#[utoipa::path(
    get,
    path = "/sandboxes/{id}/metrics",
    tag = "sandboxes",
    operation_id = "sandbox_metrics",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    responses((status = 200, description = "The figures.", body = pandastack_api::SandboxMetrics), Errors)
)]
async fn sandbox_metrics(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<pandastack_api::SandboxMetrics>, ApiError> {
    let live = st.host.get(&caller.workspace_id, &sandbox_id(&id)?)?;
    let (iid, status, dir) = {
        let r = live.row.lock().await;
        (
            r.instance_id.clone(),
            r.status.clone(),
            r.instance_dir.clone(),
        )
    };
    let disk = dir.and_then(|d| st.host.engine.disk_usage(std::path::Path::new(&d)));
    let stats = match &iid {
        Some(i) => st
            .host
            .engine
            .stats(i)
            .await
            .map_err(|e| ApiError::internal("stats", e))?,
        None => Default::default(),
    };
    Ok(Json(pandastack_api::SandboxMetrics {
        sandbox_id: live.id.clone(),
        status,
        memory_bytes: stats.memory_bytes,
        rss_bytes: stats.memory_bytes,
        cpu_ns: stats.cpu_ns,
        cpu_percent: live.cpu_percent(),
        disk_used_bytes: disk.map(|(used, _)| used),
        disk_limit_bytes: disk.map(|(_, total)| total),
    }))
}
