//! `sandbox promote ID [--tree-id T] [--cleanup-siblings]`: `POST
//! /v1/sandboxes/{id}/promote` with `{"cleanup_siblings": bool, "tree_id"?: T}` (the flag is
//! always sent, contract §2.1). Reply `{winner, tree_id?, deleted?: [id], failures?: {id: msg}}`.

use crate::client::Timeout;
use crate::commands::Ctx;
use crate::error::Result;
use crate::output;
use clap::Args;
use serde_json::{json, Value};

/// Flags of `sandbox promote`.
#[derive(Debug, Clone, Args)]
pub struct PromoteArgs {
    /// The child to keep.
    #[arg(value_name = "SANDBOX_ID")]
    pub id: String,
    /// The fork tree the child belongs to (`metadata.fork_tree_id`).
    #[arg(long, value_name = "TREE_ID")]
    pub tree_id: Option<String>,
    /// Delete the other children of the tree.
    #[arg(long)]
    pub cleanup_siblings: bool,
}

/// The request body for these flags.
pub fn body(args: &PromoteArgs) -> Value {
    let mut body = json!({ "cleanup_siblings": args.cleanup_siblings });
    if let Some(t) = &args.tree_id {
        body["tree_id"] = json!(t);
    }
    body
}

fn ids(v: Option<&Value>) -> String {
    match v.and_then(Value::as_array) {
        Some(a) if !a.is_empty() => a
            .iter()
            .map(|x| output::cell(Some(x)))
            .collect::<Vec<_>>()
            .join(","),
        _ => "-".into(),
    }
}

fn failures(v: Option<&Value>) -> String {
    match v.and_then(Value::as_object) {
        Some(m) if !m.is_empty() => m
            .iter()
            .map(|(k, x)| format!("{k}: {}", output::cell(Some(x))))
            .collect::<Vec<_>>()
            .join("; "),
        _ => "-".into(),
    }
}

/// Promotes the child and prints the outcome.
pub fn run(args: &PromoteArgs, ctx: &Ctx) -> Result<()> {
    let reply = ctx.client()?.post_json(
        &["sandboxes", &args.id, "promote"],
        Some(&body(args)),
        Timeout::Slow,
    )?;
    if ctx.json() {
        return output::json(&reply);
    }
    output::pairs(&[
        ("winner", output::cell(reply.get("winner"))),
        ("tree_id", output::cell(reply.get("tree_id"))),
        ("deleted", ids(reply.get("deleted"))),
        ("failures", failures(reply.get("failures"))),
    ])
}
