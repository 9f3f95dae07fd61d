//! `fs stat ID PATH`: `GET /v1/sandboxes/{id}/fs/stat?path=PATH` -> one FileInfo (404 when
//! missing). Prints `key  value` lines with the FileInfo field names.

use super::ls::rfc3339;
use super::PathArgs;
use crate::commands::Ctx;
use crate::error::Result;
use crate::output::{self, decode};
use pandastack_api::FileInfo;

/// Prints the file's details.
pub fn run(args: &PathArgs, ctx: &Ctx) -> Result<()> {
    let reply = ctx.client()?.get_json(
        &["sandboxes", &args.id, "fs", "stat"],
        &[("path", &args.path)],
    )?;
    if ctx.json() {
        return output::json(&reply);
    }
    let f: FileInfo = decode(&reply, "GET /v1/sandboxes/{id}/fs/stat")?;
    output::pairs(&[
        ("path", f.path),
        ("is_dir", f.is_dir.to_string()),
        ("size", f.size.to_string()),
        ("mode", f.mode),
        ("mtime", format!("{} ({})", f.mtime, rfc3339(f.mtime))),
    ])
}
