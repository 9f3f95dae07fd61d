//! `sandbox get ID`: `GET /v1/sandboxes/{id}`.

use super::render;
use crate::commands::Ctx;
use crate::error::Result;
use crate::output;

/// Prints one sandbox.
pub fn run(id: &str, ctx: &Ctx) -> Result<()> {
    let reply = ctx.client()?.get_json(&["sandboxes", id], &[])?;
    if ctx.json() {
        return output::json(&reply);
    }
    render::print_one(&reply, "GET /v1/sandboxes/{id}")
}
