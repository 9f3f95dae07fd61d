//! `sandbox events [ID] [--follow]`: lifecycle events (`{seq, at, at_ms, sandbox_id, from, to,
//! cause}`: one per state transition). With an ID and no `--follow`: the sandbox's history,
//! `GET /v1/sandboxes/{id}/events`, as a table. Without an ID, or with `--follow`: the
//! workspace's live stream, `GET /v1/events` (SSE), one line per event until Ctrl-C; with an ID
//! only that sandbox's events are shown. `-o json` prints the history list, or each streamed
//! event's JSON on its own line.

use crate::commands::{print_json, Ctx};
use crate::error::{CliError, Result};
use crate::output;
use clap::Args;
use futures::StreamExt;
use pandastack_api::Event;

/// Flags of `sandbox events`.
#[derive(Debug, Clone, Args)]
pub struct EventsArgs {
    /// One sandbox; the whole workspace when omitted.
    #[arg(value_name = "SANDBOX_ID")]
    pub id: Option<String>,
    /// Keep printing new events as they happen.
    #[arg(long, short = 'f')]
    pub follow: bool,
}

/// Table headers of [`row`].
pub const HEADERS: [&str; 4] = ["TIME", "SANDBOX", "EVENT", "DETAIL"];

/// One table row of an event: time, sandbox, `from -> to`, `cause=...`.
pub fn row(ev: &Event) -> Vec<String> {
    vec![
        ev.at.clone(),
        ev.sandbox_id.clone(),
        format!("{} -> {}", ev.from, ev.to),
        format!("cause={}", ev.cause),
    ]
}

/// Prints the events.
pub fn run(args: &EventsArgs, ctx: &Ctx) -> Result<()> {
    match (&args.id, args.follow) {
        (Some(id), false) => history(id, ctx),
        (id, _) => follow(id.as_deref(), ctx),
    }
}

fn history(id: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(id))?;
    let events = ctx.block(sandbox.events())?;
    if ctx.json() {
        return print_json(&events);
    }
    output::table(&HEADERS, &events.iter().map(row).collect::<Vec<_>>())
}

fn follow(id: Option<&str>, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let mut stream = ctx.block(client.events(None))?;
    while let Some(ev) = ctx.block(stream.next()) {
        let ev = ev?;
        if id.is_some_and(|i| i != ev.sandbox_id) {
            continue;
        }
        if ctx.json() {
            let line = serde_json::to_string(&ev)
                .map_err(|e| CliError::Usage(format!("cannot encode JSON: {e}")))?;
            output::line(&line)?;
        } else {
            output::line(&row(&ev).join("  "))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_rows() {
        let ev = Event {
            seq: 46,
            sandbox_id: "s1".into(),
            from: "running".into(),
            to: "paused".into(),
            cause: "api".into(),
            at: "2026-12-01T10:00:39.431Z".into(),
            at_ms: 1,
        };
        assert_eq!(
            row(&ev),
            vec![
                "2026-12-01T10:00:39.431Z",
                "s1",
                "running -> paused",
                "cause=api"
            ]
        );
    }
}
