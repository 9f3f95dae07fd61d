//! `token list`: `GET /v1/me/tokens` (a bare array, or `{"items"}`).

use crate::commands::Ctx;
use crate::error::{CliError, Result};
use crate::output::{self, decode};
use pandastack_api::Token;

/// Prints the workspace's keys.
pub fn run(ctx: &Ctx) -> Result<()> {
    let reply = ctx.client()?.get_json(&["me", "tokens"], &[])?;
    if ctx.json() {
        return output::json(&reply);
    }
    let what = "GET /v1/me/tokens";
    let items = output::list_items(&reply, &["items"]).ok_or_else(|| CliError::BadReply {
        what: what.into(),
        detail: "not a list of tokens".into(),
    })?;
    let mut rows = Vec::with_capacity(items.len());
    for item in items {
        let t: Token = decode(item, what)?;
        rows.push(vec![
            t.prefix,
            t.label,
            t.created_at,
            t.expires_at.unwrap_or_else(|| "never".into()),
        ]);
    }
    output::table(&["PREFIX", "LABEL", "CREATED", "EXPIRES"], &rows)
}
