//! `sandbox lifecycle ID`: `GET /v1/sandboxes/{id}/lifecycle` -> `{ttl_seconds, persistent,
//! idle_seconds}` (seed 003). [`print`] is shared with `set-ttl` and `set-persistent`, whose
//! `PATCH` replies have the same shape.

use crate::commands::Ctx;
use crate::error::Result;
use crate::output::{self, decode};
use pandastack_api::Lifecycle;
use serde_json::Value;

/// Prints a lifecycle reply (`what` names the call for a decode error).
pub fn print(reply: &Value, what: &str, ctx: &Ctx) -> Result<()> {
    if ctx.json() {
        return output::json(reply);
    }
    let l: Lifecycle = decode(reply, what)?;
    output::pairs(&[
        ("ttl_seconds", l.ttl_seconds.to_string()),
        ("persistent", l.persistent.to_string()),
        ("idle_seconds", l.idle_seconds.to_string()),
    ])
}

/// Prints the sandbox's lifecycle settings.
pub fn run(id: &str, ctx: &Ctx) -> Result<()> {
    let reply = ctx
        .client()?
        .get_json(&["sandboxes", id, "lifecycle"], &[])?;
    print(&reply, "GET /v1/sandboxes/{id}/lifecycle", ctx)
}
