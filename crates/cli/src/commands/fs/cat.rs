//! `fs cat ID PATH`: `GET /v1/sandboxes/{id}/fs?path=PATH`, the raw bytes copied to stdout as
//! they arrive (`-o` does not apply).

use super::PathArgs;
use crate::client::Timeout;
use crate::commands::Ctx;
use crate::error::{CliError, Result};
use reqwest::Method;
use std::io::Write;

/// Copies the file to stdout.
pub fn run(args: &PathArgs, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let rb = client.request(
        Method::GET,
        &["sandboxes", &args.id, "fs"],
        &[("path", &args.path)],
        Timeout::Stream,
    );
    let mut resp = client.send(rb)?;
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = std::io::Read::read(&mut resp, &mut buf).map_err(|e| {
            CliError::Stream(format!(
                "download of {} broke: {}",
                args.path,
                crate::error::root_cause(&e)
            ))
        })?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])
            .map_err(|e| CliError::io("writing stdout", e))?;
    }
    out.flush().map_err(|e| CliError::io("writing stdout", e))
}
