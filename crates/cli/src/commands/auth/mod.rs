//! `pandastack auth ...`: the server URL and API key the CLI uses (see [`crate::config`]).

pub mod login;
pub mod status;

use super::{Ctx, GlobalOpts};
use crate::error::Result;
use clap::{Args, Subcommand};

/// `pandastack auth [-o json] COMMAND`.
#[derive(Debug, Args)]
pub struct AuthArgs {
    #[command(flatten)]
    pub opts: GlobalOpts,
    #[command(subcommand)]
    pub command: AuthCommand,
}

/// `pandastack auth ...` commands.
#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Check an API key against the server and save it to ~/.config/pandastack/config.json.
    Login(login::LoginArgs),
    /// Show which server and key are in use and whether the server accepts the key.
    Status,
}

/// Runs an auth command; returns the exit code.
pub fn run(cmd: AuthCommand, ctx: &Ctx) -> Result<i32> {
    match cmd {
        AuthCommand::Login(a) => login::run(&a, ctx),
        AuthCommand::Status => status::run(ctx),
    }
    .map(|_| 0)
}
