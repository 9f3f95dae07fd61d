//! `snapshot list [--sandbox ID]`: `GET /v1/snapshots[?sandbox_id=ID]` (`{"snapshots":
//! [...]}`, contract §2.7). Table of the documented keys: `id`, `sandbox_id`, `template`,
//! `size_bytes`, `created_at`.

use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;
use clap::Args;
use pandastack_api::{Snapshot, SnapshotList};

/// Flags of `snapshot list`.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// Only snapshots of this sandbox.
    #[arg(long, value_name = "SANDBOX_ID")]
    pub sandbox: Option<String>,
}

/// One table row of a snapshot.
pub fn row(s: &Snapshot) -> Vec<String> {
    vec![
        s.id.clone(),
        s.sandbox_id.clone(),
        s.template.clone(),
        output::bytes(s.size_bytes.max(0) as u64),
        s.created_at.clone(),
    ]
}

/// Prints the snapshots.
pub fn run(args: &ListArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let snapshots = ctx.block(client.snapshots().list(args.sandbox.as_deref()))?;
    if ctx.json() {
        return print_json(&SnapshotList { snapshots });
    }
    output::table(
        &["ID", "SANDBOX", "TEMPLATE", "SIZE", "CREATED"],
        &snapshots.iter().map(row).collect::<Vec<_>>(),
    )
}
