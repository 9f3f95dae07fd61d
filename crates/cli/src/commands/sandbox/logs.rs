//! `sandbox logs ID [--follow] [--stream stdout|stderr|both]`: `GET
//! /v1/sandboxes/{id}/logs?stream=S&follow=true|false` (contract §3.2). Without `--follow` the
//! plain-text body is copied to stdout as is. With it the reply is SSE: each event's `data` is
//! a JSON `{"line"}` (or `{"chunk"}`) printed as one line, `{"error"}` ends the command with that
//! error, and any other data is printed raw. Runs until the server closes the stream or Ctrl-C.

use crate::client::Timeout;
use crate::commands::Ctx;
use crate::error::{CliError, Result};
use crate::output;
use crate::sse::SseReader;
use clap::{Args, ValueEnum};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::Method;
use serde_json::Value;
use std::io::BufReader;

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

/// What one follow event means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEvent {
    /// A line to print (its trailing newline removed).
    Line(String),
    /// The server reported an error.
    Error(String),
}

/// Decodes one follow event's data as the SDKs do (contract §3.2).
pub fn decode(data: &str) -> LogEvent {
    let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(data) else {
        return LogEvent::Line(data.to_string());
    };
    if let Some(line) = obj
        .get("line")
        .or_else(|| obj.get("chunk"))
        .and_then(Value::as_str)
    {
        return LogEvent::Line(line.strip_suffix('\n').unwrap_or(line).to_string());
    }
    if let Some(err) = obj.get("error").and_then(Value::as_str) {
        return LogEvent::Error(err.to_string());
    }
    LogEvent::Line(data.to_string())
}

/// Prints the log.
pub fn run(args: &LogsArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let stream = format!("{:?}", args.stream).to_lowercase();
    let follow = if args.follow { "true" } else { "false" };
    let accept = if args.follow {
        "text/event-stream"
    } else {
        "text/plain"
    };
    let rb = client
        .request(
            Method::GET,
            &["sandboxes", &args.id, "logs"],
            &[("stream", &stream), ("follow", follow)],
            Timeout::Stream,
        )
        .header(ACCEPT, accept);
    let mut resp = client.send(rb)?;
    let is_sse = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"));
    if !is_sse {
        let mut out = std::io::stdout().lock();
        std::io::copy(&mut resp, &mut out)
            .map_err(|e| CliError::io("copying the log to stdout", e))?;
        return Ok(());
    }
    let url = resp.url().clone();
    for ev in SseReader::new(BufReader::new(resp)) {
        let ev = ev.map_err(|e| {
            CliError::Stream(format!(
                "log stream from {url} broke: {}",
                crate::error::root_cause(&e)
            ))
        })?;
        match decode(&ev.data) {
            LogEvent::Line(l) => output::line(&l)?,
            LogEvent::Error(e) => return Err(CliError::Stream(e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follow_events() {
        assert_eq!(
            decode(r#"{"line":"hello\n"}"#),
            LogEvent::Line("hello".into())
        );
        assert_eq!(decode(r#"{"chunk":"c"}"#), LogEvent::Line("c".into()));
        assert_eq!(
            decode(r#"{"error":"sandbox gone"}"#),
            LogEvent::Error("sandbox gone".into())
        );
        assert_eq!(decode("raw text"), LogEvent::Line("raw text".into()));
        assert_eq!(decode("[1]"), LogEvent::Line("[1]".into()));
    }
}
