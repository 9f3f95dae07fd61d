//! `db delete ID`, `db wake ID`, `db reset-credentials ID` and `db update ID
//! [--always-on BOOL] [--storage-mb N]`.

use super::render;
use crate::commands::{print_json, Ctx};
use crate::error::{CliError, Result};
use crate::output;
use clap::Args;
use pandastack_api::UpdateDatabase;

/// Deletes the database.
pub fn delete(id: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    ctx.block(client.databases().delete(id))?;
    if ctx.json() {
        return print_json(&serde_json::json!({ "id": id, "deleted": true }));
    }
    output::line(&format!("deleted {id}"))
}

/// Starts the database and prints its status.
pub fn wake(id: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let w = ctx.block(client.databases().wake(id))?;
    if ctx.json() {
        return print_json(&w);
    }
    output::pairs(&[("id", w.id), ("status", w.status)])
}

/// New credentials; prints the new connection URL.
pub fn reset_credentials(id: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let db = ctx.block(client.databases().reset_credentials(id))?;
    if ctx.json() {
        return print_json(&db);
    }
    output::line(db.connection_url.as_deref().unwrap_or("-"))
}

/// Flags of `db update`.
#[derive(Debug, Clone, Args)]
pub struct UpdateArgs {
    #[arg(value_name = "DATABASE_ID")]
    pub id: String,
    /// true: never stop it when idle; false: stop it after the idle time.
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    pub always_on: Option<bool>,
    /// A larger storage size, MiB (it never shrinks).
    #[arg(long, value_name = "MIB")]
    pub storage_mb: Option<u64>,
}

/// Changes the database and prints it.
pub fn update(args: &UpdateArgs, ctx: &Ctx) -> Result<()> {
    if args.always_on.is_none() && args.storage_mb.is_none() {
        return Err(CliError::Usage(
            "nothing to change: give --always-on BOOL and/or --storage-mb MIB".into(),
        ));
    }
    let client = ctx.client()?;
    let db = ctx.block(client.databases().update(
        &args.id,
        UpdateDatabase {
            always_on: args.always_on,
            storage_mb: args.storage_mb,
        },
    ))?;
    if ctx.json() {
        return print_json(&db);
    }
    render::print_one(&db)
}
