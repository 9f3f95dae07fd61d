//! `pandastack volume ...`: volumes (issue 9 point 7, contract §2.6; seed 001 §3). `volume
//! create agent-workspace --size 8g` makes an empty volume; a sandbox attaches it with
//! `sandbox create --volume agent-workspace[:ro]` and finds it at `/mnt/agent-workspace`.

pub mod change;
pub mod render;

use super::{print_json, Ctx, GlobalOpts};
use crate::error::Result;
use crate::output;
use clap::{Args, Subcommand};

/// `pandastack volume [-o json] COMMAND`.
#[derive(Debug, Args)]
pub struct VolumeArgs {
    #[command(flatten)]
    pub opts: GlobalOpts,
    #[command(subcommand)]
    pub command: VolumeCommand,
}

/// `pandastack volume ...` commands.
#[derive(Debug, Subcommand)]
pub enum VolumeCommand {
    /// Create an empty volume; prints it.
    Create {
        /// `[A-Za-z0-9._-]{1,64}`, unique in the workspace.
        name: String,
        /// Size: MiB, or with a unit (`512m`, `8g`). It can grow later, never shrink.
        #[arg(long, value_name = "SIZE", value_parser = render::size_mb)]
        size: u64,
    },
    /// List the workspace's volumes (name, size, used, attached to).
    List,
    /// Show one volume.
    Get { name: String },
    /// Grow a detached volume.
    Resize {
        name: String,
        /// The new size: MiB, or with a unit (`16g`).
        #[arg(long, value_name = "SIZE", value_parser = render::size_mb)]
        size: u64,
    },
    /// Delete a detached volume and all its data (irreversible).
    Delete { name: String },
}

/// Runs a volume command; returns the exit code.
pub fn run(cmd: VolumeCommand, ctx: &Ctx) -> Result<i32> {
    match cmd {
        VolumeCommand::Create { name, size } => change::create(&name, size, ctx),
        VolumeCommand::List => list(ctx),
        VolumeCommand::Get { name } => get(&name, ctx),
        VolumeCommand::Resize { name, size } => change::resize(&name, size, ctx),
        VolumeCommand::Delete { name } => change::delete(&name, ctx),
    }
    .map(|_| 0)
}

/// Prints the volumes as a table.
fn list(ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let items = ctx.block(client.volumes().list())?;
    if ctx.json() {
        return print_json(&items);
    }
    output::table(
        &render::HEADERS,
        &items.iter().map(render::row).collect::<Vec<_>>(),
    )
}

/// Prints one volume.
fn get(name: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let v = ctx.block(client.volumes().get(name))?;
    if ctx.json() {
        return print_json(&v);
    }
    render::print_one(&v)
}
