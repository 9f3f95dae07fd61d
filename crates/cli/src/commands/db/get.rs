//! `db get ID` (`GET /v1/databases/{id}`) and `db connection ID`
//! (`GET /v1/databases/{id}/connection`: only the URL, for `export DATABASE_URL=$(...)`).

use super::render;
use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;

/// Prints one database.
pub fn run(id: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let db = ctx.block(client.databases().get(id))?;
    if ctx.json() {
        return print_json(&db);
    }
    render::print_one(&db)
}

/// Prints the connection URL alone.
pub fn connection(id: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let url = ctx.block(client.databases().connection(id))?;
    if ctx.json() {
        return print_json(&pandastack_api::DatabaseConnection {
            connection_url: url,
        });
    }
    output::line(&url)
}
