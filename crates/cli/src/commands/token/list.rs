//! `token list`: `GET /v1/me/tokens` (a bare array; never the secrets).

use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;

/// Prints the workspace's keys.
pub fn run(ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let tokens = ctx.block(client.tokens().list())?;
    if ctx.json() {
        return print_json(&tokens);
    }
    let rows: Vec<Vec<String>> = tokens
        .into_iter()
        .map(|t| {
            vec![
                t.prefix,
                t.label,
                t.created_at,
                t.expires_at.unwrap_or_else(|| "never".into()),
            ]
        })
        .collect();
    output::table(&["PREFIX", "LABEL", "CREATED", "EXPIRES"], &rows)
}
