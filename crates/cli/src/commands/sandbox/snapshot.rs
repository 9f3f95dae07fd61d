//! `sandbox snapshot ID`: `POST /v1/sandboxes/{id}/snapshots` with no body (contract §2.2).
//! Prints only the snapshot id (`-o json`: the snapshot).

use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;

/// Snapshots the sandbox; prints the snapshot id.
pub fn run(id: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(id))?;
    let snap = ctx.block(sandbox.snapshot())?;
    if ctx.json() {
        return print_json(&snap);
    }
    output::line(&snap.id)
}
