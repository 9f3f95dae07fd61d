//! `fs mkdir ID PATH`: `POST /v1/sandboxes/{id}/fs/mkdir?path=PATH` (204; parents created).

use super::PathArgs;
use crate::commands::Ctx;
use crate::error::Result;
use crate::output;

/// Creates the directory; prints `created PATH` (nothing with `-o json`).
pub fn run(args: &PathArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(&args.id))?;
    ctx.block(sandbox.files().mkdir(&args.path))?;
    if ctx.json() {
        return Ok(());
    }
    output::line(&format!("created {}", args.path))
}
