//! `pandastack sandbox ...`: one file per command. Lifecycle calls follow contract §2.1-§2.2;
//! the state rules (which transitions are allowed) live in the server, which answers 409 with
//! the current state when a transition is not allowed.

pub mod create;
pub mod delete;
pub mod events;
pub mod exec;
pub mod fork;
pub mod fork_tree;
pub mod get;
pub mod lifecycle;
pub mod list;
pub mod logs;
pub mod metrics;
pub mod ports;
pub mod preview;
pub mod promote;
pub mod render;
pub mod run_code;
pub mod set_persistent;
pub mod set_ttl;
pub mod snapshot;
pub mod transition;

use super::{Ctx, GlobalOpts};
use crate::error::Result;
use clap::{Args, Subcommand};

/// `pandastack sandbox [-o json] COMMAND`.
#[derive(Debug, Args)]
pub struct SandboxArgs {
    #[command(flatten)]
    pub opts: GlobalOpts,
    #[command(subcommand)]
    pub command: SandboxCommand,
}

/// A sandbox id argument.
#[derive(Debug, Clone, Args)]
pub struct IdArg {
    /// The sandbox id (a UUID).
    #[arg(value_name = "SANDBOX_ID")]
    pub id: String,
}

/// `pandastack sandbox ...` commands.
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Create a sandbox and print it.
    Create(create::CreateArgs),
    /// List the workspace's live sandboxes.
    List,
    /// Show one sandbox.
    Get(IdArg),
    /// Delete a sandbox (its files and processes are gone).
    #[command(visible_alias = "kill")]
    Delete(IdArg),
    /// Run a shell command in a sandbox, streaming its output; exits with its exit code.
    Exec(exec::ExecArgs),
    /// Run a Python or shell snippet in a fresh process (not a code context).
    RunCode(run_code::RunCodeArgs),
    /// Halt a running sandbox's CPU; memory stays in place.
    Pause(IdArg),
    /// Continue a paused sandbox.
    Resume(IdArg),
    /// Write a sandbox's memory to disk and stop it, freeing host RAM.
    Hibernate(IdArg),
    /// Restore a hibernated sandbox.
    Wake(IdArg),
    /// Set the seconds until the sandbox is killed (refreshed by activity).
    SetTtl(set_ttl::SetTtlArgs),
    /// Make a sandbox persistent (no TTL; hibernated when idle) or not.
    SetPersistent(set_persistent::SetPersistentArgs),
    /// Show TTL, persistence and idle seconds.
    Lifecycle(IdArg),
    /// Snapshot a sandbox; prints the snapshot id.
    Snapshot(IdArg),
    /// Fork a sandbox into a copy-on-write child and print the child.
    Fork(fork::ForkArgs),
    /// Fork a sandbox into N children at once.
    ForkTree(fork_tree::ForkTreeArgs),
    /// Promote a forked child to a standalone sandbox.
    Promote(promote::PromoteArgs),
    /// Print a sandbox's output log.
    Logs(logs::LogsArgs),
    /// Print lifecycle events of one sandbox, or of the whole workspace.
    Events(events::EventsArgs),
    /// Show a sandbox's resource usage.
    Metrics(IdArg),
    /// List the TCP ports listening in a sandbox, with their proxy paths.
    Ports(IdArg),
    /// Print a signed URL that opens a port of a sandbox in a browser.
    Preview(preview::PreviewArgs),
}

/// Runs a sandbox command; returns the exit code.
pub fn run(cmd: SandboxCommand, ctx: &Ctx) -> Result<i32> {
    use transition::Transition;
    match cmd {
        SandboxCommand::Create(a) => create::run(&a, ctx).map(|_| 0),
        SandboxCommand::List => list::run(ctx).map(|_| 0),
        SandboxCommand::Get(a) => get::run(&a.id, ctx).map(|_| 0),
        SandboxCommand::Delete(a) => delete::run(&a.id, ctx).map(|_| 0),
        SandboxCommand::Exec(a) => exec::run(&a, ctx),
        SandboxCommand::RunCode(a) => run_code::run(&a, ctx),
        SandboxCommand::Pause(a) => transition::run(Transition::Pause, &a.id, ctx).map(|_| 0),
        SandboxCommand::Resume(a) => transition::run(Transition::Resume, &a.id, ctx).map(|_| 0),
        SandboxCommand::Hibernate(a) => {
            transition::run(Transition::Hibernate, &a.id, ctx).map(|_| 0)
        }
        SandboxCommand::Wake(a) => transition::run(Transition::Wake, &a.id, ctx).map(|_| 0),
        SandboxCommand::SetTtl(a) => set_ttl::run(&a, ctx).map(|_| 0),
        SandboxCommand::SetPersistent(a) => set_persistent::run(&a, ctx).map(|_| 0),
        SandboxCommand::Lifecycle(a) => lifecycle::run(&a.id, ctx).map(|_| 0),
        SandboxCommand::Snapshot(a) => snapshot::run(&a.id, ctx).map(|_| 0),
        SandboxCommand::Fork(a) => fork::run(&a, ctx).map(|_| 0),
        SandboxCommand::ForkTree(a) => fork_tree::run(&a, ctx).map(|_| 0),
        SandboxCommand::Promote(a) => promote::run(&a, ctx).map(|_| 0),
        SandboxCommand::Logs(a) => logs::run(&a, ctx).map(|_| 0),
        SandboxCommand::Events(a) => events::run(&a, ctx).map(|_| 0),
        SandboxCommand::Metrics(a) => metrics::run(&a.id, ctx).map(|_| 0),
        SandboxCommand::Ports(a) => ports::run(&a.id, ctx).map(|_| 0),
        SandboxCommand::Preview(a) => preview::run(&a, ctx).map(|_| 0),
    }
}
