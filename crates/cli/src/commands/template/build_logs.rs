//! `template build-logs ID [--follow]`: `GET /v1/templates/builds/{id}/logs[?follow=1]`
//! (contract §3.3): each `data:` line of the SSE reply is one log line, `data: end` and
//! `event: done` end it. Without `--follow` the lines written so far are printed.

use crate::client::{Client, Timeout};
use crate::commands::Ctx;
use crate::error::{CliError, Result};
use crate::sse::SseReader;
use clap::Args;
use reqwest::header::ACCEPT;
use reqwest::Method;
use std::io::{BufReader, Write};

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
/// Errors: the request fails, or the stream breaks before its end.
pub fn stream(
    client: &Client,
    id: &str,
    follow: bool,
    on_line: &mut dyn FnMut(&str),
) -> Result<()> {
    let query: &[(&str, &str)] = if follow { &[("follow", "1")] } else { &[] };
    let rb = client
        .request(
            Method::GET,
            &["templates", "builds", id, "logs"],
            query,
            Timeout::Stream,
        )
        .header(ACCEPT, "text/event-stream");
    let resp = client.send(rb)?;
    for ev in SseReader::new(BufReader::new(resp)) {
        let ev = ev.map_err(|e| CliError::Stream(format!("build log stream broke: {e}")))?;
        if ev.name == "done" {
            return Ok(());
        }
        if ev.data == "end" {
            continue;
        }
        on_line(&ev.data);
    }
    Err(CliError::Stream(
        "the build log stream ended before the build did".into(),
    ))
}

/// Prints the log.
pub fn run(args: &BuildLogsArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let mut out = std::io::stdout();
    let mut failed = None;
    stream(&client, &args.id, args.follow, &mut |line| {
        if failed.is_none() {
            if let Err(e) = writeln!(out, "{line}").and_then(|_| out.flush()) {
                failed = Some(e);
            }
        }
    })?;
    match failed {
        Some(e) => Err(CliError::io("writing the log", e)),
        None => Ok(()),
    }
}
