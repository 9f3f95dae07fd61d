//! `pandastack template ...`: `list` asks the server; `bake` runs on the server host itself.

pub mod bake;
pub mod list;

use super::{Ctx, GlobalOpts};
use crate::error::Result;
use clap::{Args, Subcommand};

/// `pandastack template [-o json] COMMAND`.
#[derive(Debug, Args)]
pub struct TemplateArgs {
    #[command(flatten)]
    pub opts: GlobalOpts,
    #[command(subcommand)]
    pub command: TemplateCommand,
}

/// `pandastack template ...` commands.
#[derive(Debug, Subcommand)]
pub enum TemplateCommand {
    /// List the templates baked on the server.
    List,
    /// Bake templates on this host (the server host; needs root and mmdebstrap).
    Bake(bake::BakeArgs),
}

/// Runs a template command; returns the exit code.
pub fn run(cmd: TemplateCommand, ctx: &Ctx) -> Result<i32> {
    match cmd {
        TemplateCommand::List => list::run(ctx).map(|_| 0),
        TemplateCommand::Bake(a) => bake::run(&a),
    }
}
