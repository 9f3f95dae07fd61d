//! `sandbox fork-tree ID --count N [--metadata k=v]...`: `POST /v1/sandboxes/{id}/fork-tree`
//! with `{"count": N, "metadata"?: {...}}` (contract §2.1). The children come as a bare array or
//! under `children`, `items` or `sandboxes`; each is a sandbox object or an id string. Prints
//! `tree_id  T` (see [`tree_id`]) when known, then a table of the children.

use super::render;
use crate::client::Timeout;
use crate::commands::Ctx;
use crate::error::{CliError, Result};
use crate::output;
use crate::parse::{self, KeyValue};
use clap::Args;
use serde_json::{json, Value};

/// Flags of `sandbox fork-tree`.
#[derive(Debug, Clone, Args)]
pub struct ForkTreeArgs {
    /// The parent sandbox id.
    #[arg(value_name = "SANDBOX_ID")]
    pub id: String,
    /// Number of children.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub count: u32,
    /// Metadata of every child; repeatable.
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse::key_value)]
    pub metadata: Vec<KeyValue>,
}

/// The tree id: the reply's `tree_id`, else the first child's `metadata.fork_tree_id` (or
/// `metadata.tree_id`), as the Python SDK's `explore` reads it.
pub fn tree_id(reply: &Value) -> Option<String> {
    if let Some(t) = reply.get("tree_id").and_then(Value::as_str) {
        return Some(t.to_string());
    }
    let meta = children(reply)?.first()?.get("metadata")?;
    meta.get("fork_tree_id")
        .or_else(|| meta.get("tree_id"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The children of a fork-tree reply.
pub fn children(reply: &Value) -> Option<&Vec<Value>> {
    output::list_items(reply, &["children", "items", "sandboxes"])
}

/// Forks the children and prints them.
pub fn run(args: &ForkTreeArgs, ctx: &Ctx) -> Result<()> {
    let mut body = json!({ "count": args.count });
    if let Some(m) = parse::to_map(&args.metadata) {
        body["metadata"] = json!(m);
    }
    let reply = ctx.client()?.post_json(
        &["sandboxes", &args.id, "fork-tree"],
        Some(&body),
        Timeout::Slow,
    )?;
    if ctx.json() {
        return output::json(&reply);
    }
    let what = "POST /v1/sandboxes/{id}/fork-tree";
    let items = children(&reply).ok_or_else(|| CliError::BadReply {
        what: what.into(),
        detail: "no list of children in the reply".into(),
    })?;
    if let Some(tree) = tree_id(&reply) {
        output::pairs(&[("tree_id", tree)])?;
    }
    render::print_table(items, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_id_from_reply_or_children() {
        assert_eq!(
            tree_id(&json!({"tree_id": "t1", "children": []})).as_deref(),
            Some("t1")
        );
        assert_eq!(
            tree_id(&json!([{"id": "a", "metadata": {"fork_tree_id": "t2"}}])).as_deref(),
            Some("t2")
        );
        assert_eq!(tree_id(&json!(["a"])), None);
    }

    #[test]
    fn children_from_every_envelope() {
        for reply in [
            json!(["a", "b"]),
            json!({"children": ["a", "b"]}),
            json!({"items": ["a", "b"]}),
            json!({"sandboxes": ["a", "b"]}),
        ] {
            assert_eq!(children(&reply).map(Vec::len), Some(2), "{reply}");
        }
    }
}
