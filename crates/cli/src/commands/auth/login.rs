//! `auth login --key KEY [--api URL] [--no-verify]`: checks the key with `GET /v1/me` (unless
//! `--no-verify`), then writes `{"api_url", "token"}` into the config file, the file and keys
//! the Python SDK reads (contract §1.1). `--api` defaults to the URL in use now (env, file or
//! `http://127.0.0.1:7700`). Nothing is written when the check fails. Note that env
//! `PANDASTACK_API` / `PANDASTACK_API_KEY`, when set, still win over the file.

use crate::commands::{client_for, Ctx};
use crate::config::{self, Settings};
use crate::error::Result;
use crate::output;
use clap::Args;
use serde_json::json;

/// Flags of `auth login`.
#[derive(Debug, Clone, Args)]
pub struct LoginArgs {
    /// The API key (`pds_...`).
    #[arg(long, value_name = "KEY")]
    pub key: String,
    /// The server's base URL.
    #[arg(long, value_name = "URL")]
    pub api: Option<String>,
    /// Save without asking the server.
    #[arg(long)]
    pub no_verify: bool,
}

/// Verifies and saves the login.
pub fn run(args: &LoginArgs, ctx: &Ctx) -> Result<()> {
    let api = match &args.api {
        Some(a) => a.trim().trim_end_matches('/').to_string(),
        None => Settings::resolve()?.api_url,
    };
    let client = client_for(&api, args.key.trim())?;
    let workspace = if args.no_verify {
        None
    } else {
        Some(ctx.block(client.me())?.workspace_id)
    };
    let path = config::save_login(&api, args.key.trim())?;
    if ctx.json() {
        return output::json(
            &json!({ "api_url": api, "workspace_id": workspace, "config_file": path.display().to_string() }),
        );
    }
    match workspace {
        Some(ws) => output::line(&format!(
            "logged in to {api} (workspace {ws}); saved to {}",
            path.display()
        )),
        None => output::line(&format!(
            "saved {api} and key to {} (not verified)",
            path.display()
        )),
    }
}
