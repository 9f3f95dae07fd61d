//! `template delete NAME`: `DELETE /v1/templates/{name}` (204; 403 for a built-in).

use crate::commands::Ctx;
use crate::error::Result;
use crate::output;

/// Deletes the template; prints `deleted template NAME` (nothing with `-o json`).
pub fn run(name: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    ctx.block(client.templates().delete(name))?;
    if ctx.json() {
        return Ok(());
    }
    output::line(&format!("deleted template {name}"))
}
