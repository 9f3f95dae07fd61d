//! `sandbox list`: `GET /v1/sandboxes` (a bare array, or `{"items": [...]}`, contract §2.1).

use super::render;
use crate::commands::Ctx;
use crate::error::{CliError, Result};
use crate::output;

/// Prints the workspace's sandboxes.
pub fn run(ctx: &Ctx) -> Result<()> {
    let reply = ctx.client()?.get_json(&["sandboxes"], &[])?;
    if ctx.json() {
        return output::json(&reply);
    }
    let what = "GET /v1/sandboxes";
    let items = output::list_items(&reply, &["items"]).ok_or_else(|| CliError::BadReply {
        what: what.into(),
        detail: "not a list of sandboxes".into(),
    })?;
    render::print_table(items, what)
}
