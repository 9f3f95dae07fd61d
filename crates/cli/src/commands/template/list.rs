//! `template list`: `GET /v1/templates` (a bare array of templates, contract §2.8).

use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;

/// Prints the templates.
pub fn run(ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let templates = ctx.block(client.templates().list())?;
    if ctx.json() {
        return print_json(&templates);
    }
    let rows: Vec<Vec<String>> = templates
        .into_iter()
        .map(|t| {
            vec![
                t.name,
                t.generation.to_string(),
                output::bytes(t.size_bytes),
                t.cpu.to_string(),
                t.memory_mb.to_string(),
                t.description,
            ]
        })
        .collect();
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
