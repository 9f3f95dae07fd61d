//! `template builds`: `GET /v1/templates/builds` (a bare array, newest first).

use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;

/// Prints the workspace's builds.
pub fn run(ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let builds = ctx.block(client.templates().builds())?;
    if ctx.json() {
        return print_json(&builds);
    }
    let rows: Vec<Vec<String>> = builds
        .into_iter()
        .map(|b| {
            vec![
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
            ]
        })
        .collect();
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
