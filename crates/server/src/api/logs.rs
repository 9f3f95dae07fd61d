//! `GET /v1/sandboxes/{id}/logs?stream=stdout|stderr|both&follow=true|false|1|0` (contract
//! §2.2, §3.2): without follow a `text/plain; charset=utf-8` body of lines; with follow,
//! Server-Sent Events `data: {"line", "stream"}` for the stored lines and then each new one,
//! with keep-alive comments (Py keeps a 30 s read timeout on follow streams).

use super::openapi::Errors;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::sandbox_id;
use crate::extract::Query;
use crate::host::logs::LogStream;
use crate::AppState;
use axum::extract::{Path, State};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(logs))
}

#[derive(Debug, Deserialize)]
struct LogsQuery {
    stream: Option<String>,
    follow: Option<String>,
}

fn flag(v: Option<&str>) -> Result<bool, ApiError> {
    match v {
        None | Some("false") | Some("0") | Some("") => Ok(false),
        Some("true") | Some("1") => Ok(true),
        Some(other) => Err(ApiError::BadRequest(format!(
            "follow must be true, false, 1 or 0, got '{other}'"
        ))),
    }
}

/// What the sandbox's commands and kernels printed (the last 1 MiB), contract §3.2: a text
/// body of lines, or with `follow` the stored lines then each new one as SSE `data: {"line",
/// "stream"}` until the sandbox is gone.
#[utoipa::path(
    get,
    path = "/sandboxes/{id}/logs",
    tag = "sandboxes",
    operation_id = "sandbox_logs",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id."), ("stream" = Option<String>, Query, description = "`stdout`, `stderr` or `both` (also `all`; default both).", pattern = "^(stdout|stderr|both|all)$"), ("follow" = Option<String>, Query, description = "`true`, `1`, `false`, `0` or empty (default false).", pattern = "^(true|false|1|0|)$")),
    responses((status = 200, description = "The log.", content((String = "text/plain"), (String = "text/event-stream"))), Errors)
)]
async fn logs(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<LogsQuery>,
) -> Result<Response, ApiError> {
    let live = st.host.get(&caller.workspace_id, &sandbox_id(&id)?)?;
    let filter = match q.stream.as_deref() {
        None | Some("both") | Some("all") => None,
        Some("stdout") => Some(LogStream::Stdout),
        Some("stderr") => Some(LogStream::Stderr),
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "stream must be stdout, stderr or both, got '{other}'"
            )))
        }
    };
    let follow = flag(q.follow.as_deref())?;
    let (lines, mut rx) = live.log.lines(filter);
    if !follow {
        let mut body = String::new();
        for l in lines {
            body.push_str(&l.line);
            body.push('\n');
        }
        return Ok((
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; charset=utf-8",
            )],
            body,
        )
            .into_response());
    }
    let event = |l: &crate::host::logs::LogLine| {
        Event::default()
            .data(serde_json::json!({"line": l.line, "stream": l.stream.as_str()}).to_string())
    };
    let stream = async_stream::stream! {
        for l in &lines {
            yield Ok::<Event, std::convert::Infallible>(event(l));
        }
        loop {
            match rx.recv().await {
                Ok(l) if filter.is_none_or(|f| f == l.stream) => yield Ok(event(&l)),
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            }
        }
    };
    Ok(super::sse(stream))
}
