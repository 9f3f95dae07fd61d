//! `/mcp`: the MCP server (`pandastack-mcp`) over Streamable HTTP. The bearer key is checked
//! here, as for `/v1` (401 `{"error"}` otherwise); the tools then call this server's own REST
//! API on the loopback with that key, so they see exactly the caller's workspace and behave as
//! the REST API does. Tool calls are rate-limited per workspace (`--mcp-calls-per-second`).

use crate::auth::authenticate;
use crate::error::ApiError;
use crate::AppState;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::Router;
use pandastack_mcp::{HttpCaller, HttpService, SdkError};
use std::net::SocketAddr;

/// The MCP service of one server.
#[derive(Clone)]
pub struct Endpoint {
    service: HttpService,
}

impl Endpoint {
    /// The endpoint of a server listening on `listen`: tools call `http://<listen>` (the
    /// loopback when it listens on every address); `Host` must be a loopback name or the
    /// listen address, unless it listens on every address.
    ///
    /// # Errors
    /// The SDK client cannot be built for that address.
    pub fn new(listen: SocketAddr, calls_per_second: f64) -> Result<Endpoint, SdkError> {
        let ip = listen.ip();
        let (target, allowed) = if ip.is_unspecified() {
            (
                SocketAddr::new([127, 0, 0, 1].into(), listen.port()),
                Vec::new(),
            )
        } else {
            let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).into();
            hosts.push(ip.to_string());
            (listen, hosts)
        };
        let service =
            pandastack_mcp::http_service(&format!("http://{target}"), calls_per_second, allowed)?;
        Ok(Endpoint { service })
    }
}

/// The `/mcp` service: key check, then rmcp.
pub fn service(state: AppState) -> Router {
    Router::new()
        .fallback_service(state.mcp.service.clone())
        .layer(axum::middleware::from_fn_with_state(state, authorize))
}

/// Resolves the bearer key and hands the caller to the tools.
async fn authorize(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    let key = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::auth::bearer_token)
        .map(str::to_string);
    let Some(key) = key else {
        return ApiError::Unauthorized("missing Authorization: Bearer <API key>".into())
            .into_response();
    };
    match authenticate(&st.host.store, &key).await {
        Ok(caller) => {
            req.extensions_mut().insert(HttpCaller {
                workspace_id: caller.workspace_id,
                api_key: key,
            });
            next.run(req).await
        }
        Err(e) => e.into_response(),
    }
}
