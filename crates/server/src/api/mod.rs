//! The REST API under `/v1`: one module per resource, each with its own `router()`, merged in
//! [`crate::app`]. Handlers parse input into typed values, call the host agent, and map the
//! result to the wire types of `pandastack-api`.

pub mod build_form;
pub mod databases;
pub mod events;
pub mod exec;
pub mod fork;
pub mod fs;
pub mod fs_special;
pub mod hosts;
pub mod lifecycle;
pub mod logs;
pub mod mcp;
pub mod metrics;
pub mod metrics_scope;
pub mod openapi;
pub mod ports;
pub mod proxy;
pub mod proxy_rules;
pub mod repl;
pub mod sandbox_network;
pub mod sandboxes;
pub mod snapshots;
pub mod template_builds;
pub mod templates;
pub mod tokens;
pub mod volumes;

use pandastack_store::SandboxRow;

/// Runs a lifecycle operation (create, delete, snapshot, hibernate, fork, ...) as its own task
/// and waits for it. A client that disconnects only stops waiting: the operation still runs to
/// its end instead of being dropped half-way (issue 8: a DELETE given up by its client must
/// still delete).
///
/// # Errors
/// The operation's error; 500 if its task panicked.
pub async fn detached<T, F>(op: F) -> Result<T, crate::error::ApiError>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T, crate::error::ApiError>> + Send + 'static,
{
    tokio::spawn(op)
        .await
        .map_err(|e| crate::error::ApiError::internal("lifecycle task", e))?
}

/// RFC 3339 (UTC, seconds) of a Unix-ms time.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// RFC 3339 (UTC, milliseconds) of a Unix-ms time (events).
pub fn rfc3339_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The wire form of a sandbox row (contract §7 "Sandbox JSON": integer cpu and memory_mb,
/// metadata echoed; envs never shown).
pub fn sandbox_json(r: &SandboxRow) -> pandastack_api::Sandbox {
    pandastack_api::Sandbox {
        id: r.id.clone(),
        template: r.template.clone(),
        status: r.status.clone(),
        cpu: r.cpu,
        memory_mb: r.memory_mb,
        metadata: r.metadata.clone(),
        guest_ip: r.guest_ip.clone(),
        allow_internet_access: crate::host::network::policy_of(r).map(|p| p.internet),
        network: crate::host::network::policy_of(r).map(|p| pandastack_api::SandboxNetwork {
            allow_out: Some(p.allow_out.iter().map(ToString::to_string).collect()),
            deny_out: Some(p.deny_out.iter().map(ToString::to_string).collect()),
        }),
        boot_ms: r.boot_ms,
        boot_mode: r.boot_mode.clone(),
        created_at: rfc3339(r.created_at),
        persistent: r.persistent,
        ttl_seconds: r.ttl_seconds,
        from_snapshot: r.from_snapshot.clone(),
        disk_mb: r.disk_mb,
        host: r.host.clone(),
        volumes: crate::host::volumes::sandbox_volumes(&r.volumes),
    }
}

/// A Server-Sent Events response: `text/event-stream; charset=utf-8` (without the charset the
/// Python SDK decodes UTF-8 as ISO-8859-1, contract §1.6), LF framing, and a `: ping` comment
/// every 10 s of silence so clients with read timeouts (Py: 30 s) keep the stream (§3).
pub fn sse<S>(stream: S) -> axum::response::Response
where
    S: futures::Stream<Item = Result<axum::response::sse::Event, std::convert::Infallible>>
        + Send
        + 'static,
{
    use axum::response::sse::{KeepAlive, Sse};
    use axum::response::IntoResponse;
    let mut resp = Sse::new(stream)
        .keep_alive(
            KeepAlive::new()
                .interval(std::time::Duration::from_secs(10))
                .text("ping"),
        )
        .into_response();
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    resp
}
