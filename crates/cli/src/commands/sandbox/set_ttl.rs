//! `sandbox set-ttl ID SECS` (also `--ttl SECS`, the seed 003 form): `PATCH
//! /v1/sandboxes/{id}/lifecycle` with `{"ttl_seconds": SECS}`; prints the new lifecycle.

use super::lifecycle;
use crate::commands::Ctx;
use crate::error::Result;
use clap::{ArgGroup, Args};
use pandastack_api::LifecyclePatch;

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
    let patch = LifecyclePatch {
        ttl_seconds: args.secs.or(args.ttl),
        persistent: None,
    };
    let reply = ctx.client()?.patch_json(
        &["sandboxes", &args.id, "lifecycle"],
        &crate::commands::body(&patch)?,
    )?;
    lifecycle::print(&reply, "PATCH /v1/sandboxes/{id}/lifecycle", ctx)
}
