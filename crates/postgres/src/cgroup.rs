//! The cgroup of one cluster: its memory limit (the size tier) and CPU quota, and the list of
//! its processes (so a crashed postmaster's orphaned backends can be found and killed).
//!
//! cgroup v1 (this host: one hierarchy per controller): `memory` and `cpu` directories
//! `<own>/pandastack-db/<id>` under the server's own cgroup of each controller, as runsc does
//! for sandboxes. A running cluster's cgroup is found from its postmaster's
//! `/proc/<pid>/cgroup`, so a server restarted from elsewhere still finds it. cgroup v2 (a
//! unified hierarchy at `/sys/fs/cgroup`): `pandastack-db/<id>` at the root, the only place
//! where controllers can be delegated without moving the server itself.
//!
//! The postmaster joins before it runs: the spawner writes `0` to each `cgroup.procs` from
//! the child between fork and exec ([`ClusterCgroup::join_fds`]), so every process it forks
//! is inside from the start.

use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

const ROOT: &str = "/sys/fs/cgroup";
const GROUP: &str = "pandastack-db";

/// The cgroup directories of one cluster (one per controller on v1, one on v2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterCgroup {
    dirs: Vec<PathBuf>,
    v2: bool,
}

fn is_v2() -> bool {
    Path::new(ROOT).join("cgroup.controllers").exists()
}

/// The path of process `pid`'s cgroup for v1 controller `ctrl` (or v2 when `ctrl` is empty).
fn cgroup_of(pid: &str, ctrl: &str) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = if ctrl.is_empty() {
            ctrls.is_empty()
        } else {
            ctrls.split(',').any(|c| c == ctrl)
        };
        hit.then(|| path.trim_start_matches('/').to_string())
    })
}

impl ClusterCgroup {
    /// Where a new cluster `id` gets its cgroup (see the module docs).
    pub fn for_new(id: &str) -> Self {
        if is_v2() {
            return ClusterCgroup {
                dirs: vec![Path::new(ROOT).join(GROUP).join(id)],
                v2: true,
            };
        }
        let dirs = ["memory", "cpu"]
            .iter()
            .map(|ctrl| {
                let own = cgroup_of("self", ctrl).unwrap_or_default();
                Path::new(ROOT).join(ctrl).join(own).join(GROUP).join(id)
            })
            .collect();
        ClusterCgroup { dirs, v2: false }
    }

    /// The cgroup process `pid` (a running postmaster) is in, when it is one of ours.
    pub fn of_pid(pid: i32) -> Option<Self> {
        let pid = pid.to_string();
        if is_v2() {
            let p = cgroup_of(&pid, "")?;
            return p.contains(GROUP).then(|| ClusterCgroup {
                dirs: vec![Path::new(ROOT).join(p)],
                v2: true,
            });
        }
        let dirs: Vec<PathBuf> = ["memory", "cpu"]
            .iter()
            .filter_map(|ctrl| {
                let p = cgroup_of(&pid, ctrl)?;
                p.contains(GROUP)
                    .then(|| Path::new(ROOT).join(ctrl).join(p))
            })
            .collect();
        (!dirs.is_empty()).then_some(ClusterCgroup { dirs, v2: false })
    }

    /// Creates the directories (if needed) and sets the limits: `memory_mb` MiB for all
    /// processes together, `cpus` whole CPUs of time per period.
    ///
    /// # Errors
    /// I/O errors (no such controller, or not permitted).
    pub fn create(&self, memory_mb: u32, cpus: u32) -> io::Result<()> {
        let bytes = u64::from(memory_mb) * 1024 * 1024;
        let quota = u64::from(cpus.max(1)) * 100_000;
        if self.v2 {
            let group = Path::new(ROOT).join(GROUP);
            fs::create_dir_all(&group)?;
            for parent in [Path::new(ROOT), group.as_path()] {
                fs::write(parent.join("cgroup.subtree_control"), "+memory +cpu")?;
            }
            let d = &self.dirs[0];
            fs::create_dir_all(d)?;
            fs::write(d.join("memory.max"), bytes.to_string())?;
            fs::write(d.join("cpu.max"), format!("{quota} 100000"))?;
            return Ok(());
        }
        for d in &self.dirs {
            fs::create_dir_all(d)?;
            if d.starts_with(Path::new(ROOT).join("memory")) {
                fs::write(d.join("memory.limit_in_bytes"), bytes.to_string())?;
            } else {
                fs::write(d.join("cpu.cfs_period_us"), "100000")?;
                fs::write(d.join("cpu.cfs_quota_us"), quota.to_string())?;
            }
        }
        Ok(())
    }

    /// Each directory's `cgroup.procs`, open for writing: the child writes `0` to each between
    /// fork and exec to join.
    ///
    /// # Errors
    /// I/O errors.
    pub fn join_fds(&self) -> io::Result<Vec<OwnedFd>> {
        self.dirs
            .iter()
            .map(|d| {
                fs::OpenOptions::new()
                    .write(true)
                    .open(d.join("cgroup.procs"))
                    .map(OwnedFd::from)
            })
            .collect()
    }

    /// Pids of every process in the cgroup.
    pub fn pids(&self) -> Vec<i32> {
        let mut out: Vec<i32> = self
            .dirs
            .iter()
            .filter_map(|d| fs::read_to_string(d.join("cgroup.procs")).ok())
            .flat_map(|t| {
                t.lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Sends SIGKILL to every process in the cgroup.
    pub fn kill_all(&self) {
        for pid in self.pids() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    /// Memory charged to the cgroup (RSS and page cache), bytes.
    pub fn memory_bytes(&self) -> Option<u64> {
        let file = if self.v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        };
        self.dirs
            .iter()
            .find_map(|d| fs::read_to_string(d.join(file)).ok())
            .and_then(|s| s.trim().parse().ok())
    }

    /// Removes the directories (they must be empty of processes; a busy one stays).
    pub fn remove(&self) {
        for d in &self.dirs {
            let _ = fs::remove_dir(d);
        }
    }

    /// True when any directory exists (for leak checks).
    pub fn exists(&self) -> bool {
        self.dirs.iter().any(|d| d.exists())
    }
}
