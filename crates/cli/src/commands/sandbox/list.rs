//! `sandbox list`: `GET /v1/sandboxes` (a bare array, contract §2.1).

use super::render;
use crate::commands::{print_json, Ctx};
use crate::error::Result;

/// Prints the workspace's sandboxes.
pub fn run(ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let all = ctx.block(client.sandboxes().list())?;
    if ctx.json() {
        return print_json(&all);
    }
    render::print_table(&all)
}
