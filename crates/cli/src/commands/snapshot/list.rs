//! `snapshot list [--sandbox ID]`: `GET /v1/snapshots[?sandbox_id=ID]`, a bare array or
//! `{"snapshots": [...]}` (contract §2.7). Table of the documented keys: `id`, `sandbox_id`,
//! `template`, `size_bytes`, `created_at` (missing ones show `-`).

use crate::commands::Ctx;
use crate::error::{CliError, Result};
use crate::output;
use clap::Args;
use serde_json::Value;

/// Flags of `snapshot list`.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// Only snapshots of this sandbox.
    #[arg(long, value_name = "SANDBOX_ID")]
    pub sandbox: Option<String>,
}

/// One table row of a snapshot object.
pub fn row(s: &Value) -> Vec<String> {
    let size = s
        .get("size_bytes")
        .and_then(Value::as_u64)
        .map(output::bytes)
        .unwrap_or_else(|| "-".into());
    vec![
        output::cell(s.get("id")),
        output::cell(s.get("sandbox_id")),
        output::cell(s.get("template")),
        size,
        output::cell(s.get("created_at")),
    ]
}

/// Prints the snapshots.
pub fn run(args: &ListArgs, ctx: &Ctx) -> Result<()> {
    let query: Vec<(&str, &str)> = args
        .sandbox
        .as_deref()
        .map(|s| vec![("sandbox_id", s)])
        .unwrap_or_default();
    let reply = ctx.client()?.get_json(&["snapshots"], &query)?;
    if ctx.json() {
        return output::json(&reply);
    }
    let items = output::list_items(&reply, &["snapshots"]).ok_or_else(|| CliError::BadReply {
        what: "GET /v1/snapshots".into(),
        detail: "not a list of snapshots".into(),
    })?;
    output::table(
        &["ID", "SANDBOX", "TEMPLATE", "SIZE", "CREATED"],
        &items.iter().map(row).collect::<Vec<_>>(),
    )
}
