//! `fs stat ID PATH`: `GET /v1/sandboxes/{id}/fs/stat?path=PATH` -> one FileInfo (404 when
//! missing). Prints `key  value` lines with the FileInfo field names.

use super::ls::rfc3339;
use super::PathArgs;
use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;

/// Prints the file's details.
pub fn run(args: &PathArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(&args.id))?;
    let f = ctx.block(sandbox.files().stat(&args.path))?;
    if ctx.json() {
        return print_json(&f);
    }
    output::pairs(&[
        ("path", f.path),
        ("is_dir", f.is_dir.to_string()),
        ("size", f.size.to_string()),
        ("mode", f.mode),
        ("mtime", format!("{} ({})", f.mtime, rfc3339(f.mtime))),
    ])
}
