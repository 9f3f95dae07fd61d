//! `sandbox run-code ID [--language python|shell] [--timeout SECS] -- 'code'`: the Python SDK's
//! `run_code` on the wire (contract §2.2): `POST /v1/sandboxes/{id}/exec` with
//! `{"cmd": "python3 -c <quoted code>"}` or `{"cmd": "bash -c <quoted code>"}`, quoted as
//! Python's `shlex.quote`. A fresh process each time, so nothing persists between runs. Prints
//! the command's stdout and stderr; exits with its exit code. `-` as the code reads stdin.

use super::exec::exit_code_of;
use crate::client::Timeout;
use crate::commands::Ctx;
use crate::error::{CliError, Result};
use crate::output::{self, decode};
use crate::parse;
use clap::{Args, ValueEnum};
use pandastack_api::{ExecRequest, ExecResult};
use reqwest::Method;
use std::io::{Read, Write};

/// The interpreter of `run-code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Language {
    /// `python3 -c CODE`.
    #[value(alias = "py", alias = "python3")]
    Python,
    /// `bash -c CODE`.
    #[value(alias = "sh", alias = "bash")]
    Shell,
}

/// Flags of `sandbox run-code`.
#[derive(Debug, Clone, Args)]
pub struct RunCodeArgs {
    /// The sandbox id.
    #[arg(value_name = "SANDBOX_ID")]
    pub id: String,
    /// Interpreter of the code.
    #[arg(long, value_enum, default_value_t = Language::Python)]
    pub language: Language,
    /// Kill the process after this many seconds (server default 300).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// The code, after `--` (several words are joined with spaces); `-` reads it from stdin.
    #[arg(value_name = "CODE", required = true, num_args = 1.., trailing_var_arg = true, allow_hyphen_values = true)]
    pub code: Vec<String>,
}

/// The shell command that runs `code` in `language`, byte for byte as the Python SDK sends it.
pub fn command_for(language: Language, code: &str) -> String {
    match language {
        Language::Python => format!("python3 -c {}", parse::shell_quote(code)),
        Language::Shell => format!("bash -c {}", parse::shell_quote(code)),
    }
}

fn code_of(args: &RunCodeArgs) -> Result<String> {
    let code = parse::command_text(&args.code);
    if code != "-" {
        return Ok(code);
    }
    let mut buf = String::new();
    std::io::stdin()
        .read_to_string(&mut buf)
        .map_err(|e| CliError::io("reading code from stdin", e))?;
    Ok(buf)
}

/// Runs the code; returns its exit code.
pub fn run(args: &RunCodeArgs, ctx: &Ctx) -> Result<i32> {
    let req = ExecRequest {
        cmd: command_for(args.language, &code_of(args)?),
        timeout_seconds: args.timeout,
        env: None,
        cwd: None,
        background: None,
    };
    let client = ctx.client()?;
    let rb = client
        .request(
            Method::POST,
            &["sandboxes", &args.id, "exec"],
            &[],
            Timeout::Stream,
        )
        .json(&crate::commands::body(&req)?);
    let reply = client.json(rb)?;
    if ctx.json() {
        output::json(&reply)?;
        return Ok(exit_code_of(&reply));
    }
    let result: ExecResult = decode(&reply, "POST /v1/sandboxes/{id}/exec")?;
    let mut out = std::io::stdout().lock();
    out.write_all(result.stdout.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| CliError::io("writing stdout", e))?;
    let mut err = std::io::stderr().lock();
    err.write_all(result.stderr.as_bytes())
        .and_then(|_| err.flush())
        .map_err(|e| CliError::io("writing stderr", e))?;
    Ok(result.exit_code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_match_the_python_sdk() {
        assert_eq!(
            command_for(Language::Python, "x = 42; y = x * 2; print(x, y)"),
            "python3 -c 'x = 42; y = x * 2; print(x, y)'"
        );
        assert_eq!(
            command_for(Language::Shell, "python --version"),
            "bash -c 'python --version'"
        );
        assert_eq!(
            command_for(Language::Python, "print('a')"),
            "python3 -c 'print('\"'\"'a'\"'\"')'"
        );
    }
}
