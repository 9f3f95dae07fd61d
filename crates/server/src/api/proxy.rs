//! The port proxy (issue 7): `ANY /v1/sandboxes/{id}/proxy/{port}/{path...}` and, with
//! `--preview-host-suffix`, any request whose Host is `{port}-{id}.{suffix}`.
//!
//! A request is forwarded over HTTP/1.1 to the sandbox's `guest_ip:port` (the engine translates
//! it to the port inside). Bodies stream both ways unbuffered (uploads, downloads, SSE), and an
//! `Upgrade` (WebSocket) is spliced byte for byte once the sandbox answers 101. Our bearer key
//! and preview cookie are stripped before forwarding. Path-based requests authenticate with the
//! bearer key of the sandbox's workspace or a preview token; host-based ones with a preview
//! token (a browser cannot send a bearer header) unless `--public-previews`. What is refused
//! and rewritten so that one tenant's preview cannot reach into another's (control characters
//! in paths, redirects off the host, cookies set for other hosts) is in [`super::proxy_rules`].
//! In a cluster, a host-based preview of another host's sandbox is relayed to that host,
//! which serves it.

use super::proxy_rules as rules;
use crate::auth::{self, Caller};
use crate::error::ApiError;
use crate::extract::sandbox_id;
use crate::host::{Activity, Live};
use crate::previews;
use crate::relay::{relay, RelayError};
use crate::AppState;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter};
use axum::Router;
use std::net::SocketAddr;
use std::sync::Arc;
use tracing::debug;

/// The methods forwarded: every one OpenAPI can name (so the description states the proxy
/// whole); others get 405 with `Allow`.
fn methods() -> MethodFilter {
    MethodFilter::GET
        .or(MethodFilter::HEAD)
        .or(MethodFilter::POST)
        .or(MethodFilter::PUT)
        .or(MethodFilter::PATCH)
        .or(MethodFilter::DELETE)
        .or(MethodFilter::OPTIONS)
        .or(MethodFilter::TRACE)
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/sandboxes/:id/proxy/:port", on(methods(), by_path_root))
        .route("/sandboxes/:id/proxy/:port/", on(methods(), by_path_root))
        .route("/sandboxes/:id/proxy/:port/*rest", on(methods(), by_path))
}

async fn by_path_root(
    st: State<AppState>,
    Path((id, port)): Path<(String, String)>,
    req: Request,
) -> Response {
    by_path(st, Path((id, port, String::new())), req).await
}

async fn by_path(
    State(st): State<AppState>,
    Path((id, port, rest)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    // Borrows of the request must not live across an await (its body is not Sync).
    let (headers, uri) = (req.headers().clone(), req.uri().clone());
    let result = async {
        let id = sandbox_id(&id)?;
        let port = parse_port(&port)?;
        // Forwarded as the client sent it (still percent-encoded): the decoded `rest` could
        // hold a CR LF or a space that would break the request line to the sandbox.
        let path = rules::raw_rest(uri.path()).unwrap_or_else(|| format!("/{rest}"));
        rules::check_path(&path)?;
        let prefix = format!("/v1/sandboxes/{id}/proxy/{port}");
        let live = authorize(&st, &headers, &uri, &id, port, &prefix).await?;
        let query = uri.query().map(str::to_string);
        Ok::<_, ApiError>((live, port, prefix, path, query))
    }
    .await;
    match result {
        Ok((live, port, prefix, path, query)) => {
            serve(&st, &live, port, &prefix, &path, query.as_deref(), req).await
        }
        Err(e) => e.into_response(),
    }
}

/// Middleware in front of the whole app: requests for a preview host are proxied, the rest go
/// on to the API.
pub async fn preview_hosts(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string);
    let Some((port, id)) = host.as_deref().and_then(|h| st.previews.parse_host(h)) else {
        return next.run(req).await;
    };
    let relayed = crate::cluster::forward::is_relayed(&st.cluster, &req);
    if let Some(owner) = preview_owner(&st, &id, relayed).await {
        // Issue 12: another host's sandbox; that host authorizes and serves the preview (the
        // Host header goes along, and upgrades are spliced through).
        return crate::cluster::forward::to_host(&st.cluster, &owner, req, ())
            .await
            .unwrap_or_else(|e| e.into_response());
    }
    let (headers, uri) = (req.headers().clone(), req.uri().clone());
    let path = uri.path().to_string();
    let query = uri.query().map(str::to_string);
    if let Err(e) = rules::check_path(&path) {
        return e.into_response();
    }
    match authorize(&st, &headers, &uri, &id, port, "").await {
        Ok(live) => serve(&st, &live, port, "", &path, query.as_deref(), req).await,
        Err(e) => e.into_response(),
    }
}

/// The live host that runs sandbox `id` when it is not this one (a cluster, and the request
/// not `relayed` here by another host); `None` to serve (or refuse) the preview here.
async fn preview_owner(
    st: &AppState,
    id: &str,
    relayed: bool,
) -> Option<pandastack_store::HostRow> {
    let cluster = &st.cluster;
    if !cluster.cfg.shared || relayed || st.host.get_any(id).is_some() {
        return None;
    }
    let row = st.host.store.sandbox(id).await.ok().flatten()?;
    if row.host == cluster.cfg.host_name || row.deleted_at.is_some() {
        return None;
    }
    cluster
        .hosts()
        .await
        .ok()?
        .into_iter()
        .find(|h| h.name == row.host && !crate::cluster::is_down(h))
}

fn parse_port(text: &str) -> Result<u16, ApiError> {
    text.parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| ApiError::BadRequest(format!("port: '{text}' is not a TCP port (1-65535)")))
}

/// Our API key in `headers`, if the `Authorization` header carries one (`Bearer pds_...`,
/// the scheme in any letter case: issue 23 finding 12); any other `Authorization` belongs to
/// the app in the sandbox and is forwarded.
fn our_key(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(auth::bearer_token)
        .filter(|k| k.starts_with("pds_"))
}

/// The sandbox a proxy request may reach, or why not: our API key of the sandbox's workspace,
/// a preview token (query or cookie) signed for this sandbox and port, or public previews.
async fn authorize(
    st: &AppState,
    headers: &HeaderMap,
    uri: &Uri,
    id: &str,
    port: u16,
    cookie_path: &str,
) -> Result<Arc<Live>, ApiError> {
    if let Some(key) = our_key(headers) {
        let Caller { workspace_id, .. } = auth::authenticate(&st.host.store, key).await?;
        return st.host.get(&workspace_id, id);
    }
    let now = previews::now_secs();
    let token_ok = |t: &str| st.previews.verify(t, id, port, now);
    let from_query = query_token(uri).filter(|t| token_ok(t));
    // Every cookie of our name counts: one planted beside ours must not shadow it.
    let from_cookie = rules::cookie_values(headers, &cookie_name(cookie_path))
        .iter()
        .any(|t| token_ok(t));
    if st.previews.public || from_query.is_some() || from_cookie {
        return st
            .host
            .get_any(id)
            .ok_or_else(|| ApiError::NotFound(format!("sandbox {id} not found")));
    }
    Err(ApiError::Unauthorized(format!(
        "preview of port {port} needs a preview token (POST /v1/sandboxes/{id}/preview-token) or an API key"
    )))
}

fn query_token(uri: &Uri) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == previews::TOKEN_PARAM).then(|| v.to_string())
    })
}

/// Cookie name of a preview: one per path-based preview (a browser sends cookies by path),
/// plain for host-based ones (each preview has its own host).
fn cookie_name(cookie_path: &str) -> String {
    if cookie_path.is_empty() {
        previews::COOKIE.to_string()
    } else {
        format!("{}_{:x}", previews::COOKIE, fnv1a(cookie_path))
    }
}

fn fnv1a(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The query without our token parameter.
fn strip_token(query: Option<&str>) -> Option<String> {
    let rest: Vec<&str> = query?
        .split('&')
        .filter(|kv| !kv.starts_with(&format!("{}=", previews::TOKEN_PARAM)))
        .collect();
    (!rest.is_empty()).then(|| rest.join("&"))
}

/// Forwards `req` to `port` of `live` as `path?query`, or answers a redirect that turns a
/// token in the URL into a cookie.
async fn serve(
    st: &AppState,
    live: &Arc<Live>,
    port: u16,
    prefix: &str,
    path: &str,
    query: Option<&str>,
    req: Request,
) -> Response {
    let uri = req.uri().clone();
    if let Some(token) = query_token(&uri) {
        if req.method() == axum::http::Method::GET
            && st
                .previews
                .verify(&token, &live.id, port, previews::now_secs())
        {
            return cookie_redirect(&token, prefix, path, query);
        }
    }
    let target = match st.host.proxy_target(live, port).await {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    let upstream_path = match strip_token(query) {
        Some(q) => format!("{path}?{q}"),
        None => path.to_string(),
    };
    // The exchange counts as activity until its last byte (the TTL never kills a sandbox in
    // the middle of a download or a WebSocket session).
    match forward(target, req, &upstream_path, prefix, live.activity()).await {
        Ok(resp) => resp,
        Err(RelayError::Connect(e)) => {
            debug!(sandbox_id = %live.id, port, error = %e, "proxy connect");
            let hint = match st.host.listeners(live).await {
                Ok(l) if l.iter().any(|l| l.port == port && !l.reachable()) => format!(
                    "port {port} in sandbox {} listens on loopback only; bind it to 0.0.0.0 to reach it through the proxy",
                    live.id
                ),
                _ => format!("nothing is listening on port {port} in sandbox {}", live.id),
            };
            ApiError::BadGateway(hint).into_response()
        }
        Err(RelayError::Upstream(e)) => ApiError::BadGateway(format!(
            "port {port} in sandbox {} did not answer HTTP: {e}",
            live.id
        ))
        .into_response(),
    }
}

fn cookie_redirect(token: &str, prefix: &str, path: &str, query: Option<&str>) -> Response {
    let max_age = token
        .split_once('.')
        .and_then(|(e, _)| e.parse::<u64>().ok())
        .map_or(0, |e| e.saturating_sub(previews::now_secs()));
    let cookie_path = if prefix.is_empty() { "/" } else { prefix };
    let cookie = format!(
        "{}={token}; Path={cookie_path}; Max-Age={max_age}; HttpOnly; SameSite=Lax",
        cookie_name(prefix)
    );
    // Always a local path of this host (issue 23 finding 9): `//evil.example/` must not
    // become a scheme-relative Location.
    let path = rules::local_path(path);
    let location = match strip_token(query) {
        Some(q) => format!("{prefix}{path}?{q}"),
        None => format!("{prefix}{path}"),
    };
    let mut resp = StatusCode::FOUND.into_response();
    let h = resp.headers_mut();
    if let (Ok(c), Ok(l)) = (
        HeaderValue::from_str(&cookie),
        HeaderValue::from_str(&location),
    ) {
        h.insert(header::SET_COOKIE, c);
        h.insert(header::LOCATION, l);
    }
    resp
}

/// Forwards a proxy request to the sandbox's `target` (our key and preview cookies stripped,
/// `X-Forwarded-*` added); the exchange holds `activity` until its last byte.
async fn forward(
    target: SocketAddr,
    mut req: Request,
    path: &str,
    prefix: &str,
    activity: Activity,
) -> Result<Response, RelayError> {
    let h = req.headers_mut();
    if our_key(h).is_some() {
        h.remove(header::AUTHORIZATION);
    }
    strip_preview_cookies(h);
    if !prefix.is_empty() {
        if let Ok(v) = HeaderValue::from_str(prefix) {
            h.insert("x-forwarded-prefix", v);
        }
    }
    if let Some(host) = h.get(header::HOST).cloned() {
        h.insert("x-forwarded-host", host);
    }
    h.insert("x-forwarded-proto", HeaderValue::from_static("http"));
    let mut resp = relay(target, req, path, activity, std::future::pending()).await?;
    rules::rewrite_set_cookies(resp.headers_mut(), prefix);
    Ok(resp)
}

/// Removes our preview cookies from the `Cookie` headers (the sandbox's own cookies stay).
fn strip_preview_cookies(headers: &mut HeaderMap) {
    let kept: Vec<String> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|kv| !kv.is_empty() && !kv.starts_with(previews::COOKIE))
        .map(str::to_string)
        .collect();
    headers.remove(header::COOKIE);
    if !kept.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&kept.join("; ")) {
            headers.insert(header::COOKIE, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_our_cookies_are_stripped_but_the_rest_is_kept() {
        assert_eq!(
            strip_token(Some("a=1&ps_token=x&b=2")).as_deref(),
            Some("a=1&b=2")
        );
        assert_eq!(strip_token(Some("ps_token=x")), None);
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("ps_preview=t; app=1; ps_preview_ab12=u"),
        );
        strip_preview_cookies(&mut h);
        assert_eq!(h.get(header::COOKIE).unwrap(), "app=1");
        let uri: Uri = "/x?y=1&ps_token=abc".parse().unwrap();
        assert_eq!(query_token(&uri).as_deref(), Some("abc"));
    }
}
