//! The PandaStack MCP server (Model Context Protocol, on the official Rust SDK `rmcp`): tools to
//! create sandboxes, run code in a persistent kernel (charts come back as image content), run
//! commands, read and write files, snapshot, restore, fork, pause and resume.
//!
//! Every tool is a few calls of the Rust SDK (`pandastack-sdk`), so it behaves exactly as the
//! REST API does (validation, errors, retries) and sees only the caller's workspace. Two
//! transports:
//!
//! - **Streamable HTTP** at `/mcp` on the API server ([`http_service`]): the server
//!   authenticates the bearer key and puts an [`HttpCaller`] into the request; each tool call
//!   uses an SDK client for that key against the server's own address.
//! - **stdio** ([`serve_stdio`], `pandastack mcp`): for desktop agent hosts; one SDK client from
//!   `PANDASTACK_API` / `PANDASTACK_API_KEY`.
//!
//! Tool calls are rate-limited per workspace ([`Limiter`]); a refused call, like any API error,
//! is a tool error result carrying the message, never a protocol error.

mod contexts;
pub mod inputs;
mod limiter;
mod render;
pub mod tools;

pub use contexts::ContextCache;
pub use limiter::{Limiter, DEFAULT_CALLS_PER_SECOND};
pub use pandastack_sdk::Error as SdkError;

/// The Streamable HTTP service [`http_service`] returns (a `tower` service).
pub type HttpService = StreamableHttpService<Tools, LocalSessionManager>;

use pandastack_sdk::Client;
use rmcp::model::CallToolResponse;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use std::sync::Arc;
use tracing::info;

/// What the API server's auth layer puts into the extensions of an `/mcp` request.
#[derive(Debug, Clone)]
pub struct HttpCaller {
    /// The key's workspace (the rate limit's bucket).
    pub workspace_id: String,
    /// The bearer key itself, used for the tools' API calls.
    pub api_key: String,
}

/// Where a tool call gets its SDK client.
#[derive(Debug, Clone)]
enum Backend {
    /// stdio: one client, one workspace.
    Fixed(Client),
    /// HTTP: the caller's key on a client of the server's own address (connection pool shared).
    PerRequest(Client),
}

/// State shared by every session of one endpoint.
#[derive(Debug)]
pub struct Shared {
    backend: Backend,
    limiter: Limiter,
    contexts: ContextCache,
}

/// The MCP service of one session: tools over [`Shared`].
#[derive(Debug, Clone)]
pub struct Tools {
    shared: Arc<Shared>,
}

/// Why a tool call has no client.
const NO_CALLER: &str = "no API key on this request: send Authorization: Bearer <API key>";

impl Tools {
    fn caller(&self, ctx: &RequestContext<RoleServer>) -> Result<(Client, String), String> {
        match &self.shared.backend {
            Backend::Fixed(c) => Ok((c.clone(), "local".to_string())),
            Backend::PerRequest(base) => {
                let caller = ctx
                    .extensions
                    .get::<http::request::Parts>()
                    .and_then(|p| p.extensions.get::<HttpCaller>())
                    .ok_or_else(|| NO_CALLER.to_string())?;
                Ok((
                    base.with_api_key(&caller.api_key),
                    caller.workspace_id.clone(),
                ))
            }
        }
    }
}

fn tool_error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("pandastack", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "PandaStack sandboxes: create_sandbox, then run_code (a persistent Python kernel: \
                 state is kept between calls; charts come back as images), exec for shell \
                 commands, read_file/write_file/list_files for files, snapshot/restore/fork to \
                 save or branch state, kill_sandbox when done.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::definitions()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let (client, workspace) = match self.caller(&context) {
            Ok(c) => c,
            Err(message) => return Ok(tool_error(message).into()),
        };
        if let Err(wait) = self.shared.limiter.check(&workspace) {
            return Ok(tool_error(format!(
                "rate limited: too many tool calls for this workspace; retry after {:.1} s",
                wait.as_secs_f64()
            ))
            .into());
        }
        let started = std::time::Instant::now();
        let result = tools::call(
            &request.name,
            request.arguments,
            &client,
            &workspace,
            &self.shared.contexts,
        )
        .await;
        info!(tool = %request.name, workspace_id = %workspace, ok = result.is_ok(), ms = started.elapsed().as_millis() as u64, "mcp tool call");
        Ok(match result {
            Ok(r) => r,
            Err(tools::ToolError(message)) => tool_error(message),
        }
        .into())
    }
}

/// The Streamable HTTP service to mount at `/mcp`: each request must carry an [`HttpCaller`]
/// extension (the API server's auth layer adds it); tools call the API at `api_url` (the server
/// itself) with the caller's key. `allowed_hosts` are the `Host` values accepted (empty: any),
/// against DNS rebinding.
///
/// # Errors
/// `api_url` is not a usable `http://` URL.
pub fn http_service(
    api_url: &str,
    calls_per_second: f64,
    allowed_hosts: Vec<String>,
) -> Result<HttpService, SdkError> {
    // The key is replaced per call (`with_api_key`); this one is never sent.
    let base = Client::new(api_url, "pds_unused")?;
    let shared = Arc::new(Shared {
        backend: Backend::PerRequest(base),
        limiter: Limiter::new(calls_per_second),
        contexts: ContextCache::default(),
    });
    let config = StreamableHttpServerConfig::default().with_allowed_hosts(allowed_hosts);
    Ok(StreamableHttpService::new(
        move || {
            Ok(Tools {
                shared: shared.clone(),
            })
        },
        LocalSessionManager::default().into(),
        config,
    ))
}

/// Serves MCP on stdin/stdout with `client` until the host closes stdin.
///
/// # Errors
/// The handshake failed or the transport broke.
pub async fn serve_stdio(client: Client, calls_per_second: f64) -> Result<(), std::io::Error> {
    let tools = Tools {
        shared: Arc::new(Shared {
            backend: Backend::Fixed(client),
            limiter: Limiter::new(calls_per_second),
            contexts: ContextCache::default(),
        }),
    };
    let running = tools
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| std::io::Error::other(format!("mcp handshake: {e}")))?;
    running
        .waiting()
        .await
        .map_err(|e| std::io::Error::other(format!("mcp session: {e}")))?;
    Ok(())
}
