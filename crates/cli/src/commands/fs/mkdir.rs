//! `fs mkdir ID PATH`: `POST /v1/sandboxes/{id}/fs/mkdir?path=PATH` (204; parents created).

use super::PathArgs;
use crate::client::Timeout;
use crate::commands::Ctx;
use crate::error::Result;
use crate::output;
use reqwest::Method;

/// Creates the directory; prints `created PATH`.
pub fn run(args: &PathArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let rb = client
        .request(
            Method::POST,
            &["sandboxes", &args.id, "fs", "mkdir"],
            &[("path", &args.path)],
            Timeout::Normal,
        )
        .body(Vec::new());
    let reply = client.json(rb)?;
    if ctx.json() {
        return output::json(&reply);
    }
    output::line(&format!("created {}", args.path))
}
