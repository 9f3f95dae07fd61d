//! `pandastack snapshot ...`: the workspace's snapshots (contract §2.7). Take one with
//! `pandastack sandbox snapshot ID`; restore with `sandbox create --from-snapshot ID`.

pub mod delete;
pub mod list;

use super::{Ctx, GlobalOpts};
use crate::error::Result;
use clap::{Args, Subcommand};

/// `pandastack snapshot [-o json] COMMAND`.
#[derive(Debug, Args)]
pub struct SnapshotArgs {
    #[command(flatten)]
    pub opts: GlobalOpts,
    #[command(subcommand)]
    pub command: SnapshotCommand,
}

/// `pandastack snapshot ...` commands.
#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// List snapshots, optionally of one sandbox.
    List(list::ListArgs),
    /// Delete a snapshot.
    Delete {
        /// The snapshot id (`snap-...`).
        #[arg(value_name = "SNAPSHOT_ID")]
        id: String,
    },
}

/// Runs a snapshot command; returns the exit code.
pub fn run(cmd: SnapshotCommand, ctx: &Ctx) -> Result<i32> {
    match cmd {
        SnapshotCommand::List(a) => list::run(&a, ctx),
        SnapshotCommand::Delete { id } => delete::run(&id, ctx),
    }
    .map(|_| 0)
}
