//! `sandbox fork-tree ID --count N [--metadata k=v]...`: `POST /v1/sandboxes/{id}/fork-tree`
//! with `{"count": N, "metadata"?: {...}}` (contract §2.1), with the SDK's capacity retry.
//! Prints `tree_id  T` (the children's `metadata.fork_tree_id`), then a table of the children.

use super::render;
use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;
use crate::parse::{self, KeyValue};
use clap::Args;
use pandastack_api::Sandbox;

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

/// The tree id of a set of children: the first child's `metadata.fork_tree_id`.
pub fn tree_id(children: &[Sandbox]) -> Option<&str> {
    children
        .first()
        .and_then(|c| c.metadata.get("fork_tree_id"))
        .map(String::as_str)
}

/// Forks the children and prints them.
pub fn run(args: &ForkTreeArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let parent = ctx.block(client.sandboxes().get(&args.id))?;
    let children =
        ctx.block(parent.fork_tree(args.count as usize, parse::to_map(&args.metadata)))?;
    let infos: Vec<Sandbox> = children.iter().map(|c| c.info().clone()).collect();
    if ctx.json() {
        return print_json(&infos);
    }
    if let Some(tree) = tree_id(&infos) {
        output::pairs(&[("tree_id", tree.to_string())])?;
    }
    render::print_table(&infos)
}
