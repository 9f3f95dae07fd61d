//! `db list`: `GET /v1/databases` (`{"items": [...]}`, no credentials).

use super::render;
use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;
use pandastack_api::DatabaseList;

/// Prints the databases.
pub fn run(ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let items = ctx.block(client.databases().list())?;
    if ctx.json() {
        return print_json(&DatabaseList { items });
    }
    output::table(
        &render::HEADERS,
        &items.iter().map(render::row).collect::<Vec<_>>(),
    )
}
