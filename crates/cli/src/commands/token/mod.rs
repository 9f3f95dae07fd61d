//! `pandastack token ...`: API keys of the caller's workspace, `/v1/me/tokens` (contract §2.9).

pub mod create;
pub mod list;
pub mod revoke;

use super::{Ctx, GlobalOpts};
use crate::error::Result;
use clap::{Args, Subcommand};

/// `pandastack token [-o json] COMMAND`.
#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(flatten)]
    pub opts: GlobalOpts,
    #[command(subcommand)]
    pub command: TokenCommand,
}

/// `pandastack token ...` commands.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create an API key; its secret is shown once.
    Create(create::CreateArgs),
    /// List the workspace's API keys (prefixes only).
    List,
    /// Revoke an API key by its prefix.
    Revoke {
        /// The key's prefix (its first 12 characters, `pds_...`).
        #[arg(value_name = "PREFIX")]
        prefix: String,
    },
}

/// Runs a token command; returns the exit code.
pub fn run(cmd: TokenCommand, ctx: &Ctx) -> Result<i32> {
    match cmd {
        TokenCommand::Create(a) => create::run(&a, ctx),
        TokenCommand::List => list::run(ctx),
        TokenCommand::Revoke { prefix } => revoke::run(&prefix, ctx),
    }
    .map(|_| 0)
}
