//! `sandbox delete ID`: `DELETE /v1/sandboxes/{id}` (204).

use crate::commands::Ctx;
use crate::error::Result;
use crate::output;

/// Deletes the sandbox; prints `deleted sandbox ID`.
pub fn run(id: &str, ctx: &Ctx) -> Result<()> {
    let reply = ctx.client()?.delete(&["sandboxes", id], &[])?;
    if ctx.json() {
        return output::json(&reply);
    }
    output::line(&format!("deleted sandbox {id}"))
}
