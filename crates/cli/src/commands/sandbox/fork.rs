//! `sandbox fork ID [--metadata k=v]...`: `POST /v1/sandboxes/{id}/fork` with
//! `{"metadata": {...}}`, or no metadata (contract §2.1), with the SDK's capacity retry. Prints
//! the child, whose metadata carries `parent_id` and `fork_tree_id`.

use super::render;
use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::parse::{self, KeyValue};
use clap::Args;

/// Flags of `sandbox fork`.
#[derive(Debug, Clone, Args)]
pub struct ForkArgs {
    /// The parent sandbox id.
    #[arg(value_name = "SANDBOX_ID")]
    pub id: String,
    /// Metadata of the child; repeatable.
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse::key_value)]
    pub metadata: Vec<KeyValue>,
}

/// Forks the sandbox and prints the child.
pub fn run(args: &ForkArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let parent = ctx.block(client.sandboxes().get(&args.id))?;
    let child = ctx.block(parent.fork(parse::to_map(&args.metadata)))?;
    if ctx.json() {
        return print_json(child.info());
    }
    render::print_one(child.info())
}
