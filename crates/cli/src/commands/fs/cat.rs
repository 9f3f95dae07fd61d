//! `fs cat ID PATH`: `GET /v1/sandboxes/{id}/fs?path=PATH`, the raw bytes copied to stdout as
//! they arrive (`-o` does not apply).

use super::PathArgs;
use crate::commands::Ctx;
use crate::error::{CliError, Result};
use futures::StreamExt;
use std::io::Write;

/// Copies the file to stdout.
pub fn run(args: &PathArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(&args.id))?;
    let (_, mut body) = ctx.block(sandbox.files().read_stream(&args.path))?;
    let mut out = std::io::stdout().lock();
    while let Some(chunk) = ctx.block(body.next()) {
        let chunk =
            chunk.map_err(|e| CliError::Stream(format!("download of {} broke: {e}", args.path)))?;
        out.write_all(&chunk)
            .map_err(|e| CliError::io("writing stdout", e))?;
    }
    out.flush().map_err(|e| CliError::io("writing stdout", e))
}
