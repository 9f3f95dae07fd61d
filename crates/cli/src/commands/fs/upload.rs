//! `fs upload ID --local PATH --remote PATH`: `PUT /v1/sandboxes/{id}/fs?path=REMOTE` with the
//! file streamed as the `application/octet-stream` body (its length known up front). The guest
//! writes atomically (temp file + rename). Prints `uploaded N bytes to REMOTE`; `-o json` prints
//! the server's `{path, bytes}`.

use crate::client::Timeout;
use crate::commands::Ctx;
use crate::error::{CliError, Result};
use crate::output::{self, decode};
use crate::progress::{Progress, ProgressReader};
use clap::Args;
use pandastack_api::WriteResult;
use reqwest::blocking::Body;
use reqwest::header::CONTENT_TYPE;
use reqwest::Method;
use std::path::PathBuf;

/// Flags of `fs upload`.
#[derive(Debug, Clone, Args)]
pub struct UploadArgs {
    /// The sandbox id.
    #[arg(value_name = "SANDBOX_ID")]
    pub id: String,
    /// The local file to send.
    #[arg(long, value_name = "PATH")]
    pub local: PathBuf,
    /// Absolute destination path in the sandbox (parents are created).
    #[arg(long, value_name = "PATH")]
    pub remote: String,
}

/// Uploads the file.
pub fn run(args: &UploadArgs, ctx: &Ctx) -> Result<()> {
    let what = format!("reading {}", args.local.display());
    let file = std::fs::File::open(&args.local).map_err(|e| CliError::io(&what, e))?;
    let meta = file.metadata().map_err(|e| CliError::io(&what, e))?;
    if meta.is_dir() {
        return Err(CliError::Usage(format!(
            "{} is a directory; upload files one at a time",
            args.local.display()
        )));
    }
    let label = args
        .local
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "upload".into());
    let reader = ProgressReader::new(file, Progress::new(&label, Some(meta.len())));
    let client = ctx.client()?;
    let rb = client
        .request(
            Method::PUT,
            &["sandboxes", &args.id, "fs"],
            &[("path", &args.remote)],
            Timeout::Stream,
        )
        .header(CONTENT_TYPE, "application/octet-stream")
        .body(Body::sized(reader, meta.len()));
    let reply = client.json(rb)?;
    if ctx.json() {
        return output::json(&reply);
    }
    let written: WriteResult = decode(&reply, "PUT /v1/sandboxes/{id}/fs")?;
    output::line(&format!(
        "uploaded {} bytes to {}",
        written.bytes, written.path
    ))
}
