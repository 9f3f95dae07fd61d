//! `sandbox get ID`: `GET /v1/sandboxes/{id}`.

use super::render;
use crate::commands::{print_json, Ctx};
use crate::error::Result;

/// Prints one sandbox.
pub fn run(id: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(id))?;
    if ctx.json() {
        return print_json(sandbox.info());
    }
    render::print_one(sandbox.info())
}
