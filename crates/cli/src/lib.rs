//! The `pandastack` command-line client. Every command except `template bake`, `completions`
//! and `version` is one or a few calls of the Rust SDK (`pandastack-sdk`) to a PandaStack
//! server (`shared/spec/sdk-wire-contract.md`), with its retries (contract §1.4); [`Command`] is
//! flattened into the `pandastack` binary's top-level commands and [`run`] returns the process
//! exit code.
//!
//! # Configuration
//!
//! Server URL: env `PANDASTACK_API`, else `api_url` in `~/.config/pandastack/config.json`, else
//! `http://127.0.0.1:7700`. API key: env `PANDASTACK_API_KEY`, else `token` (then `api_key`) in
//! the same file, which `pandastack auth login --key KEY [--api URL]` writes (mode 0600). Without
//! a key, HTTP commands fail before sending anything. Only `http://` URLs are supported.
//!
//! # Output
//!
//! `-o json` / `--output json` (accepted after any resource word: `pandastack sandbox -o json
//! list` or `pandastack sandbox list -o json`) prints the server's JSON reply, pretty, and
//! nothing else on stdout; a reply without a body (204) prints nothing. The default
//! (`-o table`) prints aligned tables with upper-case headers, or `key  value` lines whose keys
//! are the JSON field names. Commands that act on a resource print one confirmation line, e.g.
//! `paused sandbox ID`. Exceptions, identical in both formats unless noted:
//!
//! - `sandbox snapshot` prints only the new snapshot id (table format).
//! - `sandbox exec` streams the command's stdout/stderr as they arrive; with `-o json` it
//!   uses the non-streaming exec and prints the ExecResult JSON.
//! - `sandbox run-code` prints the command's stdout/stderr (JSON: the ExecResult).
//! - `sandbox logs` and `fs cat` print raw text/bytes.
//! - `sandbox events` without an id, or with `--follow`, streams the workspace's events (one
//!   line each; JSON: one document per line) until interrupted.
//! - `token create` prints the secret on the first line: `token  pds_...`.
//! - `template build` streams the build log to stdout (stderr with `-o json`, which then prints
//!   the final TemplateBuild) and exits 1 when the build failed; `template build-logs` prints
//!   log lines.
//!
//! Progress bars (`fs upload`/`fs download`), the build progress line and notes go to stderr,
//! bars and the progress line only on a terminal.
//!
//! # Exit codes
//!
//! - `0`: success.
//! - `sandbox exec` / `sandbox run-code`: the command's own exit code; `124` when the server
//!   reports the command's timeout.
//! - `1`: any failure; stderr has one line `error: <message>`. A server error reads
//!   `error: <server's "error" message> (HTTP <status>)`; no answer at all reads
//!   `error: cannot reach <url>: <cause>`.
//! - `2`: the command line does not parse (clap's usage message).
//! - `141`: stdout was closed early (e.g. `| head`); nothing is printed.

pub mod commands;
pub mod config;
pub mod error;
pub mod output;
pub mod parse;
pub mod progress;

use clap::Subcommand;
pub use commands::GlobalOpts;

/// Top-level client commands, flattened into the `pandastack` binary's command list.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Sandboxes: create, list, exec, pause, hibernate, fork, snapshot, delete...
    Sandbox(commands::sandbox::SandboxArgs),
    /// Files inside a sandbox: upload, download, ls, cat, rm.
    Fs(commands::fs::FsArgs),
    /// Snapshots of the workspace: list, delete.
    Snapshot(commands::snapshot::SnapshotArgs),
    /// Databases (PostgreSQL) sandboxes reach with a scoped credential: create, connection,
    /// list, get, delete, clone, reset-credentials, wake, update.
    Db(commands::db::DbArgs),
    /// Volumes (named ext4 volumes that outlive sandboxes, at /mnt/NAME): create, list, get,
    /// resize, delete.
    Volume(commands::volume::VolumeArgs),
    /// Templates: list, get, delete, build (Dockerfile or rootfs tar), builds, build logs;
    /// bake (on the server host).
    Template(commands::template::TemplateArgs),
    /// API keys of the workspace: create, list, revoke.
    Token(commands::token::TokenArgs),
    /// Save or check the server URL and API key the CLI uses.
    Auth(commands::auth::AuthArgs),
    /// Serve the MCP tools (sandboxes, run_code, files, snapshots) on stdin/stdout for a
    /// desktop agent host, against PANDASTACK_API with PANDASTACK_API_KEY.
    Mcp(commands::mcp::McpArgs),
    /// Print a shell completion script for the client commands.
    Completions(commands::completions::CompletionsArgs),
    /// Print the client version.
    Version(commands::version::VersionArgs),
}

/// Runs a client command; returns the process exit code (see the module docs).
pub fn run(cmd: Command) -> i32 {
    match commands::dispatch(cmd) {
        Ok(code) => code,
        Err(e) if e.is_broken_pipe() => e.exit_code(),
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

/// Runs an operator's host command (`pandastack admin drain|activate NAME`, see
/// [`commands::host`]); returns the process exit code.
pub fn run_host_admin(action: commands::host::HostAction, name: &str, json: bool) -> i32 {
    let opts = commands::GlobalOpts {
        output: if json {
            output::Format::Json
        } else {
            output::Format::Table
        },
    };
    let result = commands::Ctx::new(&opts).and_then(|ctx| commands::host::run(action, name, &ctx));
    match result {
        Ok(code) => code,
        Err(e) if e.is_broken_pipe() => e.exit_code(),
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

#[cfg(test)]
mod tests;
