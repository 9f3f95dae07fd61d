//! `sandbox lifecycle ID`: `GET /v1/sandboxes/{id}/lifecycle` -> `{ttl_seconds, persistent,
//! idle_seconds}` (seed 003). [`print`] is shared with `set-ttl` and `set-persistent`, whose
//! `PATCH` replies have the same shape.

use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;
use pandastack_api::Lifecycle;

/// Prints a lifecycle.
pub fn print(l: &Lifecycle, ctx: &Ctx) -> Result<()> {
    if ctx.json() {
        return print_json(l);
    }
    output::pairs(&[
        ("ttl_seconds", l.ttl_seconds.to_string()),
        ("persistent", l.persistent.to_string()),
        ("idle_seconds", l.idle_seconds.to_string()),
    ])
}

/// Prints the sandbox's lifecycle settings.
pub fn run(id: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(id))?;
    let l = ctx.block(sandbox.lifecycle())?;
    print(&l, ctx)
}
