//! `sandbox promote ID [--tree-id T] [--cleanup-siblings]`: `POST
//! /v1/sandboxes/{id}/promote` with `{"cleanup_siblings": bool, "tree_id"?: T}` (the flag is
//! always sent, contract §2.1). Prints `winner`, `tree_id`, `deleted` (ids) and `failures`.

use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;
use clap::Args;
use pandastack_api::{PromoteRequest, Promotion};

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
pub fn body(args: &PromoteArgs) -> PromoteRequest {
    PromoteRequest {
        tree_id: args.tree_id.clone(),
        cleanup_siblings: args.cleanup_siblings,
    }
}

/// The `key  value` lines of a promotion.
pub fn lines(p: &Promotion) -> Vec<(&'static str, String)> {
    let or_dash = |s: String| if s.is_empty() { "-".to_string() } else { s };
    vec![
        ("winner", p.winner.clone()),
        ("tree_id", p.tree_id.clone().unwrap_or_else(|| "-".into())),
        ("deleted", or_dash(p.deleted.join(","))),
        (
            "failures",
            or_dash(
                p.failures
                    .iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
        ),
    ]
}

/// Promotes the child and prints the outcome.
pub fn run(args: &PromoteArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let child = ctx.block(client.sandboxes().get(&args.id))?;
    let p = ctx.block(child.promote(body(args)))?;
    if ctx.json() {
        return print_json(&p);
    }
    output::pairs(&lines(&p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_lines() {
        let p = Promotion {
            winner: "a".into(),
            tree_id: Some("t".into()),
            deleted: vec!["b".into(), "c".into()],
            failures: [("d".to_string(), "busy".to_string())].into(),
        };
        let got: Vec<String> = lines(&p)
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        assert_eq!(
            got,
            ["winner=a", "tree_id=t", "deleted=b,c", "failures=d: busy"]
        );
        let empty = Promotion {
            winner: "a".into(),
            tree_id: None,
            deleted: vec![],
            failures: Default::default(),
        };
        assert!(lines(&empty).iter().skip(1).all(|(_, v)| v == "-"));
    }
}
