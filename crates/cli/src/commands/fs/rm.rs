//! `fs rm ID PATH`: `DELETE /v1/sandboxes/{id}/fs?path=PATH` (204; directories recursively).

use super::PathArgs;
use crate::commands::Ctx;
use crate::error::Result;
use crate::output;

/// Removes the path; prints `removed PATH` (nothing with `-o json`).
pub fn run(args: &PathArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(&args.id))?;
    ctx.block(sandbox.files().remove(&args.path))?;
    if ctx.json() {
        return Ok(());
    }
    output::line(&format!("removed {}", args.path))
}
