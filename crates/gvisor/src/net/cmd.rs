//! Running the host's network tools (`ip` from iproute2, `nft` from nftables, `nsenter` from
//! util-linux), with their input on stdin and their complaint as the error.

use std::process::Stdio;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// Runs `program args...` with `input` on stdin (if any).
///
/// # Errors
/// The program's last line of stderr (or how it could not be started) when it fails.
pub async fn run(program: &str, args: &[&str], input: Option<&str>) -> Result<(), String> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(text.as_bytes())
            .await
            .map_err(|e| format!("{program}: writing input: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    // nft reports `<file>:<line>: Error: ...`, then the offending line and a caret line: keep
    // the error and the line it is about.
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let why = match lines.iter().position(|l| l.contains("Error:")) {
        Some(i) => lines[i..lines.len().min(i + 2)].join(" | "),
        None => lines.last().copied().unwrap_or("no output").to_string(),
    };
    Err(format!(
        "{program} {}: {why}",
        args.first().copied().unwrap_or("")
    ))
}

/// `nft -f -` with `script`.
///
/// # Errors
/// nft's complaint.
pub async fn nft(script: &str) -> Result<(), String> {
    run("nft", &["-f", "-"], Some(script)).await
}

/// `ip [-n netns] -batch -` with `batch` (one `ip` command per line, without the `ip`).
///
/// # Errors
/// ip's complaint.
pub async fn ip_batch(netns: Option<&str>, batch: &str) -> Result<(), String> {
    match netns {
        Some(ns) => run("ip", &["-n", ns, "-batch", "-"], Some(batch)).await,
        None => run("ip", &["-batch", "-"], Some(batch)).await,
    }
}

/// Runs the shell `script` inside network namespace `netns` (`nsenter --net`), with `input`
/// on its stdin.
///
/// # Errors
/// The script's complaint.
pub async fn in_netns(netns: &str, script: &str, input: Option<&str>) -> Result<(), String> {
    let path = format!("--net=/run/netns/{netns}");
    run("nsenter", &[&path, "sh", "-ec", script], input).await
}
