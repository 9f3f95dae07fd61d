//! `template build-logs ID [--follow]`: `GET /v1/templates/builds/{id}/logs[?follow=1]`
//! (contract §3.3), one line per log line; without `--follow` the lines written so far.

use crate::commands::Ctx;
use crate::error::{CliError, Result};
use clap::Args;
use futures::StreamExt;
use std::io::Write;

/// Flags of `template build-logs`.
#[derive(Debug, Clone, Args)]
pub struct BuildLogsArgs {
    /// The build id (`bld-...`).
    #[arg(value_name = "BUILD_ID")]
    pub id: String,
    /// Keep printing until the build ends.
    #[arg(long, short = 'f')]
    pub follow: bool,
}

/// Reads build `id`'s log, calling `on_line` for every line, until the server ends it.
///
/// Errors: the request fails or the stream breaks.
pub fn stream(
    ctx: &Ctx,
    client: &pandastack_sdk::Client,
    id: &str,
    follow: bool,
    on_line: &mut dyn FnMut(&str) -> Result<()>,
) -> Result<()> {
    let mut lines = ctx.block(client.templates().build_logs(id, follow))?;
    while let Some(line) = ctx.block(lines.next()) {
        on_line(&line?)?;
    }
    Ok(())
}

/// Prints the log.
pub fn run(args: &BuildLogsArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let mut out = std::io::stdout();
    stream(ctx, &client, &args.id, args.follow, &mut |line| {
        writeln!(out, "{line}")
            .and_then(|_| out.flush())
            .map_err(|e| CliError::io("writing stdout", e))
    })
}
