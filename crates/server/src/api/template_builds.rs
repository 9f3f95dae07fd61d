//! Template builds (contract §2.8, §3.3; issue 13): `POST /v1/templates/build` (202 with a
//! TemplateBuild), `GET /v1/templates/builds` (the workspace's builds, newest first, a bare
//! array), `GET /v1/templates/builds/{id}`, and `GET /v1/templates/builds/{id}/logs[?follow=1]`
//! (SSE: one `data: <line>` per log line as it is written, then `data: end` for the Python SDK
//! and `event: done` for the TypeScript one, then the stream closes).

use super::build_form::{self, shown, BuildForm, FormLimits};
use super::openapi::{BodyTooLarge, Errors, HostStorage};
use super::rfc3339;
use crate::auth::Caller;
use crate::builds::job::{Submission, SubmittedSource};
use crate::builds::log::log_path;
use crate::error::ApiError;
use crate::extract::Query;
use crate::host::catalog::is_builtin;
use crate::AppState;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::StatusCode;
use axum::response::sse::Event;
use axum::response::Response;
use axum::Json;
use pandastack_api::TemplateBuild;
use pandastack_store::TemplateBuildRow;
use pandastack_templates::custom::context::{normalize_path, Context, ContextFile};
use pandastack_templates::Resources;
use std::convert::Infallible;
use tokio::io::AsyncBufReadExt;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Builds listed by `GET /v1/templates/builds`, newest first.
pub const LIST_LIMIT: usize = 100;

/// Fields `POST /v1/templates/build` accepts (contract §2.8).
const FIELDS: &[&str] = &[
    "name",
    "size_mb",
    "cpu",
    "memory_mb",
    "dockerfile",
    "image_ref",
    "kernel",
];

/// Names that would collide with the build routes under `/v1/templates/`.
const RESERVED_NAMES: &[&str] = &["build", "builds"];

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        // The body is streamed to disk under the build limits, not buffered.
        .merge(
            OpenApiRouter::new()
                .routes(routes!(build))
                .layer(DefaultBodyLimit::disable()),
        )
        .routes(routes!(list))
        .routes(routes!(get_one))
        .routes(routes!(logs))
}

/// The form of `POST /v1/templates/build` as the description states it (the handler reads the
/// body itself, streamed, through `build_form`): multipart (context files and the rootfs tar
/// as file parts) or urlencoded. Fields as strings, as forms carry them.
#[allow(dead_code)] // a description, never constructed
#[derive(utoipa::ToSchema)]
pub struct BuildFormDoc {
    /// The template name: 1-63 of a-z, 0-9 and '-', not starting with '-'; not a built-in's
    /// and not `build`/`builds`.
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    name: String,
    /// A Dockerfile (FROM base, code-interpreter, debian:bookworm[-slim] or one of the
    /// workspace's templates; RUN, COPY, ADD, ENV, WORKDIR, ARG, USER). Without it, the form
    /// must carry the file part `rootfs`.
    dockerfile: Option<String>,
    /// A rootfs tar (docker export, tar -C dir -c .), when there is no `dockerfile`.
    #[schema(value_type = Option<String>, format = Binary)]
    rootfs: Option<Vec<u8>>,
    /// CPUs of the template's sandboxes, 1-64 (default 1).
    #[schema(minimum = 1, maximum = 64)]
    cpu: Option<u32>,
    /// Memory of the template's sandboxes, MiB, 128-262144 (default 512).
    #[schema(minimum = 128, maximum = 262144)]
    memory_mb: Option<u32>,
    /// Disk of the template's sandboxes, MiB, 64-1048576 (default 1024).
    #[schema(minimum = 64, maximum = 1048576)]
    size_mb: Option<u32>,
    /// Ignored with a note in the log (sandboxes run under gVisor, which has its own kernel).
    kernel: Option<String>,
}

/// The wire form of a build row.
pub fn wire(b: &TemplateBuildRow) -> TemplateBuild {
    TemplateBuild {
        id: b.id.clone(),
        name: b.name.clone(),
        status: b.status.clone(),
        error: b.error.clone(),
        started_at: b.started_at.map(rfc3339),
        ended_at: b.ended_at.map(rfc3339),
        size_mb: b.size_mb,
        bytes: b.bytes.map(|n| n.max(0) as u64),
        image_ref: None,
        created_at: rfc3339(b.created_at),
        cpu: b.cpu,
        memory_mb: b.memory_mb,
        kind: b.kind.clone(),
        generation: b.generation,
        cache_hit: b.cache_hit,
    }
}

/// Build a template from a Dockerfile and its context, or from a rootfs tar (contract §2.8,
/// issue 13). Answers at once with the queued build; `GET .../builds/{id}` and its logs follow
/// it.
#[utoipa::path(
    post,
    path = "/templates/build",
    tag = "templates",
    operation_id = "build_template",
    request_body(content((BuildFormDoc = "multipart/form-data"), (BuildFormDoc = "application/x-www-form-urlencoded")), description = "Multipart: every other file part is a context file named by its path (`COPY`/`ADD` use them)."),
    responses((status = 202, description = "The build, queued.", body = TemplateBuild), BodyTooLarge, HostStorage, Errors)
)]
async fn build(
    State(st): State<AppState>,
    caller: Caller,
    req: Request,
) -> Result<(StatusCode, Json<TemplateBuild>), ApiError> {
    st.host.check_disk_reserve("template build", 0)?;
    let (id, dir) = st.host.new_build_dir()?;
    let cfg = &st.host.builds.cfg;
    let limits = FormLimits {
        context: cfg.max_context_bytes,
        rootfs: cfg.max_upload_bytes,
    };
    let accepted = async {
        let form = build_form::read(req, &dir.join("input"), limits).await?;
        let disk = super::sandboxes::disk_bounds(&st.host.cfg);
        let sub = submission(&caller, id, form, cfg.max_context_bytes, disk)?;
        // What the build may write (issue 23 finding 5).
        let may_write = u64::from(sub.resources.disk_mb) << 20;
        st.host.check_disk_reserve("template build", may_write)?;
        st.host
            .check_build_quota(&sub.workspace_id, &sub.name)
            .await?;
        st.host.submit_build(sub).await
    }
    .await;
    match accepted {
        Ok(row) => Ok((StatusCode::ACCEPTED, Json(wire(&row)))),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(e)
        }
    }
}

/// Validates the form into a build.
///
/// # Errors
/// 400 naming the field: unknown field, `image_ref` (no registry is reachable), a missing or
/// invalid or built-in `name`, resources out of range (`size_mb`, the disk of the template's
/// sandboxes, within `disk`), neither `dockerfile` nor a `rootfs` file, a bad context path;
/// 413 for a context over the limit.
fn submission(
    caller: &Caller,
    id: String,
    form: BuildForm,
    max_context: u64,
    disk: std::ops::RangeInclusive<u32>,
) -> Result<Submission, ApiError> {
    let BuildForm { mut fields, files } = form;
    if let Some(unknown) = fields.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(ApiError::BadRequest(format!(
            "{}: unknown field (accepted: {})",
            shown(unknown),
            FIELDS.join(", ")
        )));
    }
    if fields.contains_key("image_ref") {
        return Err(ApiError::BadRequest(
            "image_ref: templates from an OCI registry image need a registry this server cannot reach; \
             build from a Dockerfile (build_from_dockerfile) or upload a rootfs tar (build with rootfs_tar)"
                .into(),
        ));
    }
    let name = fields
        .remove("name")
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::BadRequest("name: required".into()))?;
    if pandastack_templates::validate_name(&name).is_err() {
        return Err(ApiError::BadRequest(format!(
            "name: invalid template name '{}': 1-63 characters of a-z, 0-9 and '-', not starting with '-'",
            shown(&name)
        )));
    }
    if is_builtin(&name) || RESERVED_NAMES.contains(&name.as_str()) {
        return Err(ApiError::BadRequest(format!(
            "name: '{name}' is reserved (a built-in template or a route); choose another name"
        )));
    }
    let resources = Resources {
        cpu: number(&fields, "cpu", 1, 1, 64)?,
        memory_mb: number(&fields, "memory_mb", 512, 128, 256 * 1024)?,
        // The SDKs send 1024 unless told otherwise (contract §2.8).
        disk_mb: number(
            &fields,
            "size_mb",
            1024.min(*disk.end()),
            *disk.start(),
            *disk.end(),
        )?,
    };
    let mut notes = Vec::new();
    if fields.contains_key("kernel") {
        notes.push(
            "note: kernel is ignored: sandboxes here run under gVisor, which has its own".into(),
        );
    }
    let source = match fields.remove("dockerfile") {
        Some(text) if text.trim().is_empty() => {
            return Err(ApiError::BadRequest("dockerfile: empty".into()))
        }
        Some(text) => {
            let mut entries = Vec::with_capacity(files.len());
            for f in files {
                let path = normalize_path(&f.field).map_err(ApiError::BadRequest)?;
                entries.push(ContextFile {
                    path,
                    file: f.file,
                    size: f.size,
                    sha256: f.sha256,
                });
            }
            let context = Context::new(entries).map_err(ApiError::BadRequest)?;
            if context.total_bytes() > max_context {
                return Err(ApiError::PayloadTooLarge(format!(
                    "context: files total more than {} MiB",
                    max_context / (1024 * 1024)
                )));
            }
            SubmittedSource::Dockerfile { text, context }
        }
        None => match files.as_slice() {
            [f] if f.field == "rootfs" => SubmittedSource::RootfsTar {
                path: f.file.clone(),
                sha256: f.sha256.clone(),
                size: f.size,
            },
            [] => {
                return Err(ApiError::BadRequest(
                    "dockerfile or rootfs: give a Dockerfile (field dockerfile, with context files) or a rootfs tar (file part rootfs)".into(),
                ))
            }
            _ => {
                return Err(ApiError::BadRequest(
                    "rootfs: without a dockerfile the only file part may be the rootfs tar".into(),
                ))
            }
        },
    };
    Ok(Submission {
        id,
        workspace_id: caller.workspace_id.clone(),
        name,
        resources,
        source,
        notes,
    })
}

/// Field `key` as an integer in `min..=max`, `default` when absent.
fn number(
    fields: &std::collections::BTreeMap<String, String>,
    key: &str,
    default: u32,
    min: u32,
    max: u32,
) -> Result<u32, ApiError> {
    let Some(raw) = fields.get(key) else {
        return Ok(default);
    };
    match raw.trim().parse::<u32>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(ApiError::BadRequest(format!(
            "{key}: must be an integer between {min} and {max}, got '{}'",
            shown(raw)
        ))),
    }
}

/// The workspace's builds, newest first, at most [`LIST_LIMIT`] (a bare array).
#[utoipa::path(
    get,
    path = "/templates/builds",
    tag = "templates",
    operation_id = "list_template_builds",
    responses((status = 200, description = "The builds.", body = Vec<TemplateBuild>), Errors)
)]
async fn list(
    State(st): State<AppState>,
    caller: Caller,
) -> Result<Json<Vec<TemplateBuild>>, ApiError> {
    let rows = st
        .host
        .store
        .template_builds(&caller.workspace_id, LIST_LIMIT)
        .await?;
    Ok(Json(rows.iter().map(wire).collect()))
}

async fn find(st: &AppState, caller: &Caller, id: &str) -> Result<TemplateBuildRow, ApiError> {
    let found = if is_build_id(id) {
        st.host
            .store
            .template_build(&caller.workspace_id, id)
            .await?
    } else {
        None
    };
    found.ok_or_else(|| ApiError::NotFound(format!("template build {} not found", shown(id))))
}

/// `bld-` + 32 lower-case hex digits.
fn is_build_id(id: &str) -> bool {
    id.strip_prefix("bld-")
        .is_some_and(|h| h.len() == 32 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// One build of the workspace.
#[utoipa::path(
    get,
    path = "/templates/builds/{id}",
    tag = "templates",
    operation_id = "get_template_build",
    params(("id" = String, Path, description = "The build id (`bld-` + 32 hex digits).")),
    responses((status = 200, description = "The build.", body = TemplateBuild), Errors)
)]
async fn get_one(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<TemplateBuild>, ApiError> {
    Ok(Json(wire(&find(&st, &caller, &id).await?)))
}

/// `?follow=` as both SDKs send it (`1`, or `true`/`false`).
#[derive(Debug, serde::Deserialize)]
struct LogsQuery {
    follow: Option<String>,
}

/// A build's log as SSE (contract §3.3): one `data: <line>` per line written so far (with
/// `follow`, then each new one until the build ends), then `data: end` and `event: done` with
/// `{"status"}`.
#[utoipa::path(
    get,
    path = "/templates/builds/{id}/logs",
    tag = "templates",
    operation_id = "template_build_logs",
    params(("id" = String, Path, description = "The build id (`bld-` + 32 hex digits)."), ("follow" = Option<String>, Query, description = "`1`, `true`, `0` or `false` (default false).", pattern = "^(1|0|true|false)$")),
    responses((status = 200, description = "The log lines.", content_type = "text/event-stream", body = String), Errors)
)]
async fn logs(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<LogsQuery>,
) -> Result<Response, ApiError> {
    let row = find(&st, &caller, &id).await?;
    let follow = match q.follow.as_deref() {
        None | Some("0") | Some("false") => false,
        Some("1") | Some("true") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "follow: expected 1, 0, true or false, got '{}'",
                shown(other)
            )))
        }
    };
    let path = log_path(&st.host.builds_dir(), &row.id);
    let watch = if follow {
        st.host.build_log_watch(&row.id)
    } else {
        None
    };
    let host = st.host.clone();
    let ws = caller.workspace_id.clone();
    let stream = async_stream::stream! {
        let mut watch = watch;
        let mut pending = String::new();
        if let Ok(file) = tokio::fs::File::open(&path).await {
            let mut reader = tokio::io::BufReader::new(file);
            loop {
                // Every complete line written so far.
                loop {
                    match reader.read_line(&mut pending).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) if pending.ends_with('\n') => {
                            let line = pending.trim_end_matches('\n').replace('\r', "");
                            pending.clear();
                            yield Ok::<_, Infallible>(Event::default().data(line));
                        }
                        Ok(_) => {} // a line still being written: read on
                    }
                }
                let Some(rx) = watch.as_mut() else { break };
                if rx.changed().await.is_err() {
                    // The build ended: read what it wrote last, then stop.
                    watch = None;
                }
            }
        }
        let status = host
            .store
            .template_build(&ws, &row.id).await
            .ok()
            .flatten()
            .map_or(row.status.clone(), |b| b.status);
        yield Ok(Event::default().data("end"));
        yield Ok(Event::default()
            .event("done")
            .data(serde_json::json!({"status": status}).to_string()));
    };
    Ok(super::sse(stream))
}
