//! Running the host's tools (`mkfs.ext4`, `mount`, `losetup`, `resize2fs`, `initdb`, ...) with
//! their complaint as the error.

use crate::PgError;
use std::process::Stdio;
use tokio::process::Command;

/// Runs `cmd` to its end. Returns its stdout.
///
/// # Errors
/// [`PgError::Tool`] with the last lines of its stderr (or why it could not start).
pub async fn run(tool: &'static str, cmd: Command) -> Result<String, PgError> {
    run_accepting(tool, cmd, &[0]).await
}

/// [`run`], taking every exit code in `ok` as success (`e2fsck` exits 1 after fixing
/// something harmless).
///
/// # Errors
/// As [`run`].
pub async fn run_accepting(
    tool: &'static str,
    mut cmd: Command,
    ok: &[i32],
) -> Result<String, PgError> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = cmd.output().await.map_err(|e| PgError::Tool {
        tool,
        detail: format!("cannot run it: {e}"),
    })?;
    if out.status.code().is_some_and(|c| ok.contains(&c)) {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
    Err(PgError::Tool {
        tool,
        detail: if tail.is_empty() {
            out.status.to_string()
        } else {
            tail
        },
    })
}

/// A command for `program` with `args`.
pub fn command(program: &str, args: &[&str]) -> Command {
    let mut c = Command::new(program);
    c.args(args);
    c
}
