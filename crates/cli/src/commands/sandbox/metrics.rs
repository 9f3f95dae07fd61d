//! `sandbox metrics ID`: `GET /v1/sandboxes/{id}/metrics` (seed 003: memory and CPU tracked by
//! the health monitor), printed as `key  value` lines named as the JSON fields.

use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;

/// Prints the sandbox's metrics.
pub fn run(id: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(id))?;
    let m = ctx.block(sandbox.metrics())?;
    if ctx.json() {
        return print_json(&m);
    }
    output::pairs(&[
        ("sandbox_id", m.sandbox_id.clone()),
        ("status", m.status.clone()),
        ("memory_bytes", m.memory_bytes.to_string()),
        ("rss_bytes", m.rss_bytes.to_string()),
        ("cpu_ns", m.cpu_ns.to_string()),
        ("cpu_percent", format!("{:.1}", m.cpu_percent)),
    ])
}
