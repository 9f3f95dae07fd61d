//! `template get NAME`: `GET /v1/templates/{name}` (404 for another workspace's template).

use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;

/// Prints one template as `key  value` lines.
pub fn run(name: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let t = ctx.block(client.templates().get(name))?;
    if ctx.json() {
        return print_json(&t);
    }
    output::pairs(&[
        ("name", t.name),
        ("kind", t.kind),
        ("generation", t.generation.to_string()),
        ("base", t.base.unwrap_or_default()),
        ("cpu", t.cpu.to_string()),
        ("memory_mb", t.memory_mb.to_string()),
        (
            "size_mb",
            t.size_mb.map(|n| n.to_string()).unwrap_or_default(),
        ),
        ("size_bytes", t.size_bytes.to_string()),
        ("python", t.python.to_string()),
        ("is_global", t.is_global.to_string()),
        ("workspace", t.workspace.unwrap_or_default()),
        ("description", t.description),
        ("hash", t.hash),
    ])
}
