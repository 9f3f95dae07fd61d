//! `db create [--label L] [--size 1g|4g|16g] [--always-on] [--storage-mb N] [--cpu N]`:
//! `POST /v1/databases` (only the flags given are sent), then waits (a spinner on a terminal)
//! until the database runs, and prints its id and status.

use super::render;
use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::progress::Spinner;
use clap::Args;
use pandastack_api::CreateDatabase;

/// Flags of `db create`.
#[derive(Debug, Clone, Args)]
pub struct CreateArgs {
    /// Free text shown in listings; also names the database inside (`agent-memory` ->
    /// `agent_memory`).
    #[arg(long)]
    pub label: Option<String>,
    /// RAM tier: 1g (default), 4g or 16g.
    #[arg(long)]
    pub size: Option<String>,
    /// Never stop it when idle.
    #[arg(long)]
    pub always_on: bool,
    /// Storage size, MiB (default 5120).
    #[arg(long, value_name = "MIB")]
    pub storage_mb: Option<u64>,
    /// Whole CPUs (default 2).
    #[arg(long)]
    pub cpu: Option<u32>,
}

impl CreateArgs {
    /// The request body for these flags.
    pub fn body(&self) -> CreateDatabase {
        CreateDatabase {
            label: self.label.clone(),
            size: self.size.clone(),
            always_on: self.always_on.then_some(true),
            storage_mb: self.storage_mb,
            cpu: self.cpu,
            memory_mb: None,
        }
    }
}

/// Creates the database, waits for it and prints it.
pub fn run(args: &CreateArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let dbs = client.databases();
    let accepted = ctx.block(dbs.create_nowait(args.body()))?;
    let spinner = Spinner::start(&format!("provisioning database {}", accepted.id));
    let ready =
        ctx.block(dbs.wait_until_ready(&accepted.id, pandastack_sdk::DATABASE_READY_TIMEOUT));
    spinner.stop();
    let db = ready?;
    if ctx.json() {
        return print_json(&db);
    }
    render::print_one(&db)
}
