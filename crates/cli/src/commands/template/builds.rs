//! `template builds`: `GET /v1/templates/builds` (a bare array, newest first).

use crate::commands::Ctx;
use crate::error::{CliError, Result};
use crate::output::{self, decode};
use pandastack_api::TemplateBuild;

/// Prints the workspace's builds.
pub fn run(ctx: &Ctx) -> Result<()> {
    let reply = ctx.client()?.get_json(&["templates", "builds"], &[])?;
    if ctx.json() {
        return output::json(&reply);
    }
    let what = "GET /v1/templates/builds";
    let items = output::list_items(&reply, &["items"]).ok_or_else(|| CliError::BadReply {
        what: what.into(),
        detail: "not a list of builds".into(),
    })?;
    let mut rows = Vec::with_capacity(items.len());
    for item in items {
        let b: TemplateBuild = decode(item, what)?;
        rows.push(vec![
            b.id,
            b.name,
            b.status,
            b.kind,
            b.generation.map(|g| g.to_string()).unwrap_or_default(),
            if b.cache_hit { "yes" } else { "" }.to_string(),
            b.created_at,
            b.error
                .map(|e| e.lines().next().unwrap_or("").to_string())
                .unwrap_or_default(),
        ]);
    }
    output::table(
        &[
            "ID",
            "NAME",
            "STATUS",
            "KIND",
            "GENERATION",
            "CACHED",
            "CREATED",
            "ERROR",
        ],
        &rows,
    )
}
