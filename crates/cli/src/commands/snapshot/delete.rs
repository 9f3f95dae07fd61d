//! `snapshot delete ID`: `DELETE /v1/snapshots/{id}` (204).

use crate::commands::Ctx;
use crate::error::Result;
use crate::output;

/// Deletes the snapshot; prints `deleted snapshot ID` (nothing with `-o json`).
pub fn run(id: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    ctx.block(client.snapshots().delete(id))?;
    if ctx.json() {
        return Ok(());
    }
    output::line(&format!("deleted snapshot {id}"))
}
