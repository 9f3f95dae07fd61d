//! One `RUN` step: a build sandbox booted on the rootfs being built (no overlay: its writes are
//! the result; root with the usual container capabilities; internet egress through NAT so
//! `apt-get`, `pip` and `npm` can download, whatever the server's default for user sandboxes,
//! unless the server runs without sandbox networking), the command run by its guest
//! daemon with the step's environment and directory, every line of output streamed to the
//! build log, then the sandbox destroyed. A fresh sandbox per `RUN`, as Docker does, so
//! processes a step leaves behind do not leak into the next one (~0.3 s per step here).
//!
//! Build sandboxes are instances like any other for the host's capacity (issue 8): each one
//! (and the boot of the template snapshot) is admitted first ([`admitted`]); when the host is
//! full the build waits for room, saying so in its log, and fails after
//! [`ADMISSION_WAIT`]. They do not count toward the workspace's sandbox quota (they are not
//! sandboxes of the workspace), and a step refuses to start when the disk is below its reserve.

use super::job::BuildError;
use super::log::BuildLog;
use crate::error::ApiError;
use crate::guest::GuestConn;
use crate::host::{Admitted, Host};
use pandastack_guest_protocol::{GuestMsg, HostMsg};
use pandastack_templates::Resources;
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::time::Duration;

/// Memory a build sandbox gets at least, MiB (package managers need more than a small
/// template's sandboxes do).
pub const MIN_BUILD_MEMORY_MB: u32 = 1024;

/// How long a fresh build sandbox may take to answer its handshake.
const HANDSHAKE: Duration = Duration::from_secs(20);

/// Lines of output kept for the error of a failed step.
const TAIL_LINES: usize = 20;

/// How long a build waits for room on a full host before it fails.
pub const ADMISSION_WAIT: Duration = Duration::from_secs(300);

/// Waits until the host admits one build instance of `memory_mb` MiB for `workspace_id`
/// (`what`: "RUN", "the template snapshot", for messages), polling every
/// `Retry-After` seconds while the host is at capacity. `may_write` is what the step may
/// still write on the data dir's disk, bytes (the room left on the build disk; issue 23
/// finding 5): the disk reserve must hold it.
///
/// # Errors
/// [`BuildError`] when the data dir's disk would go below its reserve (507 rule of issue 8), when
/// the host stayed full for [`ADMISSION_WAIT`], or on any other refusal.
pub async fn admitted(
    host: &Host,
    workspace_id: &str,
    memory_mb: u32,
    may_write: u64,
    what: &str,
    log: &BuildLog,
) -> Result<Admitted, BuildError> {
    let started = std::time::Instant::now();
    let mut said = false;
    loop {
        host.check_disk_reserve("template build", may_write)
            .map_err(|e| BuildError(e.to_string()))?;
        match host.admit(workspace_id, memory_mb, 1, false).await {
            Ok(admitted) => return Ok(admitted),
            Err(ApiError::Busy {
                message,
                retry_after_s,
            }) => {
                if started.elapsed() >= ADMISSION_WAIT {
                    return Err(BuildError(format!(
                        "{what}: {message} (waited {} s)",
                        ADMISSION_WAIT.as_secs()
                    )));
                }
                if !said {
                    log.line(&format!("waiting for room on the host: {message}"));
                    said = true;
                }
                tokio::time::sleep(Duration::from_secs(retry_after_s.max(1))).await;
            }
            Err(e) => return Err(BuildError(format!("{what}: {e}"))),
        }
    }
}

/// A command for the build sandbox.
pub struct RunCommand<'a> {
    /// The command line the guest runs.
    pub cmd: String,
    pub env: BTreeMap<String, String>,
    /// Absolute working directory (exists in the rootfs).
    pub cwd: String,
    pub timeout: Duration,
    /// Dockerfile line, for messages.
    pub line: usize,
    pub log: &'a BuildLog,
    /// What the step may still write on the host's disk, bytes (for the disk reserve).
    pub may_write: u64,
}

/// Runs `run` in a build sandbox on `rootfs`, admitted for `workspace_id` ([`admitted`]).
///
/// # Errors
/// [`BuildError`] when the command exits non-zero (with the end of its output) or times out,
/// when the host has no room or disk for it, or when the sandbox cannot start. The sandbox is
/// destroyed in every case.
pub async fn run(
    host: &Host,
    workspace_id: &str,
    rootfs: &Path,
    resources: &Resources,
    run: RunCommand<'_>,
) -> Result<(), BuildError> {
    let memory_mb = resources.memory_mb.max(MIN_BUILD_MEMORY_MB);
    let _admitted = admitted(host, workspace_id, memory_mb, run.may_write, "RUN", run.log).await?;
    let mut spec = host.instance_spec(
        &rootfs.display().to_string(),
        &host.cfg.guest_dir.display().to_string(),
        resources.cpu,
        memory_mb,
        host.cfg
            .network
            .map(|_| pandastack_engine::NetworkPolicy::open()),
        // No gVisor overlay disk: a build writes straight into its tree, whose writable layer
        // is on the build's own disk of `size_mb` (`builds/build_disk.rs`).
        None,
    );
    spec.template_build = true;
    let started = std::time::Instant::now();
    let inst = host
        .engine
        .boot(&spec)
        .await
        .map_err(|e| BuildError::internal("starting the build sandbox", e))?;
    let booted = started.elapsed();
    let result = exec(&inst.guest_socket, &run).await;
    let ran = started.elapsed();
    if let Err(e) = host.engine.destroy(&spec.instance_id, &spec.dir).await {
        tracing::warn!(instance_id = %spec.instance_id, error = %e, "destroying a build sandbox");
    }
    tracing::debug!(
        instance_id = %spec.instance_id,
        boot_ms = booted.as_millis() as u64,
        run_ms = (ran - booted).as_millis() as u64,
        destroy_ms = (started.elapsed() - ran).as_millis() as u64,
        "build step sandbox"
    );
    result
}

async fn exec(socket: &Path, run: &RunCommand<'_>) -> Result<(), BuildError> {
    let conn = GuestConn::connect(socket, HANDSHAKE)
        .await
        .map_err(|e| BuildError::internal("connecting to the build sandbox", e))?;
    let id = conn.new_id();
    let msg = HostMsg::Exec {
        id,
        cmd: run.cmd.clone(),
        env: run.env.clone(),
        cwd: Some(run.cwd.clone()),
        timeout_ms: Some(run.timeout.as_millis() as u64),
    };
    let mut rx = conn
        .request(msg, Vec::new())
        .await
        .map_err(|e| BuildError::internal("starting the RUN command", e))?;
    let mut tail = Tail::default();
    while let Some((reply, body)) = rx.recv().await {
        match reply {
            GuestMsg::Output { .. } => {
                run.log.output(&body);
                tail.push(&body);
            }
            GuestMsg::Exited {
                exit_code,
                timed_out,
                ..
            } => {
                run.log.flush_output();
                if timed_out {
                    return Err(BuildError(format!(
                        "RUN (Dockerfile line {}) timed out after {} s and was killed",
                        run.line,
                        run.timeout.as_secs()
                    )));
                }
                if exit_code != 0 {
                    return Err(BuildError(format!(
                        "RUN (Dockerfile line {}) failed with exit code {exit_code}: {}",
                        run.line,
                        tail.text()
                    )));
                }
                return Ok(());
            }
            GuestMsg::Error { message, .. } => {
                return Err(BuildError(format!(
                    "RUN (Dockerfile line {}) could not start: {message}",
                    run.line
                )))
            }
            _ => {}
        }
    }
    Err(BuildError(format!(
        "RUN (Dockerfile line {}): the build sandbox stopped before the command ended",
        run.line
    )))
}

/// The last lines of a command's output (both streams, in arrival order).
#[derive(Default)]
struct Tail {
    lines: VecDeque<String>,
    partial: String,
}

impl Tail {
    fn push(&mut self, chunk: &[u8]) {
        self.partial.push_str(&String::from_utf8_lossy(chunk));
        while let Some(i) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=i).collect();
            self.keep(line.trim_end().to_string());
        }
    }

    fn keep(&mut self, line: String) {
        if self.lines.len() == TAIL_LINES {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    /// The kept lines joined by newlines (the partial last line included), at most 4 KiB.
    fn text(mut self) -> String {
        if !self.partial.trim().is_empty() {
            let rest = std::mem::take(&mut self.partial);
            self.keep(rest.trim_end().to_string());
        }
        let joined = Vec::from(self.lines).join("\n");
        let start = joined.len().saturating_sub(4096);
        let start = (start..joined.len())
            .find(|&i| joined.is_char_boundary(i))
            .unwrap_or(joined.len());
        if joined.is_empty() {
            "(no output)".into()
        } else {
            joined[start..].to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Tail;

    #[test]
    fn tail_keeps_the_last_lines() {
        let mut t = Tail::default();
        for i in 0..30 {
            t.push(format!("line {i}\n").as_bytes());
        }
        t.push(b"no newline");
        let text = t.text();
        assert!(text.starts_with("line 11\n"), "{text}");
        assert!(text.ends_with("line 29\nno newline"));
        assert_eq!(Tail::default().text(), "(no output)");
    }
}
