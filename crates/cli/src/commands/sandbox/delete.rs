//! `sandbox delete ID`: `DELETE /v1/sandboxes/{id}` (204; nothing printed with `-o json`).

use crate::commands::Ctx;
use crate::error::Result;
use crate::output;

/// Deletes the sandbox; prints `deleted sandbox ID`.
pub fn run(id: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    ctx.block(client.sandboxes().delete(id))?;
    if ctx.json() {
        return Ok(());
    }
    output::line(&format!("deleted sandbox {id}"))
}
