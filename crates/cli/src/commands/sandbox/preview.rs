//! `sandbox preview ID --port N [--ttl SECS]`: `POST /v1/sandboxes/{id}/preview-token` (issue
//! 7); prints a URL a browser can open without an API key until the token expires.

use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;
use clap::Args;

/// Flags of `sandbox preview`.
#[derive(Debug, Clone, Args)]
pub struct PreviewArgs {
    /// The sandbox id (a UUID).
    #[arg(value_name = "SANDBOX_ID")]
    pub id: String,
    /// The port inside the sandbox.
    #[arg(long)]
    pub port: u16,
    /// Seconds the URL stays valid (server default 3600).
    #[arg(long, value_name = "SECS")]
    pub ttl: Option<u64>,
}

/// Prints the signed preview URL.
pub fn run(args: &PreviewArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(&args.id))?;
    let token = ctx.block(sandbox.preview_token(args.port, args.ttl))?;
    if ctx.json() {
        return print_json(&token);
    }
    output::line(&token.url)?;
    eprintln!("valid until {}", token.expires_at);
    Ok(())
}
