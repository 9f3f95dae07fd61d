//! `GET /v1/sandboxes/{id}/logs?stream=stdout|stderr|both&follow=true|false|1|0` (contract
//! §2.2, §3.2): without follow a `text/plain; charset=utf-8` body of lines; with follow,
//! Server-Sent Events `data: {"line", "stream"}` for the stored lines and then each new one,
//! with keep-alive comments (Py keeps a 30 s read timeout on follow streams).

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::sandbox_id;
use crate::host::logs::LogStream;
use crate::AppState;
use axum::extract::{Path, Query, State};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

pub fn router() -> Router<AppState> {
    Router::new().route("/sandboxes/:id/logs", get(logs))
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
