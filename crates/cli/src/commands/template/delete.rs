//! `template delete NAME`: `DELETE /v1/templates/{name}` (403 for a built-in).

use crate::commands::Ctx;
use crate::error::Result;
use crate::output;

/// Deletes the template; prints `deleted template NAME`.
pub fn run(name: &str, ctx: &Ctx) -> Result<()> {
    let reply = ctx.client()?.delete(&["templates", name], &[])?;
    if ctx.json() {
        return output::json(&reply);
    }
    output::line(&format!("deleted template {name}"))
}
