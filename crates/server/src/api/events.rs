//! Lifecycle events (seed 003 "events stream"): `GET /v1/events` with `Accept:
//! text/event-stream` streams every transition of the caller's workspace as Server-Sent Events
//! (`event: transition`, `id: <seq>`, data `{seq, sandbox_id, from, to, cause, at}`; a
//! database's are `event: database` with `database_id`, issue 10), replaying those after
//! `?since=<seq>` (or the `Last-Event-ID` header) first; with any other `Accept` it answers the
//! events after `since` as a JSON array (a poll); `GET /v1/sandboxes/{id}/events` is one
//! sandbox's history as a JSON array. A workspace never sees another's events.

use super::openapi::Errors;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::sandbox_id;
use crate::extract::Query;
use crate::AppState;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::Json;
use pandastack_store::EventRow;
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(stream))
        .routes(routes!(history))
}

/// The wire form of an event.
pub fn wire(e: &EventRow) -> pandastack_api::Event {
    pandastack_api::Event {
        seq: e.seq,
        sandbox_id: e.sandbox_id.clone(),
        from: e.from_state.clone(),
        to: e.to_state.clone(),
        cause: e.cause.clone(),
        at: super::rfc3339_ms(e.at),
        at_ms: e.at,
    }
}

#[derive(Debug, Deserialize)]
struct StreamQuery {
    since: Option<i64>,
}

fn sse_event(e: &EventRow) -> Event {
    let (name, data) = if e.subject == EventRow::DATABASE {
        (
            "database",
            serde_json::to_string(&super::databases::wire_event(e)),
        )
    } else {
        ("transition", serde_json::to_string(&wire(e)))
    };
    Event::default()
        .event(name)
        .id(e.seq.to_string())
        .data(data.unwrap_or_default())
}

/// The workspace's state transitions (seed 003 "events stream"). With `Accept:
/// text/event-stream`: an endless stream of `event: transition` (and `event: database`, issue
/// 10; SSE `id:` = `seq`) after first replaying those with `seq > since` (or `Last-Event-ID`).
/// Otherwise: a JSON array of the sandbox transitions with `seq > since` (at most 10000),
/// oldest first.
#[utoipa::path(
    get,
    path = "/events",
    tag = "events",
    operation_id = "workspace_events",
    params(("since" = Option<i64>, Query, description = "Only events after this `seq`.")),
    responses((status = 200, description = "The events.", content((Vec<pandastack_api::Event> = "application/json"), (String = "text/event-stream"))), Errors)
)]
async fn stream(
    State(st): State<AppState>,
    caller: Caller,
    Query(q): Query<StreamQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let since = q.since.or_else(|| {
        headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
    });
    let wants_stream = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream"));
    if !wants_stream {
        let events = st
            .host
            .store
            .events(&caller.workspace_id, None, since.unwrap_or(0), 10_000)
            .await?;
        // A database's events have their own list (`GET /v1/databases/{id}/events`).
        let transitions: Vec<_> = events
            .iter()
            .filter(|e| e.subject == EventRow::SANDBOX)
            .map(wire)
            .collect();
        return Ok(Json(transitions).into_response());
    }
    // Subscribe before reading the backlog so nothing falls between the two.
    let mut rx = st.host.events.subscribe();
    let backlog = match since {
        Some(after) => {
            st.host
                .store
                .events(&caller.workspace_id, None, after, 10_000)
                .await?
        }
        None => Vec::new(),
    };
    let ws = caller.workspace_id.clone();
    let store = st.host.store.clone();
    let stream = async_stream::stream! {
        let mut last = since.unwrap_or(0);
        // Each event is broadcast once, but with several hosts not always in sequence order
        // (crate::cluster's relay): only the backlog already sent is skipped.
        let replayed: std::collections::HashSet<i64> = backlog.iter().map(|e| e.seq).collect();
        let floor = last;
        for e in &backlog {
            last = last.max(e.seq);
            yield Ok::<Event, std::convert::Infallible>(sse_event(e));
        }
        loop {
            match rx.recv().await {
                Ok(e) => {
                    if e.workspace_id == ws && e.seq > floor && !replayed.contains(&e.seq) {
                        last = last.max(e.seq);
                        yield Ok(sse_event(&e));
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    // Fell behind the broadcast buffer: catch up from the store.
                    if let Ok(missed) = store.events(&ws, None, last, 10_000).await {
                        for e in missed {
                            last = e.seq;
                            yield Ok(sse_event(&e));
                        }
                    }
                }
                Err(RecvError::Closed) => return,
            }
        }
    };
    Ok(super::sse(stream))
}

/// One sandbox's transitions so far, oldest first.
#[utoipa::path(
    get,
    path = "/sandboxes/{id}/events",
    tag = "events",
    operation_id = "sandbox_events",
    params(("id" = uuid::Uuid, Path, description = "The sandbox id.")),
    responses((status = 200, description = "The events.", body = Vec<pandastack_api::Event>), Errors)
)]
async fn history(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Vec<pandastack_api::Event>>, ApiError> {
    let id = sandbox_id(&id)?;
    let row = st.host.store.sandbox(&id).await?;
    if row
        .as_ref()
        .map(|r| r.workspace_id != caller.workspace_id)
        .unwrap_or(true)
    {
        return Err(ApiError::NotFound(format!("sandbox {id} not found")));
    }
    let events = st
        .host
        .store
        .events(&caller.workspace_id, Some(&id), 0, 10_000)
        .await?;
    Ok(Json(
        events
            .iter()
            .filter(|e| e.subject == EventRow::SANDBOX)
            .map(wire)
            .collect(),
    ))
}
