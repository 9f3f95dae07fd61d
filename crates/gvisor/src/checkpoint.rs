//! Checkpoints that leave proof of completion.
//!
//! `runsc checkpoint` runs under the shim in checkpoint mode (no socket), in its own session:
//! when the server is killed in the middle, the checkpoint still runs to its end, and the shim
//! writes runsc's exit code to `<image>/checkpoint.exit` (atomically) with runsc's output in
//! `<image>/checkpoint.log`. Start-up recovery reads that marker to tell a complete image from a
//! torn one ([`outcome`]); while a checkpoint is still running, recovery can see it by the image
//! path on its command line.

use pandastack_engine::{CheckpointOutcome, EngineError};
use std::path::Path;
use std::process::Stdio;

/// The exit-code marker a finished checkpoint leaves in its image directory.
pub const EXIT_MARKER: &str = "checkpoint.exit";
/// runsc's output during the checkpoint.
pub const LOG: &str = "checkpoint.log";

/// Runs `runsc_cmd` (program first) under the shim (`shim_command`) in checkpoint mode, in its
/// own session, and waits for it.
///
/// # Errors
/// [`EngineError::Failed`] with runsc's last output line when the checkpoint fails.
pub async fn run(
    shim_command: &[String],
    id: &str,
    image: &Path,
    runsc_cmd: Vec<String>,
) -> Result<(), EngineError> {
    let marker = image.join(EXIT_MARKER);
    let _ = std::fs::remove_file(&marker);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(image.join(LOG))?;
    let (program, lead) = shim_command
        .split_first()
        .ok_or_else(|| EngineError::Failed {
            op: "checkpoint",
            id: id.to_string(),
            detail: "no shim command".into(),
        })?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(lead)
        .arg("--exit-file")
        .arg(&marker)
        .arg("--log")
        .arg(image.join(LOG))
        .arg("--")
        .args(&runsc_cmd)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: setsid() is async-signal-safe and touches no memory of the parent; in its own
    // session the checkpoint survives a signal to the server's process group.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let waited = tokio::task::spawn_blocking(move || child.wait())
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    waited?;
    match outcome(image) {
        CheckpointOutcome::Complete => Ok(()),
        CheckpointOutcome::Failed(detail) => Err(EngineError::Failed {
            op: "checkpoint",
            id: id.to_string(),
            detail,
        }),
        other => Err(EngineError::Failed {
            op: "checkpoint",
            id: id.to_string(),
            detail: format!("checkpoint ended without an exit marker ({other:?})"),
        }),
    }
}

/// What became of a checkpoint into `image`.
pub fn outcome(image: &Path) -> CheckpointOutcome {
    if let Some(done) = marker(image) {
        return done;
    }
    if writer_running(image) {
        return CheckpointOutcome::Running;
    }
    // The shim writes the marker before it exits, so a writer that ended during the scan of
    // /proc (which takes a while on a busy host) has left its marker by now.
    marker(image).unwrap_or(CheckpointOutcome::Incomplete)
}

/// The outcome recorded by the exit marker, if there is one.
fn marker(image: &Path) -> Option<CheckpointOutcome> {
    let code = std::fs::read_to_string(image.join(EXIT_MARKER)).ok()?;
    Some(if code.trim() == "0" {
        CheckpointOutcome::Complete
    } else {
        CheckpointOutcome::Failed(format!(
            "runsc checkpoint exited with {}: {}",
            code.trim(),
            crate::shim::output::last_line(&image.join(LOG))
        ))
    })
}

/// True when a process (the shim or runsc) is still writing `image`: its command line names it.
fn writer_running(image: &Path) -> bool {
    let needle = format!("--image-path={}", image.display());
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.filter_map(Result::ok).any(|p| {
        p.file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
            && std::fs::read(p.path().join("cmdline"))
                .map(|c| c.split(|b| *b == 0).any(|arg| arg == needle.as_bytes()))
                .unwrap_or(false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_tell_complete_failed_and_torn_images_apart() {
        let dir = std::env::temp_dir().join(format!("ps-ckpt-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(outcome(&dir), CheckpointOutcome::Incomplete);
        std::fs::write(dir.join(LOG), "W some warning\nE checkpoint failed: boom\n").unwrap();
        std::fs::write(dir.join(EXIT_MARKER), "128").unwrap();
        match outcome(&dir) {
            CheckpointOutcome::Failed(d) => assert!(d.contains("boom") && d.contains("128"), "{d}"),
            other => panic!("{other:?}"),
        }
        std::fs::write(dir.join(EXIT_MARKER), "0").unwrap();
        assert_eq!(outcome(&dir), CheckpointOutcome::Complete);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_checkpoint_still_writing_is_running() {
        let dir = std::env::temp_dir().join(format!("ps-ckpt-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        // Any process naming the image path on its command line stands for runsc.
        let mut writer = std::process::Command::new("sh")
            .args(["-c", "sleep 5", "runsc"])
            .arg(format!("--image-path={}", dir.display()))
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(outcome(&dir), CheckpointOutcome::Running);
        writer.kill().unwrap();
        writer.wait().unwrap();
        assert_eq!(outcome(&dir), CheckpointOutcome::Incomplete);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
