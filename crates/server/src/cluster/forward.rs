//! Any host answers any request (issue 12 point 5): a request for a sandbox or a database (or
//! a snapshot deletion) that lives on another host is relayed to that host, streaming both ways (exec
//! streams, SSE, file transfers, the port proxy, WebSockets). The owner authenticates the
//! caller's key against the shared store itself; the relay adds [`FORWARDED_HEADER`] and the
//! node token so the owner serves the request instead of relaying it again.
//!
//! A sandbox whose host is down is answered here from the store (its row: `failed` once its
//! lease expired); operations that need its instance then fail as for any sandbox not running.

use super::{is_down, Cluster, FORWARDED_HEADER, NODE_TOKEN_HEADER};
use crate::error::ApiError;
use crate::relay::{relay, RelayError};
use crate::AppState;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use pandastack_store::HostRow;
use std::net::SocketAddr;
use tracing::debug;

/// Relays requests for other hosts' sandboxes (see the module doc).
pub async fn route(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let cluster = st.cluster.clone();
    if !cluster.cfg.shared || is_relayed(&cluster, &req) {
        return next.run(req).await;
    }
    let (path, method) = (req.uri().path().to_string(), req.method().clone());
    let owner = match owner_of(&st, &path, &method).await {
        Ok(owner) => owner,
        Err(e) => return e.into_response(),
    };
    match owner {
        Some(h) if h.name != cluster.cfg.host_name && !is_down(&h) => {
            // A request without a body can still be answered here (from the store) when the
            // owner turns out to be unreachable or goes down while it is asked.
            let retry = bodiless(&req).then(|| copy_head(&req));
            match (to_host(&cluster, &h, req, ()).await, retry) {
                (Ok(resp), _) => resp,
                (Err(ApiError::BadGateway(why)), Some(again)) => {
                    debug!(host = %h.name, %why, "owner did not answer; answering from the store");
                    next.run(again).await
                }
                (Err(e), _) => e.into_response(),
            }
        }
        // Issue 12 point 7: a hibernated sandbox of a host that is down is taken over here
        // (when its image is in the object store), then served as this host's own. Looking
        // at it (`GET` of the sandbox) or deleting it needs no wake.
        Some(h) if h.name != cluster.cfg.host_name && st.host.objects().is_some() => {
            let id = segment_after(&path, "/v1/sandboxes/");
            let wakes = id.is_some_and(|id| {
                method != Method::DELETE
                    && !(method == Method::GET && path.trim_end_matches('/').ends_with(id))
            });
            if let (true, Some(id)) = (wakes, id) {
                if let Ok(caller) = crate::auth::from_headers(&st.host.store, req.headers()).await {
                    if let Err(e) = st.host.adopt_hibernated(&caller.workspace_id, id).await {
                        return e.into_response();
                    }
                }
            }
            next.run(req).await
        }
        _ => next.run(req).await,
    }
}

/// Whether `req` carries no body (GET, HEAD, DELETE without content), so it can be sent twice.
fn bodiless(req: &Request) -> bool {
    matches!(*req.method(), Method::GET | Method::HEAD | Method::DELETE)
        && req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .is_none_or(|v| v.as_bytes() == b"0")
        && !req
            .headers()
            .contains_key(axum::http::header::TRANSFER_ENCODING)
}

/// A copy of `req`'s head with an empty body (for [`bodiless`] requests), extensions
/// included: they carry the matched route's path parameters, without which the handler's
/// `Path` extractor answers 500.
fn copy_head(req: &Request) -> Request {
    let mut again = Request::new(axum::body::Body::empty());
    *again.method_mut() = req.method().clone();
    *again.uri_mut() = req.uri().clone();
    *again.headers_mut() = req.headers().clone();
    *again.extensions_mut() = req.extensions().clone();
    again
}

/// Whether `req` was relayed by another host of this cluster.
pub fn is_relayed(cluster: &Cluster, req: &Request) -> bool {
    req.headers().contains_key(FORWARDED_HEADER) && cluster.is_node(req.headers())
}

/// The host that must serve `req`: the host of the sandbox or database its path names, or of
/// the snapshot a `DELETE /v1/snapshots/{id}` names; `None` when it names none, or one this
/// store does not know (this host then answers, with the usual 404).
async fn owner_of(st: &AppState, path: &str, method: &Method) -> Result<Option<HostRow>, ApiError> {
    let store = &st.host.store;
    let host = if let Some(id) = segment_after(path, "/v1/sandboxes/") {
        store
            .sandbox(id)
            .await?
            .filter(|r| r.deleted_at.is_none())
            .map(|r| r.host)
    } else if let Some(id) = segment_after(path, "/v1/databases/") {
        store
            .database(id)
            .await?
            .filter(|r| r.deleted_at.is_none())
            .map(|r| r.host)
    } else if let Some(id) = segment_after(path, "/v1/snapshots/") {
        if method == Method::DELETE {
            store.snapshot_host(id).await?
        } else {
            None
        }
    } else {
        None
    };
    let Some(name) = host else { return Ok(None) };
    if name == st.cluster.cfg.host_name {
        return Ok(None);
    }
    Ok(st
        .cluster
        .hosts()
        .await?
        .into_iter()
        .find(|h| h.name == name))
}

/// The path segment after `prefix` (`/v1/sandboxes/{id}/exec` -> `id`), if non-empty.
fn segment_after<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(prefix)?;
    let id = rest.split('/').next()?;
    (!id.is_empty()).then_some(id)
}

/// Relays `req` to host `h`, marked as relayed by this host; `guard` lives until the last
/// byte of the response.
///
/// # Errors
/// 502 when `h` cannot be reached, does not answer HTTP, or goes down before it answers; 500 for an advertise URL that is
/// not `http://HOST:PORT`.
pub async fn to_host<G: Send + Unpin + 'static>(
    cluster: &Cluster,
    h: &HostRow,
    mut req: Request,
    guard: G,
) -> Result<Response, ApiError> {
    let target = advertised_addr(&h.advertise_url).await.ok_or_else(|| {
        ApiError::internal(
            "advertise url",
            format!("host {}: {}", h.name, h.advertise_url),
        )
    })?;
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let headers = req.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&cluster.cfg.host_name) {
        headers.insert(FORWARDED_HEADER, v);
    }
    if let Ok(v) = HeaderValue::from_str(&cluster.cfg.node_token) {
        headers.insert(NODE_TOKEN_HEADER, v);
    }
    debug!(host = %h.name, path = %path, "relaying to the owning host");
    relay(target, req, &path, guard, cluster.gone(&h.name))
        .await
        .map_err(|e| match e {
            RelayError::Connect(e) => {
                ApiError::BadGateway(format!("host {} is unreachable: {e}", h.name))
            }
            RelayError::Upstream(e) => {
                ApiError::BadGateway(format!("host {} did not answer: {e}", h.name))
            }
        })
}

/// Sends `POST {path}` (a `/v1/...` path) to host `h` with `body` as JSON (none: an empty
/// body) and the caller's `Authorization` from `caller` when given, marked as relayed (the
/// second half of a cross-host fork, a drain's take-over, a host operation): `h`'s answer.
///
/// # Errors
/// 500 when `body` does not serialize; as [`to_host`].
pub async fn post_to_host<T: serde::Serialize>(
    cluster: &Cluster,
    h: &HostRow,
    path: &str,
    body: Option<&T>,
    caller: Option<&HeaderMap>,
) -> Result<Response, ApiError> {
    let mut builder = Request::builder().method(Method::POST).uri(path);
    let body = match body {
        Some(b) => {
            builder = builder.header(axum::http::header::CONTENT_TYPE, "application/json");
            axum::body::Body::from(
                serde_json::to_vec(b).map_err(|e| ApiError::internal("host request body", e))?,
            )
        }
        None => axum::body::Body::empty(),
    };
    let mut req = builder
        .body(body)
        .map_err(|e| ApiError::internal("host request", e))?;
    if let Some(auth) = caller.and_then(|h| h.get(axum::http::header::AUTHORIZATION)) {
        req.headers_mut()
            .insert(axum::http::header::AUTHORIZATION, auth.clone());
    }
    to_host(cluster, h, req, ()).await
}

/// The socket address of an `http://HOST:PORT` advertise URL (resolved).
async fn advertised_addr(url: &str) -> Option<SocketAddr> {
    let authority = url.strip_prefix("http://")?.trim_end_matches('/');
    tokio::net::lookup_host(authority).await.ok()?.next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_or_snapshot_id_is_the_segment_after_its_prefix() {
        assert_eq!(
            segment_after("/v1/sandboxes/abc/exec", "/v1/sandboxes/"),
            Some("abc")
        );
        assert_eq!(
            segment_after("/v1/sandboxes/abc", "/v1/sandboxes/"),
            Some("abc")
        );
        assert_eq!(segment_after("/v1/sandboxes/", "/v1/sandboxes/"), None);
        assert_eq!(segment_after("/v1/sandboxes", "/v1/sandboxes/"), None);
        assert_eq!(
            segment_after("/v1/snapshots/snap-1", "/v1/snapshots/"),
            Some("snap-1")
        );
    }
}
