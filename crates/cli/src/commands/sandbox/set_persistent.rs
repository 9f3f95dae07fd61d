//! `sandbox set-persistent ID true|false` (also `--persistent true|false`, the seed 003 form):
//! `PATCH /v1/sandboxes/{id}/lifecycle` with `{"persistent": bool}`; prints the new lifecycle.
//! A persistent sandbox ignores its TTL and is hibernated when idle.

use super::lifecycle;
use crate::commands::Ctx;
use crate::error::Result;
use clap::builder::BoolishValueParser;
use clap::{ArgGroup, Args};

/// Flags of `sandbox set-persistent`.
#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("setting").required(true).args(["value", "persistent"])))]
pub struct SetPersistentArgs {
    /// The sandbox id.
    #[arg(value_name = "SANDBOX_ID")]
    pub id: String,
    /// `true` or `false` (also yes/no, on/off, 1/0).
    #[arg(value_name = "BOOL", value_parser = BoolishValueParser::new())]
    pub value: Option<bool>,
    /// The same as BOOL, as a flag; `--persistent` alone means true.
    #[arg(long, value_name = "BOOL", value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub persistent: Option<bool>,
}

/// Sets persistence and prints the lifecycle.
pub fn run(args: &SetPersistentArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(&args.id))?;
    // The group makes one of the two required.
    let persistent = args.value.or(args.persistent).unwrap_or(true);
    let l = ctx.block(sandbox.set_persistent(persistent))?;
    lifecycle::print(&l, ctx)
}
