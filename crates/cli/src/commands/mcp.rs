//! `pandastack mcp [--calls-per-second R]`: the MCP server (`pandastack-mcp`) on stdin/stdout, for
//! desktop agent hosts (they start it as a subprocess). The tools call the server named by
//! `PANDASTACK_API` (or the config file) with `PANDASTACK_API_KEY`. stdout carries only the
//! protocol; nothing else is printed there. Ends when the host closes stdin.

use crate::commands::Ctx;
use crate::error::{CliError, Result};
use clap::Args;

/// Default tool calls per second (bursts of twice that).
pub const DEFAULT_CALLS_PER_SECOND: f64 = pandastack_mcp::DEFAULT_CALLS_PER_SECOND;

/// Flags of `pandastack mcp`.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// Tool calls allowed per second, bursts of twice that (0: no limit).
    #[arg(long, env = "PANDASTACK_MCP_CALLS_PER_SECOND", default_value_t = DEFAULT_CALLS_PER_SECOND)]
    pub calls_per_second: f64,
}

/// Serves until stdin closes.
pub fn run(args: &McpArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    ctx.block(pandastack_mcp::serve_stdio(client, args.calls_per_second))
        .map_err(|e| CliError::io("serving MCP on stdio", e))
}
