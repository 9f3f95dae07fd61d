//! `sandbox events [ID] [--follow]`: lifecycle events (`{seq, at, at_ms, sandbox_id, from, to,
//! cause}`: one per state transition). With an ID and no `--follow`: the sandbox's history,
//! `GET /v1/sandboxes/{id}/events` (a JSON list), as a table. Without an ID, or with
//! `--follow`: the workspace's live stream, `GET /v1/events` (SSE, `event: transition`), one
//! line per event until Ctrl-C; with an ID only that sandbox's events are shown (also asked of
//! the server as `?sandbox_id=`). `-o json` prints the list reply, or each streamed event's
//! JSON on its own line. Unknown keys are shown in the DETAIL column as `key=value`.

use crate::client::Timeout;
use crate::commands::Ctx;
use crate::error::{CliError, Result};
use crate::output;
use crate::sse::SseReader;
use clap::Args;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::Method;
use serde_json::Value;
use std::io::BufReader;

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
/// Keys shown in their own column or left out as redundant (`at_ms` repeats `at`).
const SHOWN: [&str; 7] = ["at", "at_ms", "sandbox_id", "from", "to", "seq", "type"];

/// One table row of an event: time, sandbox, `from -> to` (or its `type`), other keys.
pub fn row(ev: &Value, stream_name: Option<&str>) -> Vec<String> {
    let Some(obj) = ev.as_object() else {
        return vec![
            "-".into(),
            "-".into(),
            stream_name.unwrap_or("-").into(),
            output::cell(Some(ev)),
        ];
    };
    let event = match (
        obj.get("from").and_then(Value::as_str),
        obj.get("to").and_then(Value::as_str),
    ) {
        (Some(f), Some(t)) => format!("{f} -> {t}"),
        _ => obj
            .get("type")
            .and_then(Value::as_str)
            .or(stream_name)
            .unwrap_or("-")
            .to_string(),
    };
    let rest: Vec<String> = obj
        .iter()
        .filter(|(k, _)| !SHOWN.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={}", output::cell(Some(v))))
        .collect();
    let time = obj.get("at").or_else(|| obj.get("at_ms"));
    vec![
        output::cell(time),
        output::cell(obj.get("sandbox_id")),
        event,
        if rest.is_empty() {
            "-".into()
        } else {
            rest.join(" ")
        },
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
    let reply = ctx.client()?.get_json(&["sandboxes", id, "events"], &[])?;
    if ctx.json() {
        return output::json(&reply);
    }
    let items =
        output::list_items(&reply, &["events", "items"]).ok_or_else(|| CliError::BadReply {
            what: "GET /v1/sandboxes/{id}/events".into(),
            detail: "not a list of events".into(),
        })?;
    output::table(
        &HEADERS,
        &items.iter().map(|e| row(e, None)).collect::<Vec<_>>(),
    )
}

fn follow(id: Option<&str>, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let query: Vec<(&str, &str)> = id.map(|i| vec![("sandbox_id", i)]).unwrap_or_default();
    let rb = client
        .request(Method::GET, &["events"], &query, Timeout::Stream)
        .header(ACCEPT, "text/event-stream");
    let resp = client.send(rb)?;
    let url = resp.url().clone();
    let is_sse = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"));
    if !is_sse {
        return Err(CliError::BadReply {
            what: url.path().into(),
            detail: "expected an event stream".into(),
        });
    }
    for ev in SseReader::new(BufReader::new(resp)) {
        let ev = ev.map_err(|e| {
            CliError::Stream(format!(
                "event stream from {url} broke: {}",
                crate::error::root_cause(&e)
            ))
        })?;
        let data: Value =
            serde_json::from_str(&ev.data).unwrap_or_else(|_| Value::String(ev.data.clone()));
        if id.is_some_and(|i| {
            data.get("sandbox_id")
                .and_then(Value::as_str)
                .is_some_and(|s| s != i)
        }) {
            continue;
        }
        if ctx.json() {
            output::line(&data.to_string())?;
        } else {
            output::line(&row(&data, Some(&ev.name)).join("  "))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn transition_rows() {
        let ev = json!({"at": "2026-12-01T10:00:39.431Z", "at_ms": 1, "cause": "api", "from": "running", "sandbox_id": "s1", "seq": 46, "to": "paused"});
        assert_eq!(
            row(&ev, None),
            vec![
                "2026-12-01T10:00:39.431Z",
                "s1",
                "running -> paused",
                "cause=api"
            ]
        );
        assert_eq!(
            row(&json!({"type": "health"}), None),
            vec!["-", "-", "health", "-"]
        );
        assert_eq!(row(&json!("x"), Some("ping")), vec!["-", "-", "ping", "x"]);
    }
}
