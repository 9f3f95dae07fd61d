//! `token revoke PREFIX`: `DELETE /v1/me/tokens/{prefix}` (204).

use crate::commands::Ctx;
use crate::error::Result;
use crate::output;

/// Revokes the key; prints `revoked token PREFIX`.
pub fn run(prefix: &str, ctx: &Ctx) -> Result<()> {
    let reply = ctx.client()?.delete(&["me", "tokens", prefix], &[])?;
    if ctx.json() {
        return output::json(&reply);
    }
    output::line(&format!("revoked token {prefix}"))
}
