//! `fs upload ID --local PATH --remote PATH`: `PUT /v1/sandboxes/{id}/fs?path=REMOTE` with the
//! file streamed as the `application/octet-stream` body. The guest
//! writes atomically (temp file + rename). Prints `uploaded N bytes to REMOTE`; `-o json` prints
//! the server's `{path, bytes}`.

use crate::commands::{print_json, Ctx};
use crate::error::{CliError, Result};
use crate::output;
use crate::progress::Progress;
use clap::Args;
use futures::StreamExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

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
    let meta = std::fs::metadata(&args.local).map_err(|e| CliError::io(&what, e))?;
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
    let progress = Arc::new(Mutex::new(Progress::new(&label, Some(meta.len()))));
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(&args.id))?;
    let written = ctx.block(async {
        let file = tokio::fs::File::open(&args.local)
            .await
            .map_err(|e| CliError::io(&what, e))?;
        let seen = progress.clone();
        let chunks = tokio_util::io::ReaderStream::new(file).inspect(move |c| {
            if let (Ok(c), Ok(mut p)) = (c, seen.lock()) {
                p.advance(c.len() as u64);
            }
        });
        Ok::<_, CliError>(sandbox.files().write_stream(&args.remote, chunks).await?)
    })?;
    if let Ok(mut p) = progress.lock() {
        p.finish();
    }
    if ctx.json() {
        return print_json(&written);
    }
    output::line(&format!(
        "uploaded {} bytes to {}",
        written.bytes, written.path
    ))
}
