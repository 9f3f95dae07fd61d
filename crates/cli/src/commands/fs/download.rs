//! `fs download ID --remote PATH [--local PATH]`: `GET /v1/sandboxes/{id}/fs?path=REMOTE`,
//! streamed into a temp file beside the destination (`.NAME.pandastack-PID.part`) that is
//! renamed over it only when the whole body arrived, so an interrupted download never leaves a
//! truncated file. `--local` defaults to the remote file name in the current directory; an
//! existing directory gets the remote file name inside it. Prints `downloaded N bytes to LOCAL`
//! (`-o json`: `{"remote", "local", "bytes"}`, made by the CLI: the server sends raw bytes).

use crate::commands::Ctx;
use crate::error::{CliError, Result};
use crate::output;
use crate::progress::{Progress, ProgressWriter};
use clap::Args;
use futures::StreamExt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Flags of `fs download`.
#[derive(Debug, Clone, Args)]
pub struct DownloadArgs {
    /// The sandbox id.
    #[arg(value_name = "SANDBOX_ID")]
    pub id: String,
    /// Absolute path of the file in the sandbox.
    #[arg(long, value_name = "PATH")]
    pub remote: String,
    /// Where to write it locally.
    #[arg(long, value_name = "PATH")]
    pub local: Option<PathBuf>,
}

/// The local destination for `remote`: `local` itself, `local/<name>` when `local` is a
/// directory, or `./<name>` when not given.
///
/// Errors: `remote` has no file name (e.g. `/`) and none was given.
pub fn destination(remote: &str, local: Option<&Path>) -> Result<PathBuf> {
    let name = Path::new(remote).file_name().map(PathBuf::from);
    let need_name = || {
        name.clone().ok_or_else(|| {
            CliError::Usage(format!(
                "cannot name a local file after '{remote}'; pass --local"
            ))
        })
    };
    match local {
        Some(l) if l.is_dir() => Ok(l.join(need_name()?)),
        Some(l) => Ok(l.to_path_buf()),
        None => need_name(),
    }
}

fn temp_beside(dest: &Path) -> PathBuf {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "download".into());
    dest.with_file_name(format!(".{name}.pandastack-{}.part", std::process::id()))
}

/// Downloads the file.
pub fn run(args: &DownloadArgs, ctx: &Ctx) -> Result<()> {
    let dest = destination(&args.remote, args.local.as_deref())?;
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(&args.id))?;
    let (total, mut body) = ctx.block(sandbox.files().read_stream(&args.remote))?;
    let tmp = temp_beside(&dest);
    let file = std::fs::File::create(&tmp)
        .map_err(|e| CliError::io(format!("creating {}", tmp.display()), e))?;
    let label = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut writer =
        ProgressWriter::new(std::io::BufWriter::new(file), Progress::new(&label, total));
    let mut copy = || -> Result<u64> {
        let mut n = 0u64;
        while let Some(chunk) = ctx.block(body.next()) {
            let chunk = chunk.map_err(|e| {
                CliError::Stream(format!("download of {} failed: {e}", args.remote))
            })?;
            writer
                .write_all(&chunk)
                .map_err(|e| CliError::io(format!("writing {}", tmp.display()), e))?;
            n += chunk.len() as u64;
        }
        Ok(n)
    };
    let copied = copy().and_then(|n| {
        writer.progress.finish();
        let file = writer
            .into_inner()
            .into_inner()
            .map_err(|e| CliError::io(format!("writing {}", tmp.display()), e.into_error()))?;
        file.sync_all()
            .map_err(|e| CliError::io(format!("writing {}", tmp.display()), e))?;
        std::fs::rename(&tmp, &dest)
            .map_err(|e| CliError::io(format!("renaming into {}", dest.display()), e))?;
        Ok(n)
    });
    let bytes = match copied {
        Ok(n) => n,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    let shown = dest.display().to_string();
    if ctx.json() {
        return output::json(
            &serde_json::json!({ "remote": args.remote, "local": shown, "bytes": bytes }),
        );
    }
    output::line(&format!("downloaded {bytes} bytes to {shown}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations() {
        assert_eq!(
            destination("/workspace/result.csv", Some(Path::new("./r.csv"))).ok(),
            Some(PathBuf::from("./r.csv"))
        );
        assert_eq!(
            destination("/workspace/result.csv", None).ok(),
            Some(PathBuf::from("result.csv"))
        );
        let dir = std::env::temp_dir();
        assert_eq!(
            destination("/a/b.txt", Some(&dir)).ok(),
            Some(dir.join("b.txt"))
        );
        assert!(destination("/", None).is_err());
    }

    #[test]
    fn temp_is_hidden_beside_the_destination() {
        let t = temp_beside(Path::new("/tmp/x/result.csv"));
        assert_eq!(t.parent(), Some(Path::new("/tmp/x")));
        assert!(t
            .file_name()
            .map(|n| n.to_string_lossy().starts_with(".result.csv.pandastack-"))
            .unwrap_or(false));
    }
}
