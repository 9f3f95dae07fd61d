//! `pandastack fs ...`: files inside a sandbox through `/v1/sandboxes/{id}/fs` (contract §2.4).
//! File bodies are raw bytes in both directions, streamed, never held in memory whole.

pub mod cat;
pub mod download;
pub mod ls;
pub mod mkdir;
pub mod rm;
pub mod stat;
pub mod upload;

use super::{Ctx, GlobalOpts};
use crate::error::Result;
use clap::{Args, Subcommand};

/// `pandastack fs [-o json] COMMAND`.
#[derive(Debug, Args)]
pub struct FsArgs {
    #[command(flatten)]
    pub opts: GlobalOpts,
    #[command(subcommand)]
    pub command: FsCommand,
}

/// A sandbox id and a path inside it.
#[derive(Debug, Clone, Args)]
pub struct PathArgs {
    /// The sandbox id.
    #[arg(value_name = "SANDBOX_ID")]
    pub id: String,
    /// Absolute path inside the sandbox.
    #[arg(value_name = "PATH")]
    pub path: String,
}

/// `pandastack fs ...` commands.
#[derive(Debug, Subcommand)]
pub enum FsCommand {
    /// Copy a local file into the sandbox.
    Upload(upload::UploadArgs),
    /// Copy a file out of the sandbox.
    Download(download::DownloadArgs),
    /// List a directory.
    Ls(ls::LsArgs),
    /// Print a file's bytes to stdout.
    Cat(PathArgs),
    /// Remove a file or directory (recursively).
    Rm(PathArgs),
    /// Show one file's size, mode and mtime.
    Stat(PathArgs),
    /// Create a directory and its parents.
    Mkdir(PathArgs),
}

/// Runs an fs command; returns the exit code.
pub fn run(cmd: FsCommand, ctx: &Ctx) -> Result<i32> {
    match cmd {
        FsCommand::Upload(a) => upload::run(&a, ctx),
        FsCommand::Download(a) => download::run(&a, ctx),
        FsCommand::Ls(a) => ls::run(&a, ctx),
        FsCommand::Cat(a) => cat::run(&a, ctx),
        FsCommand::Rm(a) => rm::run(&a, ctx),
        FsCommand::Stat(a) => stat::run(&a, ctx),
        FsCommand::Mkdir(a) => mkdir::run(&a, ctx),
    }
    .map(|_| 0)
}
