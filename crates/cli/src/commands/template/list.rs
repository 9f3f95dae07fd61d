//! `template list`: `GET /v1/templates` (a bare array of templates, contract §2.8).

use crate::commands::Ctx;
use crate::error::{CliError, Result};
use crate::output::{self, decode};
use pandastack_api::Template;

/// Prints the templates.
pub fn run(ctx: &Ctx) -> Result<()> {
    let reply = ctx.client()?.get_json(&["templates"], &[])?;
    if ctx.json() {
        return output::json(&reply);
    }
    let what = "GET /v1/templates";
    let items = output::list_items(&reply, &["items"]).ok_or_else(|| CliError::BadReply {
        what: what.into(),
        detail: "not a list of templates".into(),
    })?;
    let mut rows = Vec::with_capacity(items.len());
    for item in items {
        let t: Template = decode(item, what)?;
        rows.push(vec![
            t.name,
            t.generation.to_string(),
            output::bytes(t.size_bytes),
            t.cpu.to_string(),
            t.memory_mb.to_string(),
            t.description,
        ]);
    }
    output::table(
        &[
            "NAME",
            "GENERATION",
            "SIZE",
            "CPU",
            "MEMORY_MB",
            "DESCRIPTION",
        ],
        &rows,
    )
}
