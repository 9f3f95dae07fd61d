//! An HTTP/1.1 relay to another server: the port proxy's hop to a sandbox (issue 7) and a
//! host's hop to the host that owns a sandbox (issue 12).
//!
//! Bodies stream both ways unbuffered (uploads, downloads, SSE, exec streams), hop-by-hop
//! headers (RFC 9110 §7.6.1) are dropped, and an `Upgrade` (WebSocket) is spliced byte for
//! byte once the other side answers 101. Whatever `guard` is (an activity guard, a placement
//! counter) lives until the exchange's last byte.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::time::Duration;
use tracing::debug;

/// How long connecting to the other side may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Hop-by-hop headers (RFC 9110 §7.6.1), never forwarded as such.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Why a relay failed.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// Nothing accepted the connection (or not within 5 s).
    #[error("connect: {0}")]
    Connect(String),
    /// The other side accepted but did not answer HTTP.
    #[error("upstream: {0}")]
    Upstream(String),
}

pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
}

/// Removes hop-by-hop headers (keeping `Connection: upgrade` + `Upgrade` when `upgrade`).
pub fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    let listed: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty() && t != "upgrade")
        .collect();
    for name in HOP_BY_HOP
        .iter()
        .copied()
        .chain(listed.iter().map(String::as_str))
    {
        if upgrade && (name == "connection" || name == "upgrade") {
            continue;
        }
        headers.remove(name);
    }
    if upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
}

/// Sends `req` to `target` with request target `path` (path and query) and returns its
/// response, streaming. `abandon` is how long to wait for the response's head: when it
/// completes first (with why), the relay gives up. The port proxy never gives up (a sandbox's
/// app may think for long); a host relay gives up once the other host is down (a stopped
/// process still accepts connections through its kernel's backlog, and never answers).
///
/// # Errors
/// [`RelayError::Connect`] when `target` does not accept; [`RelayError::Upstream`] when it
/// does not answer HTTP, or `abandon` completed first.
pub async fn relay<G: Send + Unpin + 'static>(
    target: SocketAddr,
    mut req: Request,
    path: &str,
    guard: G,
    abandon: impl std::future::Future<Output = String>,
) -> Result<Response, RelayError> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(target))
        .await
        .map_err(|_| RelayError::Connect("timed out".into()))?
        .map_err(|e| RelayError::Connect(e.to_string()))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| RelayError::Upstream(e.to_string()))?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            debug!(error = %e, "relay connection");
        }
    });

    let upgrade = is_upgrade(req.headers());
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    parts.uri = path
        .parse()
        .map_err(|e: axum::http::uri::InvalidUri| RelayError::Upstream(e.to_string()))?;
    parts.version = axum::http::Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers, upgrade);

    let mut resp = tokio::select! {
        resp = sender.send_request(Request::from_parts(parts, body)) => {
            resp.map_err(|e| RelayError::Upstream(e.to_string()))?
        }
        why = abandon => return Err(RelayError::Upstream(why)),
    };
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client) = client_upgrade {
            let upstream = hyper::upgrade::on(&mut resp);
            tokio::spawn(async move {
                let _guard = guard;
                match (client.await, upstream.await) {
                    (Ok(c), Ok(u)) => {
                        let _ = tokio::io::copy_bidirectional(
                            &mut TokioIo::new(c),
                            &mut TokioIo::new(u),
                        )
                        .await;
                    }
                    (c, u) => debug!(
                        client = c.is_ok(),
                        upstream = u.is_ok(),
                        "relay upgrade failed"
                    ),
                }
            });
        }
        let (parts, _) = resp.into_parts();
        return Ok(Response::from_parts(parts, Body::empty()));
    }
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers, false);
    Ok(Response::from_parts(
        parts,
        Body::new(Guarded {
            body,
            _guard: guard,
        }),
    ))
}

/// A response body that keeps `_guard` alive while it streams.
struct Guarded<B, G> {
    body: B,
    _guard: G,
}

impl<B: http_body::Body + Unpin, G: Unpin> http_body::Body for Guarded<B, G> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_go_except_an_upgrade() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("Upgrade, X-Secret"),
        );
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        assert!(is_upgrade(&h));
        strip_hop_by_hop(&mut h, true);
        assert_eq!(h.get(header::UPGRADE).unwrap(), "websocket");
        assert!(h.get("x-secret").is_none() && h.get(header::TE).is_none());
        strip_hop_by_hop(&mut h, false);
        assert!(h.get(header::UPGRADE).is_none() && h.get(header::CONNECTION).is_none());
    }
}
