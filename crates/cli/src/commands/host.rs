//! `pandastack admin drain NAME` / `admin activate NAME`: an operator's calls on a host of the
//! cluster (issue 12 point 8), through the SDK against `PANDASTACK_API` with an operator key
//! (`PANDASTACK_API_KEY` of the first workspace).

use crate::commands::Ctx;
use crate::error::Result;
use crate::output;

/// What to do to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostAction {
    /// `POST /v1/hosts/{name}/drain`.
    Drain,
    /// `POST /v1/hosts/{name}/activate`.
    Activate,
}

/// Runs `action` on host `name`; prints one line per sandbox moved or left and a summary (or
/// the server's JSON with `-o json`). Exit code 0, or 1 when a drain left sandboxes behind.
///
/// Errors: as any call (403 for a key that is not the operator's, 404 for an unknown host,
/// 409 on a single host).
pub fn run(action: HostAction, name: &str, ctx: &Ctx) -> Result<i32> {
    let client = ctx.client()?;
    let reply = match action {
        HostAction::Drain => ctx.block(client.hosts().drain(name))?,
        HostAction::Activate => ctx.block(client.hosts().activate(name))?,
    };
    let list = |key: &str| reply[key].as_array().cloned().unwrap_or_default();
    let left = list("left");
    if ctx.json() {
        output::json(&reply)?;
    } else if action == HostAction::Drain {
        let moved = list("moved");
        for m in &moved {
            output::line(&format!(
                "moved {} to {} ({}, {} ms)",
                m["sandbox_id"].as_str().unwrap_or("?"),
                m["to"].as_str().unwrap_or("?"),
                m["state"].as_str().unwrap_or("?"),
                m["ms"].as_u64().unwrap_or(0)
            ))?;
        }
        for l in &left {
            output::line(&format!(
                "left {}: {}",
                l["sandbox_id"].as_str().unwrap_or("?"),
                l["reason"].as_str().unwrap_or("?")
            ))?;
        }
        output::line(&format!(
            "host {name} is draining: {} moved, {} left",
            moved.len(),
            left.len()
        ))?;
    } else {
        output::line(&format!(
            "host {name} is {}",
            reply["state"].as_str().unwrap_or("?")
        ))?;
    }
    Ok(if left.is_empty() { 0 } else { 1 })
}
