//! `pandastack template ...`: `list`, `get`, `delete`, `build`, `builds` and `build-logs` ask
//! the server (contract §2.8); `bake` runs on the server host itself.

pub mod bake;
pub mod build;
pub mod build_logs;
pub mod builds;
pub mod delete;
pub mod get;
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
    /// List the templates this workspace can use (the built-ins and its own).
    List,
    /// Show one template.
    Get {
        /// Template name.
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Delete one of this workspace's templates (its running sandboxes keep running).
    Delete {
        /// Template name.
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Build a template from a Dockerfile (-f, with --context) or a rootfs tar (--rootfs),
    /// streaming the build log.
    Build(build::BuildArgs),
    /// List this workspace's template builds, newest first.
    Builds,
    /// Print the log of a build (--follow: until it ends).
    BuildLogs(build_logs::BuildLogsArgs),
    /// Bake templates on this host (the server host; needs root and mmdebstrap).
    Bake(bake::BakeArgs),
}

/// Runs a template command; returns the exit code.
pub fn run(cmd: TemplateCommand, ctx: &Ctx) -> Result<i32> {
    match cmd {
        TemplateCommand::List => list::run(ctx).map(|_| 0),
        TemplateCommand::Get { name } => get::run(&name, ctx).map(|_| 0),
        TemplateCommand::Delete { name } => delete::run(&name, ctx).map(|_| 0),
        TemplateCommand::Build(a) => build::run(&a, ctx),
        TemplateCommand::Builds => builds::run(ctx).map(|_| 0),
        TemplateCommand::BuildLogs(a) => build_logs::run(&a, ctx).map(|_| 0),
        TemplateCommand::Bake(a) => bake::run(&a),
    }
}
