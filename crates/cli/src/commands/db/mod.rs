//! `pandastack db ...`: databases (seed 001 section 4, contract §2.12). `db create --label
//! agent-memory --size 1g` waits until the database runs; `db connection ID` prints the URL to
//! hand to a sandbox (e.g. as an environment variable).

pub mod change;
pub mod clone;
pub mod create;
pub mod get;
pub mod list;
pub mod render;

use super::{Ctx, GlobalOpts};
use crate::error::Result;
use clap::{Args, Subcommand};

/// `pandastack db [-o json] COMMAND`.
#[derive(Debug, Args)]
pub struct DbArgs {
    #[command(flatten)]
    pub opts: GlobalOpts,
    #[command(subcommand)]
    pub command: DbCommand,
}

/// `pandastack db ...` commands.
#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// Create a database and wait until it runs; prints its id and status.
    Create(create::CreateArgs),
    /// Print a database's connection URL.
    Connection {
        #[arg(value_name = "DATABASE_ID")]
        id: String,
    },
    /// List the workspace's databases (without credentials).
    List,
    /// Show one database, with its credentials.
    Get {
        #[arg(value_name = "DATABASE_ID")]
        id: String,
    },
    /// Delete a database and all its data (irreversible).
    Delete {
        #[arg(value_name = "DATABASE_ID")]
        id: String,
    },
    /// Clone a database (a consistent copy of its data now) and wait until the clone runs.
    Clone(clone::CloneArgs),
    /// Give the owner a new password; open sessions are ended. Prints the new URL.
    ResetCredentials {
        #[arg(value_name = "DATABASE_ID")]
        id: String,
    },
    /// Start a stopped database (a connection starts it too).
    Wake {
        #[arg(value_name = "DATABASE_ID")]
        id: String,
    },
    /// Change `always_on` or grow the storage.
    Update(change::UpdateArgs),
}

/// Runs a database command; returns the exit code.
pub fn run(cmd: DbCommand, ctx: &Ctx) -> Result<i32> {
    match cmd {
        DbCommand::Create(a) => create::run(&a, ctx),
        DbCommand::Connection { id } => get::connection(&id, ctx),
        DbCommand::List => list::run(ctx),
        DbCommand::Get { id } => get::run(&id, ctx),
        DbCommand::Delete { id } => change::delete(&id, ctx),
        DbCommand::Clone(a) => clone::run(&a, ctx),
        DbCommand::ResetCredentials { id } => change::reset_credentials(&id, ctx),
        DbCommand::Wake { id } => change::wake(&id, ctx),
        DbCommand::Update(a) => change::update(&a, ctx),
    }
    .map(|_| 0)
}
