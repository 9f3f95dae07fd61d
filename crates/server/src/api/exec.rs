//! `POST .../exec` (one reply) and `POST .../exec/stream` (Server-Sent Events), contract §2.2,
//! §3.1, §4. The command runs in the guest in its own process group; at `timeout_seconds` the
//! guest kills the whole group. If the HTTP client goes away before the command ends, the
//! command is killed too (unless a stream asked for `background`).

use super::openapi::{BodyTooLarge, CommandTimeout, Errors};
use crate::auth::Caller;
use crate::error::{from_guest, ApiError};
use crate::extract::{sandbox_id, RequiredJson};
use crate::guest::{GuestConn, Replies};
use crate::host::logs::LogStream;
use crate::AppState;
use axum::extract::{Path, State};
use axum::response::sse::Event;
use axum::response::Response;
use axum::Json;
use futures::Stream;
use pandastack_api::{ExecRequest, ExecResult};
use pandastack_guest_protocol::{ErrorCode, GuestMsg, HostMsg, OutputStream, RequestId};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Timeout when the request gives none, seconds.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 300;
/// Longest `timeout_seconds` accepted (30 days, as the longest TTL).
pub const MAX_TIMEOUT_SECONDS: u64 = 30 * 24 * 3600;
/// Output kept per stream for a non-streaming exec, bytes (16 MiB); the rest is dropped and the
/// reply says `truncated: true` (issue 8: eight execs printing 100 MB each must not take the
/// server's memory with them). `exec/stream` has no cap: it never buffers.
pub const MAX_CAPTURE_BYTES: usize = 16 * 1024 * 1024;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(exec))
        .routes(routes!(exec_stream))
}

/// Kills the guest process if dropped before [`KillOnDrop::disarm`] (the client went away).
struct KillOnDrop {
    conn: GuestConn,
    id: RequestId,
    armed: bool,
}

impl KillOnDrop {
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.armed {
            let conn = self.conn.clone();
            let id = self.id;
            tokio::spawn(async move {
                let _ = conn.send(HostMsg::ExecKill { id }, Vec::new()).await;
                conn.forget(id);
            });
        }
    }
}

async fn start(
    st: &AppState,
    caller: &Caller,
    id: &str,
    req: &ExecRequest,
) -> Result<
    (
        GuestConn,
        RequestId,
        Replies,
        std::sync::Arc<crate::host::Live>,
    ),
    ApiError,
> {
    check_request(req)?;
    let live = st.host.get(&caller.workspace_id, &sandbox_id(id)?)?;
    let ready = st.host.ready(&live).await?;
    let mut env = ready.envs.clone();
    env.extend(req.env.clone().unwrap_or_default());
    let timeout = req.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS);
    let rid = ready.conn.new_id();
    let msg = HostMsg::Exec {
        id: rid,
        cmd: req.cmd.clone(),
        env,
        cwd: req.cwd.clone(),
        timeout_ms: (timeout > 0).then(|| timeout.saturating_mul(1000)),
    };
    let rx = ready.conn.request(msg, Vec::new()).await?;
    Ok((ready.conn.clone(), rid, rx, live))
}

/// Rejects what a process could never be started with: an empty command, NUL bytes (in the
/// command, env or cwd), and env names that are empty or contain `=` (execve would split them).
///
/// # Errors
/// 400 naming the field.
fn check_request(req: &ExecRequest) -> Result<(), ApiError> {
    // ASCII whitespace only, so the rule reads the same as the description's pattern in every
    // regex dialect.
    if req
        .cmd
        .chars()
        .all(|c| matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c'))
    {
        return Err(ApiError::BadRequest("cmd must not be empty".into()));
    }
    if req.cmd.contains('\0') {
        return Err(ApiError::BadRequest(
            "cmd must not contain NUL bytes".into(),
        ));
    }
    if req.cwd.as_deref().is_some_and(|c| c.contains('\0')) {
        return Err(ApiError::BadRequest(
            "cwd must not contain NUL bytes".into(),
        ));
    }
    if req.timeout_seconds.is_some_and(|t| t > MAX_TIMEOUT_SECONDS) {
        return Err(ApiError::BadRequest(format!(
            "timeout_seconds must be at most {MAX_TIMEOUT_SECONDS} (0: no limit)"
        )));
    }
    crate::extract::env_vars("env", req.env.as_ref())
}

/// A guest error of an exec: the only `NotFound` an exec can meet is a working directory that
/// does not exist in the sandbox, which is the sandbox's state (409), not a missing sandbox.
fn exec_error(code: ErrorCode, message: String) -> ApiError {
    match code {
        ErrorCode::NotFound => ApiError::Conflict(format!("cwd: {message}")),
        other => from_guest(other, message),
    }
}

fn push_capped(buf: &mut Vec<u8>, chunk: &[u8], cut: &mut bool) {
    let room = MAX_CAPTURE_BYTES.saturating_sub(buf.len());
    if chunk.len() > room {
        *cut = true;
    }
    buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
}

/// Run a command (`bash -c` semantics when it has shell syntax) in a fresh process and wait
/// for it (contract §2.2, §4). Output beyond 64 MiB per stream is cut with a note on stderr.
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/exec",
    tag = "exec",
    operation_id = "exec",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    request_body(content = ExecRequest),
    responses((status = 200, description = "The command ended.", body = ExecResult), CommandTimeout, BodyTooLarge, Errors)
)]
async fn exec(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    RequiredJson(req): RequiredJson<ExecRequest>,
) -> Result<Json<ExecResult>, ApiError> {
    let (conn, rid, mut rx, live) = start(&st, &caller, &id, &req).await?;
    let _active = live.activity();
    let mut guard = KillOnDrop {
        conn,
        id: rid,
        armed: true,
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let (mut out_cut, mut err_cut) = (false, false);
    while let Some((msg, body)) = rx.recv().await {
        match msg {
            GuestMsg::Output {
                stream: OutputStream::Stdout,
                ..
            } => {
                live.log.append(LogStream::Stdout, &body);
                push_capped(&mut out, &body, &mut out_cut)
            }
            GuestMsg::Output {
                stream: OutputStream::Stderr,
                ..
            } => {
                live.log.append(LogStream::Stderr, &body);
                push_capped(&mut err, &body, &mut err_cut)
            }
            GuestMsg::Exited {
                exit_code,
                timed_out,
                duration_ms,
                ..
            } => {
                guard.disarm();
                live.log.flush(LogStream::Stdout);
                live.log.flush(LogStream::Stderr);
                live.touch().await;

                if timed_out {
                    // Contract §7: exec timeouts are a 5xx whose message says "timeout", which
                    // both SDKs raise as SandboxTimeout.
                    let secs = req.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS);
                    return Err(ApiError::Timeout(format!(
                        "command timeout after {secs} s; its process group was killed"
                    )));
                }
                return Ok(Json(ExecResult {
                    stdout: text(out),
                    stderr: text(err),
                    exit_code,
                    duration_ms,
                    truncated: out_cut || err_cut,
                }));
            }
            GuestMsg::Error { code, message, .. } => {
                guard.disarm();
                return Err(exec_error(code, message));
            }
            _ => {}
        }
    }
    guard.disarm();
    Err(live.channel_lost("command").await)
}

/// Output bytes as a string without a second copy when they are valid UTF-8 (they usually are;
/// other bytes are replaced).
fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn event(name: &str, data: serde_json::Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

fn sse_stream(
    mut rx: Replies,
    mut guard: KillOnDrop,
    timeout_seconds: u64,
    live: std::sync::Arc<crate::host::Live>,
) -> impl Stream<Item = Result<Event, std::convert::Infallible>> {
    async_stream::stream! {
        let _active = live.activity();
        // Bytes of a UTF-8 sequence split across chunks are held back until complete.
        let mut pending: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
        while let Some((msg, body)) = rx.recv().await {
            match msg {
                GuestMsg::Output { stream, .. } => {
                    let (idx, name, ls) = match stream { OutputStream::Stdout => (0, "stdout", LogStream::Stdout), OutputStream::Stderr => (1, "stderr", LogStream::Stderr) };
                    live.log.append(ls, &body);
                    pending[idx].extend_from_slice(&body);
                    let text = take_utf8(&mut pending[idx]);
                    if !text.is_empty() {
                        yield Ok(event(name, serde_json::json!({"chunk": text})));
                    }
                }
                GuestMsg::Exited { exit_code, timed_out, .. } => {
                    guard.disarm();
                    live.log.flush(LogStream::Stdout);
                    live.log.flush(LogStream::Stderr);
                    for (idx, name) in [(0, "stdout"), (1, "stderr")] {
                        if !pending[idx].is_empty() {
                            let text = String::from_utf8_lossy(&pending[idx]).into_owned();
                            yield Ok(event(name, serde_json::json!({"chunk": text})));
                        }
                    }
                    if timed_out {
                        yield Ok(event("error", serde_json::json!({"error": format!("command timeout after {timeout_seconds} s")})));
                    } else {
                        yield Ok(event("exit", serde_json::json!({"exit_code": exit_code})));
                    }
                    return;
                }
                GuestMsg::Error { message, .. } => {
                    guard.disarm();
                    yield Ok(event("error", serde_json::json!({"error": message})));
                    return;
                }
                _ => {}
            }
        }
        guard.disarm();
        let lost = live.channel_lost("command").await;
        yield Ok(event("error", serde_json::json!({"error": lost.to_string()})));
    }
}

/// Splits off the longest valid UTF-8 prefix of `buf` (invalid bytes are replaced, an
/// incomplete trailing sequence of up to 3 bytes is kept for the next chunk).
fn take_utf8(buf: &mut Vec<u8>) -> String {
    let keep = match std::str::from_utf8(buf) {
        Ok(_) => 0,
        Err(e) if e.error_len().is_none() => buf.len() - e.valid_up_to(),
        Err(_) => 0,
    };
    let rest = buf.split_off(buf.len() - keep);
    let text = String::from_utf8_lossy(buf).into_owned();
    *buf = rest;
    text
}

/// Run a command and stream its output as Server-Sent Events (contract §3.1): `stdout` and
/// `stderr` events with `{"chunk"}`, then `exit` with `{"exit_code"}` (or `error` with
/// `{"error"}`, a message with `timeout` past `timeout_seconds`), then the stream closes.
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/exec/stream",
    tag = "exec",
    operation_id = "exec_stream",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    request_body(content = ExecRequest),
    responses((status = 200, description = "The event stream.", content_type = "text/event-stream", body = String), BodyTooLarge, Errors)
)]
async fn exec_stream(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    RequiredJson(req): RequiredJson<ExecRequest>,
) -> Result<Response, ApiError> {
    let (conn, rid, rx, live) = start(&st, &caller, &id, &req).await?;
    let guard = KillOnDrop {
        conn,
        id: rid,
        armed: !req.background.unwrap_or(false),
    };
    let stream = sse_stream(
        rx,
        guard,
        req.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS),
        live,
    );
    Ok(super::sse(stream))
}

#[cfg(test)]
mod tests {
    use super::take_utf8;

    #[test]
    fn split_utf8_sequences_are_held_back() {
        let mut b = "hé".as_bytes()[..2].to_vec();
        assert_eq!(take_utf8(&mut b), "h");
        b.extend_from_slice(&"é".as_bytes()[1..]);
        assert_eq!(take_utf8(&mut b), "é");
        let mut bad = vec![b'a', 0xff, b'b'];
        assert_eq!(take_utf8(&mut bad), "a\u{fffd}b");
    }
}
