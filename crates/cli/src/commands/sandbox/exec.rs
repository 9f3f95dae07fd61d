//! `sandbox exec ID [--timeout SECS] [--env K=V]... [--cwd DIR] -- 'cmd'`: runs `cmd` with
//! `bash -c` semantics in the sandbox via `POST /v1/sandboxes/{id}/exec/stream` (contract §3.1).
//! `stdout`/`stderr` events (`{"chunk"}`) are written to our stdout/stderr as they arrive;
//! `exit` (`{"exit_code"}`) ends the command with that code; `error` (`{"error"}`) ends it with
//! `error: <message>` and exit 124 when the message says "timeout", else 1. A stream that ends
//! without either is an error too. With `-o json` the non-streaming `POST .../exec` is used and
//! its ExecResult printed.

use crate::client::Timeout;
use crate::commands::Ctx;
use crate::error::{CliError, Result};
use crate::output;
use crate::parse::{self, KeyValue};
use crate::sse::{Event, SseReader};
use clap::Args;
use pandastack_api::ExecRequest;
use reqwest::header::ACCEPT;
use reqwest::Method;
use serde_json::Value;
use std::io::{BufReader, Write};

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
    /// The request body for these flags.
    pub fn request(&self) -> ExecRequest {
        ExecRequest {
            cmd: parse::command_text(&self.command),
            timeout_seconds: self.timeout,
            env: parse::to_map(&self.env),
            cwd: self.cwd.clone(),
            background: None,
        }
    }
}

/// One decoded exec-stream event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEvent {
    /// Output for our stdout.
    Stdout(String),
    /// Output for our stderr.
    Stderr(String),
    /// The command ended with this code.
    Exit(i32),
    /// The server gave up on the command with this message.
    Error(String),
    /// An event the CLI does not use.
    Other,
}

/// Decodes an event. Non-JSON `data` is taken as the raw chunk or message (contract §3.1).
pub fn decode(ev: &Event) -> ExecEvent {
    let json: Option<Value> = serde_json::from_str(&ev.data).ok();
    let field = |k: &str| {
        json.as_ref()
            .and_then(|v| v.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    match ev.name.as_str() {
        "stdout" => ExecEvent::Stdout(field("chunk").unwrap_or_else(|| ev.data.clone())),
        "stderr" => ExecEvent::Stderr(field("chunk").unwrap_or_else(|| ev.data.clone())),
        "exit" => match json
            .as_ref()
            .and_then(|v| v.get("exit_code").or_else(|| v.get("exit")))
            .and_then(Value::as_i64)
        {
            Some(code) => ExecEvent::Exit(i32::try_from(code).unwrap_or(1)),
            None => ExecEvent::Error(format!("exit event without an exit code: {}", ev.data)),
        },
        "error" => ExecEvent::Error(field("error").unwrap_or_else(|| ev.data.clone())),
        _ => ExecEvent::Other,
    }
}

/// The error for a server-reported failure of the command.
pub fn stream_error(message: String) -> CliError {
    if message.to_lowercase().contains("timeout") {
        CliError::Timeout(message)
    } else {
        CliError::Stream(message)
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
    let body = crate::commands::body(&args.request())?;
    if ctx.json() {
        let rb = client
            .request(
                Method::POST,
                &["sandboxes", &args.id, "exec"],
                &[],
                Timeout::Stream,
            )
            .json(&body);
        let reply = client.json(rb)?;
        output::json(&reply)?;
        return Ok(exit_code_of(&reply));
    }
    let rb = client
        .request(
            Method::POST,
            &["sandboxes", &args.id, "exec", "stream"],
            &[],
            Timeout::Stream,
        )
        .header(ACCEPT, "text/event-stream")
        .json(&body);
    let resp = client.send(rb)?;
    let url = resp.url().clone();
    let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
    for ev in SseReader::new(BufReader::new(resp)) {
        let ev = ev.map_err(|e| {
            CliError::Stream(format!(
                "exec stream from {url} broke: {}",
                crate::error::root_cause(&e)
            ))
        })?;
        match decode(&ev) {
            ExecEvent::Stdout(c) => write_to(&mut stdout, &c, "writing stdout")?,
            ExecEvent::Stderr(c) => write_to(&mut stderr, &c, "writing stderr")?,
            ExecEvent::Exit(code) => return Ok(code),
            ExecEvent::Error(msg) => return Err(stream_error(msg)),
            ExecEvent::Other => {}
        }
    }
    Err(CliError::Stream(
        "exec stream ended before the command exited".into(),
    ))
}

/// `exit_code` (then `exit`) of an ExecResult; 1 when missing (contract §4).
pub fn exit_code_of(reply: &Value) -> i32 {
    reply
        .get("exit_code")
        .or_else(|| reply.get("exit"))
        .and_then(Value::as_i64)
        .and_then(|c| i32::try_from(c).ok())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(name: &str, data: &str) -> Event {
        Event {
            name: name.into(),
            data: data.into(),
        }
    }

    #[test]
    fn decodes_every_event_kind() {
        assert_eq!(
            decode(&ev("stdout", r#"{"chunk":"4\n"}"#)),
            ExecEvent::Stdout("4\n".into())
        );
        assert_eq!(
            decode(&ev("stderr", "raw text")),
            ExecEvent::Stderr("raw text".into())
        );
        assert_eq!(
            decode(&ev("exit", r#"{"exit_code":3}"#)),
            ExecEvent::Exit(3)
        );
        assert_eq!(
            decode(&ev("error", r#"{"error":"command timeout after 1 s"}"#)),
            ExecEvent::Error("command timeout after 1 s".into())
        );
        assert_eq!(decode(&ev("message", "x")), ExecEvent::Other);
        assert!(matches!(decode(&ev("exit", "{}")), ExecEvent::Error(_)));
    }

    #[test]
    fn timeouts_exit_124() {
        assert_eq!(
            stream_error("command timeout after 1 s".into()).exit_code(),
            124
        );
        assert_eq!(
            stream_error("guest channel closed during exec".into()).exit_code(),
            1
        );
    }

    #[test]
    fn exit_code_of_exec_result() {
        assert_eq!(exit_code_of(&serde_json::json!({"exit_code": 7})), 7);
        assert_eq!(exit_code_of(&serde_json::json!({"exit": 2})), 2);
        assert_eq!(exit_code_of(&serde_json::json!({})), 1);
    }
}
