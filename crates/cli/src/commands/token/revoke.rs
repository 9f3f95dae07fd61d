//! `token revoke PREFIX`: `DELETE /v1/me/tokens/{prefix}` (204).

use crate::commands::Ctx;
use crate::error::Result;
use crate::output;

/// Revokes the key; prints `revoked token PREFIX` (nothing with `-o json`).
pub fn run(prefix: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    ctx.block(client.tokens().revoke(prefix))?;
    if ctx.json() {
        return Ok(());
    }
    output::line(&format!("revoked token {prefix}"))
}
