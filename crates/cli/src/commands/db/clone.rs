//! `db clone ID [--label L] [--size S] [--storage-mb N]`: `POST /v1/databases/{id}/clone`,
//! then waits until the clone runs and prints it.

use super::render;
use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::progress::Spinner;
use clap::Args;
use pandastack_api::CloneDatabase;

/// Flags of `db clone`.
#[derive(Debug, Clone, Args)]
pub struct CloneArgs {
    /// The source database.
    #[arg(value_name = "DATABASE_ID")]
    pub id: String,
    /// Label of the clone (default: `<source label> (clone)`).
    #[arg(long)]
    pub label: Option<String>,
    /// RAM tier of the clone (default: the source's).
    #[arg(long)]
    pub size: Option<String>,
    /// Storage of the clone, MiB (default and minimum: the source's).
    #[arg(long, value_name = "MIB")]
    pub storage_mb: Option<u64>,
}

/// Clones, waits and prints the clone.
pub fn run(args: &CloneArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let spinner = Spinner::start(&format!("cloning database {}", args.id));
    let made = ctx.block(client.databases().clone(
        &args.id,
        CloneDatabase {
            label: args.label.clone(),
            size: args.size.clone(),
            target_time: None,
            storage_mb: args.storage_mb,
        },
    ));
    spinner.stop();
    let db = made?;
    if ctx.json() {
        return print_json(&db);
    }
    render::print_one(&db)
}
