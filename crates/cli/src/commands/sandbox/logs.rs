//! `sandbox logs ID [--follow] [--stream stdout|stderr|both]`: `GET
//! /v1/sandboxes/{id}/logs?stream=S&follow=true|false` (contract §3.2). Without `--follow` the
//! plain-text log is copied to stdout as is; with it each line is printed as it is written, until
//! the server closes the stream or Ctrl-C.

use crate::commands::Ctx;
use crate::error::{CliError, Result};
use crate::output;
use clap::{Args, ValueEnum};
use futures::StreamExt;
use std::io::Write;

/// Which output of the sandbox to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogStream {
    /// Standard output only.
    Stdout,
    /// Standard error only.
    Stderr,
    /// Both, interleaved.
    Both,
}

impl From<LogStream> for pandastack_sdk::LogStream {
    fn from(s: LogStream) -> Self {
        match s {
            LogStream::Stdout => pandastack_sdk::LogStream::Stdout,
            LogStream::Stderr => pandastack_sdk::LogStream::Stderr,
            LogStream::Both => pandastack_sdk::LogStream::Both,
        }
    }
}

/// Flags of `sandbox logs`.
#[derive(Debug, Clone, Args)]
pub struct LogsArgs {
    /// The sandbox id.
    #[arg(value_name = "SANDBOX_ID")]
    pub id: String,
    /// Keep printing new lines as they are written.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Which output to show.
    #[arg(long, value_enum, default_value_t = LogStream::Both)]
    pub stream: LogStream,
}

/// Prints the log.
pub fn run(args: &LogsArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(&args.id))?;
    if !args.follow {
        let text = ctx.block(sandbox.logs(args.stream.into()))?;
        let mut out = std::io::stdout().lock();
        return out
            .write_all(text.as_bytes())
            .and_then(|_| out.flush())
            .map_err(|e| CliError::io("writing stdout", e));
    }
    let mut lines = ctx.block(sandbox.logs_follow(args.stream.into()))?;
    while let Some(line) = ctx.block(lines.next()) {
        output::line(&line?.line)?;
    }
    Ok(())
}
