//! `version`: prints `pandastack <version>` (the workspace version), as `--version` does;
//! `-o json` prints `{"version": "<version>"}`. No server call.

use super::{Ctx, GlobalOpts};
use crate::error::Result;
use crate::output;
use clap::Args;

/// Flags of `version`.
#[derive(Debug, Clone, Args)]
pub struct VersionArgs {
    #[command(flatten)]
    pub opts: GlobalOpts,
}

/// The client version, e.g. `0.1.0`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Prints the version.
pub fn run(ctx: &Ctx) -> Result<()> {
    if ctx.json() {
        return output::json(&serde_json::json!({ "version": VERSION }));
    }
    output::line(&format!("pandastack {VERSION}"))
}
