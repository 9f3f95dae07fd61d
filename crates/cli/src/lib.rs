//! The `pandastack` command-line client: every command talks to a server over the REST API
//! (`PANDASTACK_API`, `PANDASTACK_API_KEY`).

use clap::Subcommand;

/// Top-level client commands, flattened into the `pandastack` binary's command list.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Sandboxes: create, list, get, exec, delete.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
}

/// `pandastack sandbox ...`
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// List the workspace's sandboxes.
    List,
}

/// Runs a client command; returns the process exit code.
pub fn run(cmd: Command) -> i32 {
    match cmd {
        Command::Sandbox(SandboxCommand::List) => match list() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("error: {e:#}");
                1
            }
        },
    }
}

fn list() -> anyhow::Result<()> {
    let api = std::env::var("PANDASTACK_API").unwrap_or_else(|_| "http://127.0.0.1:7700".into());
    let key = std::env::var("PANDASTACK_API_KEY").unwrap_or_default();
    let body: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!("{}/v1/sandboxes", api.trim_end_matches('/')))
        .bearer_auth(key)
        .send()?
        .error_for_status()?
        .json()?;
    println!("{}", serde_json::to_string_pretty(&body)?);
    Ok(())
}
