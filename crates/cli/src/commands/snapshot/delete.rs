//! `snapshot delete ID`: `DELETE /v1/snapshots/{id}`.

use crate::commands::Ctx;
use crate::error::Result;
use crate::output;

/// Deletes the snapshot; prints `deleted snapshot ID`.
pub fn run(id: &str, ctx: &Ctx) -> Result<()> {
    let reply = ctx.client()?.delete(&["snapshots", id], &[])?;
    if ctx.json() {
        return output::json(&reply);
    }
    output::line(&format!("deleted snapshot {id}"))
}
