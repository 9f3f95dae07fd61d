//! Invocations of the `runsc` command line. Every call passes the same global flags, so the
//! state root, platform and overlay choice live in one place.

use pandastack_engine::EngineError;
use std::path::{Path, PathBuf};
use tokio::process::Command;

/// Global runsc settings shared by every call for an engine.
#[derive(Debug, Clone)]
pub struct Runsc {
    /// The runsc binary.
    pub binary: PathBuf,
    /// runsc's state directory (`--root`).
    pub root: PathBuf,
    /// `--platform`: `ptrace` by default (idle sandboxes cost ~0 CPU; notes table).
    pub platform: String,
}

impl Runsc {
    /// Global flags for starting an instance whose private overlay lives in `overlay_dir`
    /// (`None` for commands on an existing instance). `networked` instances use gVisor's
    /// netstack on the namespace's interfaces (`--network=sandbox`; `--net-disconnect-ok` so a
    /// link that goes away with its namespace does not bring the sandbox down: its default
    /// is off in this runsc); the others get loopback only.
    pub fn global_args(&self, overlay_dir: Option<&Path>, networked: bool) -> Vec<String> {
        let mut args = vec![
            format!("--root={}", self.root.display()),
            format!("--platform={}", self.platform),
        ];
        if networked {
            args.push("--network=sandbox".to_string());
            args.push("--net-disconnect-ok".to_string());
        } else {
            args.push("--network=none".to_string());
        }
        // Only the root is overlaid: writable bind mounts (volumes) must reach the host.
        if let Some(dir) = overlay_dir {
            args.push(format!("--overlay2=root:dir={}", dir.display()));
        }
        args
    }

    /// Runs `runsc <global> <args>` to completion and returns its stdout.
    ///
    /// # Errors
    /// [`EngineError::Failed`] with runsc's stderr (last line) when it exits non-zero.
    pub async fn call(
        &self,
        op: &'static str,
        id: &str,
        args: &[&str],
    ) -> Result<String, EngineError> {
        let out = Command::new(&self.binary)
            .args(self.global_args(None, false))
            .args(args)
            .stdin(std::process::Stdio::null())
            // A caller that stops waiting (a timeout) ends runsc too.
            .kill_on_drop(true)
            .output()
            .await?;
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let detail = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output")
            .to_string();
        Err(EngineError::Failed {
            op,
            id: id.to_string(),
            detail,
        })
    }
}
