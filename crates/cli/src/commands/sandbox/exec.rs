//! `sandbox exec ID [--timeout SECS] [--env K=V]... [--cwd DIR] -- 'cmd'`: runs `cmd` with
//! `bash -c` semantics in the sandbox through the SDK's streaming exec (`POST
//! /v1/sandboxes/{id}/exec/stream`, contract §3.1). Output chunks are written to our stdout and
//! stderr as they arrive; the exit code ends the command with that code; a timeout ends it with
//! `error: <message>` and exit 124, any other server error with exit 1, and so does a stream
//! that ends without an exit code. With `-o json` the non-streaming `POST .../exec` is used and
//! its ExecResult printed.

use crate::commands::{print_json, Ctx};
use crate::error::{CliError, Result};
use crate::parse::{self, KeyValue};
use clap::Args;
use futures::StreamExt;
use pandastack_sdk::{ExecEvent, ExecOptions};
use std::io::Write;

/// Flags of `sandbox exec`.
#[derive(Debug, Clone, Args)]
pub struct ExecArgs {
    /// The sandbox id.
    #[arg(value_name = "SANDBOX_ID")]
    pub id: String,
    /// Kill the command's process group after this many seconds (server default 300; 0 = none).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Extra environment for this command; repeatable.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse::key_value)]
    pub env: Vec<KeyValue>,
    /// Working directory (server default `/workspace`).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// The command, after `--`: one quoted string, or several words joined with spaces.
    #[arg(value_name = "COMMAND", required = true, num_args = 1.., trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

impl ExecArgs {
    /// The command text.
    pub fn command(&self) -> String {
        parse::command_text(&self.command)
    }

    /// The SDK options for these flags.
    pub fn options(&self) -> ExecOptions {
        ExecOptions {
            timeout_seconds: self.timeout,
            env: parse::to_map(&self.env).unwrap_or_default(),
            cwd: self.cwd.clone(),
            check: false,
        }
    }
}

fn write_to(out: &mut dyn Write, chunk: &str, what: &str) -> Result<()> {
    out.write_all(chunk.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| CliError::io(what, e))
}

/// Runs the command; returns its exit code.
pub fn run(args: &ExecArgs, ctx: &Ctx) -> Result<i32> {
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(&args.id))?;
    if ctx.json() {
        let result = ctx.block(sandbox.exec_with(&args.command(), &args.options()))?;
        print_json(&result)?;
        return Ok(result.exit_code);
    }
    let mut stream = ctx.block(sandbox.exec_stream(&args.command(), &args.options()))?;
    let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
    while let Some(ev) = ctx.block(stream.next()) {
        match ev? {
            ExecEvent::Stdout(c) => write_to(&mut stdout, &c, "writing stdout")?,
            ExecEvent::Stderr(c) => write_to(&mut stderr, &c, "writing stderr")?,
            ExecEvent::Exit(code) => return Ok(code),
        }
    }
    Err(CliError::Stream(
        "exec stream ended before the command exited".into(),
    ))
}
