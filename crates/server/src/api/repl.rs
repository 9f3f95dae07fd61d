//! Code contexts (contract §2.2, §2.3, §4): `POST .../repl/sessions` opens a context bound to a
//! kernel, `POST .../repl/sessions/{ctx}/run` runs a cell, `DELETE` closes it, `GET` lists
//! contexts and live kernels.
//!
//! Kernel adoption (seed 000 §2): opening a context adopts the most recently used live kernel
//! of that language that no open context holds (one that survived a restore or fork, or the
//! warmed kernel of a template snapshot); only when there is none is a new kernel started.

use super::openapi::{BodyTooLarge, Errors};
use crate::auth::Caller;
use crate::error::{from_guest, ApiError};
use crate::extract::{sandbox_id, JsonBody, RequiredJson};
use crate::host::logs::LogStream;
use crate::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use pandastack_api::{
    CodeContext, CreateContext, Execution, ReplKernel, ReplSession, ReplSessions, RunCode,
};
use pandastack_guest_protocol::{ErrorCode, GuestMsg, HostMsg};
use pandastack_store::{now_ms, ContextRow};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(close))
        .routes(routes!(run))
        .routes(routes!(list_alias))
}

fn language(raw: Option<String>) -> Result<String, ApiError> {
    let l = raw.unwrap_or_else(|| "python".into()).to_lowercase();
    match l.as_str() {
        "python" | "python3" | "py" => Ok("python".into()),
        other => Err(ApiError::BadRequest(format!(
            "language '{other}' is not supported; use 'python'"
        ))),
    }
}

/// Open a code context: it adopts the most recently used live kernel no open context holds
/// (one restored or forked with the sandbox), else starts a new one (seed 000 §2).
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/repl/sessions",
    tag = "code",
    operation_id = "create_code_context",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    request_body(content = Option<CreateContext>),
    responses((status = 201, description = "The context.", body = pandastack_api::CodeContext), BodyTooLarge, Errors)
)]
async fn create(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<CreateContext>,
) -> Result<(StatusCode, Json<CodeContext>), ApiError> {
    let lang = language(req.language)?;
    let live = st.host.get(&caller.workspace_id, &sandbox_id(&id)?)?;
    let ready = st.host.ready(&live).await?;
    let held: Vec<String> = st
        .host
        .store
        .open_contexts(&live.id)
        .await?
        .into_iter()
        .map(|c| c.kernel_id)
        .collect();
    let kernels = match ready
        .conn
        .call(HostMsg::KernelList {
            id: ready.conn.new_id(),
        })
        .await?
    {
        (GuestMsg::Kernels { kernels, .. }, _) => kernels,
        (GuestMsg::Error { code, message, .. }, _) => return Err(from_guest(code, message)),
        _ => Vec::new(),
    };
    let adoptable = kernels
        .into_iter()
        .filter(|k| k.language == lang && !held.contains(&k.kernel_id))
        .max_by_key(|k| k.last_used_ms);
    let (kernel_id, adopted) = match adoptable {
        Some(k) => {
            if k.kernel_id.starts_with(crate::host::TEMPLATE_KERNEL_PREFIX)
                && !ready.envs.is_empty()
            {
                inject_envs(&ready.conn, &k.kernel_id, &ready.envs).await?;
            }
            (k.kernel_id, true)
        }
        None => {
            no_python_check(&live).await?;
            let kernel_id = format!("k-{}", uuid::Uuid::new_v4().simple());
            let msg = HostMsg::KernelStart {
                id: ready.conn.new_id(),
                kernel_id: kernel_id.clone(),
                language: lang.clone(),
                env: ready.envs.clone(),
            };
            match ready.conn.call(msg).await? {
                (GuestMsg::KernelStarted { .. }, _) => {}
                (GuestMsg::Error { code, message, .. }, _) => {
                    return Err(from_guest(code, message))
                }
                (other, _) => {
                    return Err(ApiError::internal(
                        "kernel start",
                        format!("unexpected reply {other:?}"),
                    ))
                }
            }
            (kernel_id, false)
        }
    };
    let ctx = ContextRow {
        id: format!("ctx-{}", uuid::Uuid::new_v4().simple()),
        sandbox_id: live.id.clone(),
        kernel_id: kernel_id.clone(),
        language: lang.clone(),
        created_at: now_ms(),
        closed_at: None,
    };
    st.host.store.insert_context(&ctx).await?;
    Ok((
        StatusCode::CREATED,
        Json(CodeContext {
            id: ctx.id,
            language: lang,
            kernel_id,
            adopted,
        }),
    ))
}

/// A template built from a rootfs without python3 runs exec and files, but no kernel: say so
/// instead of a failed kernel start (issue 13). Looks at the sandbox's own rootfs build.
///
/// # Errors
/// 400 naming the template.
async fn no_python_check(live: &crate::host::Live) -> Result<(), ApiError> {
    let row = live.snapshot_row().await;
    let rootfs = std::path::PathBuf::from(&row.rootfs);
    let python = tokio::task::spawn_blocking(move || {
        pandastack_templates::custom::in_root::InRoot::open(&rootfs)
            .map(|root| pandastack_templates::custom::finish::probe(&root).python)
            .unwrap_or(true)
    })
    .await
    .unwrap_or(true);
    if python {
        return Ok(());
    }
    Err(ApiError::BadRequest(format!(
        "template {} has no Python (no python3 in its rootfs): code contexts need python3; exec and files work",
        row.template
    )))
}

/// Run a cell in the context's kernel (contract §2.3, §4). An exception in the cell is not
/// an HTTP error: it is in `error`.
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/repl/sessions/{ctx}/run",
    tag = "code",
    operation_id = "run_code",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id."), ("ctx" = String, Path, description = "The code context id (`ctx-` + 32 hex digits).")),
    request_body(content = RunCode),
    responses((status = 200, description = "The execution.", body = Execution), BodyTooLarge, Errors)
)]
async fn run(
    State(st): State<AppState>,
    caller: Caller,
    Path((id, ctx)): Path<(String, String)>,
    RequiredJson(req): RequiredJson<RunCode>,
) -> Result<Json<Execution>, ApiError> {
    const MAX_TIMEOUT_MS: u64 = super::exec::MAX_TIMEOUT_SECONDS * 1000;
    if req.timeout_ms.is_some_and(|t| t > MAX_TIMEOUT_MS) {
        return Err(ApiError::BadRequest(format!(
            "timeout_ms must be at most {MAX_TIMEOUT_MS}"
        )));
    }
    let live = st.host.get(&caller.workspace_id, &sandbox_id(&id)?)?;
    let ready = st.host.ready(&live).await?;
    let context = st
        .host
        .store
        .open_contexts(&live.id)
        .await?
        .into_iter()
        .find(|c| c.id == ctx)
        .ok_or_else(|| ApiError::NotFound(format!("code context {ctx} not found")))?;
    let msg = HostMsg::KernelRun {
        id: ready.conn.new_id(),
        kernel_id: context.kernel_id.clone(),
        code: req.code,
        timeout_ms: req.timeout_ms,
    };
    let envs = ready.envs.clone();
    // The lifecycle gate is not held while the cell runs: a long cell must not block pause
    // or snapshot (a cell in flight is captured by a snapshot like any other process).
    let conn = ready.conn.clone();
    drop(ready);
    let active = live.activity();
    let reply = match conn.call(msg).await {
        Ok(reply) => reply,
        Err(crate::guest::GuestError::Unavailable(_)) => {
            return Err(live.channel_lost("code run").await)
        }
        Err(e) => return Err(e.into()),
    };
    drop(active);
    match reply {
        (GuestMsg::KernelResult { execution: e, .. }, _) => {
            for (stream, text) in [
                (LogStream::Stdout, &e.stdout),
                (LogStream::Stderr, &e.stderr),
            ] {
                live.log.append(stream, text.as_bytes());
                live.log.flush(stream);
            }
            Ok(Json(Execution {
                results: e.results,
                stdout: e.stdout,
                stderr: e.stderr,
                error: e.error,
                exit: e.exit_code,
                exit_code: e.exit_code,
                duration_ms: e.duration_ms,
            }))
        }
        (
            GuestMsg::Error {
                code: ErrorCode::OutOfMemory,
                message,
                ..
            },
            _,
        ) => Ok(Json(
            killed_for_memory(&conn, &context, envs, &message).await,
        )),
        (GuestMsg::Error { code, message, .. }, _) => Err(from_guest(code, message)),
        (other, _) => Err(ApiError::internal(
            "kernel run",
            format!("unexpected reply {other:?}"),
        )),
    }
}

/// The execution of a run whose kernel the guest's memory guard killed (issue 8 point 3: the
/// sandbox lives on; the run reports a `MemoryError`): a fresh kernel is started under the
/// same id, with the sandbox's environment, so the context's next run works (its variables
/// are gone, and the error says so). A kernel that cannot be restarted is named in the error;
/// the context's next run then answers the kernel's death.
async fn killed_for_memory(
    conn: &crate::guest::GuestConn,
    context: &ContextRow,
    envs: std::collections::BTreeMap<String, String>,
    why: &str,
) -> Execution {
    let start = HostMsg::KernelStart {
        id: conn.new_id(),
        kernel_id: context.kernel_id.clone(),
        language: context.language.clone(),
        env: envs,
    };
    let restarted = match conn.call(start).await {
        Ok((GuestMsg::KernelStarted { .. }, _)) => {
            "a fresh kernel was started: variables and imports of earlier runs are gone".to_string()
        }
        Ok((GuestMsg::Error { message, .. }, _)) => {
            format!("the kernel could not be restarted: {message}")
        }
        Ok((other, _)) => format!("the kernel could not be restarted: unexpected reply {other:?}"),
        Err(e) => format!("the kernel could not be restarted: {e}"),
    };
    Execution {
        results: Vec::new(),
        stdout: String::new(),
        stderr: String::new(),
        error: Some(format!("MemoryError: {why}; {restarted}")),
        exit: 1,
        exit_code: 1,
        duration_ms: 0,
    }
}

/// Close a context and stop its kernel.
#[utoipa::path(
    delete,
    path = "/sandboxes/{id}/repl/sessions/{ctx}",
    tag = "code",
    operation_id = "close_code_context",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id."), ("ctx" = String, Path, description = "The code context id (`ctx-` + 32 hex digits).")),
    responses((status = 204, description = "Closed."), Errors)
)]
async fn close(
    State(st): State<AppState>,
    caller: Caller,
    Path((id, ctx)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let live = st.host.get(&caller.workspace_id, &sandbox_id(&id)?)?;
    let context = st
        .host
        .store
        .open_contexts(&live.id)
        .await?
        .into_iter()
        .find(|c| c.id == ctx)
        .ok_or_else(|| ApiError::NotFound(format!("code context {ctx} not found")))?;
    st.host
        .store
        .close_context(&live.id, &ctx, now_ms())
        .await?;
    if let Ok(ready) = st.host.ready(&live).await {
        let _ = ready
            .conn
            .call(HostMsg::KernelStop {
                id: ready.conn.new_id(),
                kernel_id: context.kernel_id,
            })
            .await;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The sandbox's open contexts and live kernels.
#[utoipa::path(
    get,
    path = "/sandboxes/{id}/repl/sessions",
    tag = "code",
    operation_id = "list_code_contexts",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    responses((status = 200, description = "Contexts and kernels.", body = ReplSessions), Errors)
)]
async fn list(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ReplSessions>, ApiError> {
    let live = st.host.get(&caller.workspace_id, &sandbox_id(&id)?)?;
    let contexts = st.host.store.open_contexts(&live.id).await?;
    let ready = st.host.ready(&live).await?;
    let kernels = match ready
        .conn
        .call(HostMsg::KernelList {
            id: ready.conn.new_id(),
        })
        .await?
    {
        (GuestMsg::Kernels { kernels, .. }, _) => kernels,
        _ => Vec::new(),
    };
    Ok(Json(ReplSessions {
        sessions: contexts
            .iter()
            .map(|c| ReplSession {
                id: c.id.clone(),
                kernel_id: c.kernel_id.clone(),
                language: c.language.clone(),
                created_at: super::rfc3339(c.created_at),
            })
            .collect(),
        kernels: kernels
            .iter()
            .map(|k| ReplKernel {
                kernel_id: k.kernel_id.clone(),
                language: k.language.clone(),
                pid: k.pid,
                last_used_ms: k.last_used_ms,
                attached: contexts.iter().any(|c| c.kernel_id == k.kernel_id),
            })
            .collect(),
    }))
}

/// The same as `GET .../repl/sessions`.
#[utoipa::path(
    get,
    path = "/sandboxes/{id}/repl",
    tag = "code",
    operation_id = "list_code_contexts_alias",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    responses((status = 200, description = "Contexts and kernels.", body = ReplSessions), Errors)
)]
async fn list_alias(
    st: State<AppState>,
    caller: Caller,
    id: Path<String>,
) -> Result<Json<ReplSessions>, ApiError> {
    list(st, caller, id).await
}

/// The warmed kernel of a template image was started before this sandbox existed, so it lacks
/// the sandbox's `envs` (kept out of template snapshots on purpose, seed 001): set them in
/// `os.environ` on adoption.
async fn inject_envs(
    conn: &crate::guest::GuestConn,
    kernel_id: &str,
    envs: &std::collections::BTreeMap<String, String>,
) -> Result<(), ApiError> {
    let literal = serde_json::to_string(envs).map_err(|e| ApiError::internal("envs", e))?;
    let code = format!("import os as _pds_os, json as _pds_json\n_pds_os.environ.update(_pds_json.loads({}))\ndel _pds_os, _pds_json", serde_json::to_string(&literal).map_err(|e| ApiError::internal("envs", e))?);
    match conn
        .call(HostMsg::KernelRun {
            id: conn.new_id(),
            kernel_id: kernel_id.to_string(),
            code,
            timeout_ms: Some(10_000),
        })
        .await?
    {
        (GuestMsg::KernelResult { execution, .. }, _) if execution.error.is_none() => Ok(()),
        (GuestMsg::Error { code, message, .. }, _) => Err(from_guest(code, message)),
        (other, _) => Err(ApiError::internal("kernel env", format!("{other:?}"))),
    }
}
