//! `sandbox run-code ID [--language python|shell] [--timeout SECS] -- 'code'`: the Python SDK's
//! `run_code` on the wire (contract §2.2): `POST /v1/sandboxes/{id}/exec` with
//! `{"cmd": "python3 -c <quoted code>"}` or `{"cmd": "bash -c <quoted code>"}`, quoted as
//! Python's `shlex.quote` ([`pandastack_sdk::Language::command`]). A fresh process each time, so
//! nothing persists between runs. Prints the command's stdout and stderr; exits with its exit
//! code. `-` as the code reads stdin.

use crate::commands::{print_json, Ctx};
use crate::error::{CliError, Result};
use crate::parse;
use clap::{Args, ValueEnum};
use pandastack_sdk::ExecOptions;
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

impl From<Language> for pandastack_sdk::Language {
    fn from(l: Language) -> Self {
        match l {
            Language::Python => pandastack_sdk::Language::Python,
            Language::Shell => pandastack_sdk::Language::Shell,
        }
    }
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
    pandastack_sdk::Language::from(language).command(code)
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
    let cmd = command_for(args.language, &code_of(args)?);
    let opts = ExecOptions {
        timeout_seconds: args.timeout,
        ..ExecOptions::default()
    };
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(&args.id))?;
    let result = ctx.block(sandbox.exec_with(&cmd, &opts))?;
    if ctx.json() {
        print_json(&result)?;
        return Ok(result.exit_code);
    }
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
