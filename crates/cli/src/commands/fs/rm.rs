//! `fs rm ID PATH`: `DELETE /v1/sandboxes/{id}/fs?path=PATH` (204; directories recursively).

use super::PathArgs;
use crate::commands::Ctx;
use crate::error::Result;
use crate::output;

/// Removes the path; prints `removed PATH`.
pub fn run(args: &PathArgs, ctx: &Ctx) -> Result<()> {
    let reply = ctx
        .client()?
        .delete(&["sandboxes", &args.id, "fs"], &[("path", &args.path)])?;
    if ctx.json() {
        return output::json(&reply);
    }
    output::line(&format!("removed {}", args.path))
}
