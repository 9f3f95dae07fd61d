//! `sandbox set-ttl ID SECS` (also `--ttl SECS`, the seed 003 form): `PATCH
//! /v1/sandboxes/{id}/lifecycle` with `{"ttl_seconds": SECS}`; prints the new lifecycle.

use super::lifecycle;
use crate::commands::Ctx;
use crate::error::{CliError, Result};
use clap::{ArgGroup, Args};

/// Flags of `sandbox set-ttl`.
#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("setting").required(true).args(["secs", "ttl"])))]
pub struct SetTtlArgs {
    /// The sandbox id.
    #[arg(value_name = "SANDBOX_ID")]
    pub id: String,
    /// Seconds until the sandbox is killed, refreshed by any API activity.
    #[arg(value_name = "SECS")]
    pub secs: Option<i64>,
    /// The same as SECS, as a flag.
    #[arg(long, value_name = "SECS")]
    pub ttl: Option<i64>,
}

/// Sets the TTL and prints the lifecycle.
pub fn run(args: &SetTtlArgs, ctx: &Ctx) -> Result<()> {
    let secs = args
        .secs
        .or(args.ttl)
        .ok_or_else(|| CliError::Usage("give the TTL as SECS or --ttl SECS".into()))?;
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(&args.id))?;
    let l = ctx.block(sandbox.set_ttl(secs))?;
    lifecycle::print(&l, ctx)
}
