//! Reads an instance's resource use from its cgroup-v1 controllers.
//!
//! The OCI `cgroupsPath` is relative (`pandastack/<id>`), so runsc creates it under the cgroup
//! of whoever started it (the shim inherits the server's, e.g. `/process_api/<hash>` for the
//! memory controller here): each controller's directory is looked up under this process's own
//! cgroup first, then under the controller's root.

use pandastack_engine::InstanceStats;
use std::path::{Path, PathBuf};

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
const CONTROLLERS: [&str; 9] = [
    "memory", "cpu", "cpuacct", "pids", "cpuset", "devices", "freezer", "blkio", "systemd",
];

/// This process's cgroup path for controller `ctrl` (without the leading `/`).
fn own_cgroup(ctrl: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let name = if ctrl == "systemd" {
            "name=systemd"
        } else {
            ctrl
        };
        ctrls
            .split(',')
            .any(|c| c == name)
            .then(|| path.trim_start_matches('/').to_string())
    })
}

/// The directory of controller `ctrl` for instance `id`, if it exists.
fn dir(ctrl: &str, id: &str) -> Option<PathBuf> {
    let root = Path::new(CGROUP_ROOT).join(ctrl);
    let under_own = own_cgroup(ctrl)
        .filter(|o| !o.is_empty())
        .map(|o| root.join(o));
    [under_own, Some(root.clone())]
        .into_iter()
        .flatten()
        .map(|base| base.join("pandastack").join(id))
        .find(|p| p.exists())
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The `memory.usage_in_bytes` file of instance `id`'s memory cgroup (what the host's limit is
/// compared with), if the cgroup exists.
pub fn memory_usage_file(id: &str) -> Option<PathBuf> {
    dir("memory", id).map(|d| d.join("memory.usage_in_bytes"))
}

/// The number a cgroup file such as [`memory_usage_file`] holds; None when it cannot be read.
pub fn read_bytes(file: &Path) -> Option<u64> {
    read_u64(file)
}

/// RSS (memory.stat `total_rss`, falling back to `memory.usage_in_bytes`) and CPU time
/// (cpuacct.usage, ns) of the instance's cgroups. Missing files read as zero.
pub fn stats(id: &str) -> InstanceStats {
    let memory_bytes = dir("memory", id)
        .and_then(|d| {
            let rss = std::fs::read_to_string(d.join("memory.stat"))
                .ok()
                .and_then(|s| {
                    s.lines().find_map(|l| {
                        l.strip_prefix("total_rss ")
                            .and_then(|v| v.trim().parse().ok())
                    })
                });
            rss.or_else(|| read_u64(&d.join("memory.usage_in_bytes")))
        })
        .unwrap_or(0);
    let cpu_ns = dir("cpuacct", id)
        .and_then(|d| read_u64(&d.join("cpuacct.usage")))
        .unwrap_or(0);
    InstanceStats {
        memory_bytes,
        cpu_ns,
    }
}

/// Host memory the sandbox's cgroup allows beyond its `memory_mb` whatever its process count,
/// bytes: the idle sentry, gofer and stubs (~15 MiB measured), the growth of an allocation loop
/// between two looks of the guest's memory guard (up to ~1.2 MiB/ms, ~25 MiB past its mark
/// before its kill lands), and the sentry heap a burst of forks leaves behind (Go returns it
/// slowly). See [`headroom_bytes`].
pub const SENTRY_BASE_HEADROOM_BYTES: u64 = 96 * 1024 * 1024;

/// Host memory each process the sandbox may hold costs beyond what the sandbox's own use
/// shows, bytes (2 MiB): its ptrace stub process (kernel stack, page tables of the guest
/// memory it maps) and its task in the sentry's heap. Measured here (runsc 20240729, ptrace):
/// ~0.6 MiB per sleeping `sleep`, ~1.5 MiB per busy Python process of a fork loop (~200 MiB
/// outside the memory file with ~130 of them).
pub const HOST_BYTES_PER_PROCESS: u64 = 2 * 1024 * 1024;

/// Host memory the cgroup of a sandbox of `memory_mb` allows beyond its `memory_mb`, bytes
/// (issue 8 point 3): [`SENTRY_BASE_HEADROOM_BYTES`] plus [`HOST_BYTES_PER_PROCESS`] for each
/// process it may hold (`config::nproc_limit` plus the guest's `GUEST_PROCESS_RESERVE`); 480
/// MiB for 512 MiB.
///
/// runsc sets the cgroup's `memory.limit_in_bytes` to `memory_mb` and reports that as the
/// sandbox's `MemTotal`; the guest's memory guard (`pandastack_guest::memory`) kills the
/// largest process when the sandbox's own use nears `MemTotal`. The host limit is then raised
/// by this much ([`add_headroom`]) for what the sandbox's use does not show, which grows with
/// its processes: a fork loop at the process limit (128 at 512 MiB) holds ~200 MiB of host
/// memory outside the sandbox's use (measured), and a fixed 256 MiB headroom let one such loop
/// on a loaded host end the whole sandbox (CI, 2026-12-03). Only a sandbox whose use the guard
/// cannot bring down (memory held by tmpfs files, not by a process) still reaches the limit and
/// is OOM-killed whole. It is a ceiling, not a reservation: admission (`--memory-overcommit`)
/// counts `memory_mb` only.
pub fn headroom_bytes(memory_mb: u32) -> u64 {
    let processes =
        crate::config::nproc_limit(memory_mb) + pandastack_guest_protocol::GUEST_PROCESS_RESERVE;
    SENTRY_BASE_HEADROOM_BYTES + processes * HOST_BYTES_PER_PROCESS
}

/// Sets instance `id`'s memory cgroup limit to `memory_mb` plus [`headroom_bytes`] once the
/// sandbox's sentry (`runsc-sandbox`) is in it, waiting up to `wait` for that. runsc
/// writes the cgroup's limit, starts the gofer in it, then reads the limit back as the
/// sentry's `--total-memory` (the sandbox's `MemTotal`) and starts the sentry: raised any
/// earlier, the limit would be overwritten or become the sandbox's `MemTotal`.
/// Returns `Ok(false)` when no sentry appeared in a memory cgroup of `id` within `wait`.
///
/// # Errors
/// I/O errors writing `memory.limit_in_bytes`.
pub fn add_headroom(id: &str, memory_mb: u32, wait: std::time::Duration) -> std::io::Result<bool> {
    let deadline = std::time::Instant::now() + wait;
    let d = loop {
        let populated = dir("memory", id).filter(|d| holds_a_sentry(&d.join("cgroup.procs")));
        if let Some(d) = populated {
            break d;
        }
        if std::time::Instant::now() > deadline {
            return Ok(false);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    let limit = (u64::from(memory_mb) << 20).saturating_add(headroom_bytes(memory_mb));
    std::fs::write(d.join("memory.limit_in_bytes"), limit.to_string())?;
    Ok(true)
}

/// Whether the `cgroup.procs` file at `procs` lists a process whose argv[0] is
/// `runsc-sandbox` (the name runsc gives the sentry).
fn holds_a_sentry(procs: &Path) -> bool {
    std::fs::read_to_string(procs)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .any(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                c.split(|&b| b == 0)
                    .next()
                    .is_some_and(|argv0| argv0 == b"runsc-sandbox")
            })
        })
}

/// Removes the instance's cgroup directories that runsc left behind (they are empty once its
/// processes are gone; rmdir of a busy one fails harmlessly).
pub fn remove(id: &str) {
    for ctrl in CONTROLLERS {
        if let Some(d) = dir(ctrl, id) {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Sets the instance's freezer cgroup to `FROZEN` (or `THAWED`) and waits until the kernel
/// reports that state. Returns `Ok(false)` when the instance has no freezer cgroup.
///
/// # Errors
/// I/O errors writing the state, or `TimedOut` when it does not settle within 2 s.
pub fn freeze(id: &str, frozen: bool) -> std::io::Result<bool> {
    let Some(d) = dir("freezer", id) else {
        return Ok(false);
    };
    let want = if frozen { "FROZEN" } else { "THAWED" };
    std::fs::write(d.join("freezer.state"), want)?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        if std::fs::read_to_string(d.join("freezer.state"))?.trim() == want {
            return Ok(true);
        }
        if std::time::Instant::now() > deadline {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("freezer did not reach {want}"),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// True when the instance's freezer cgroup says `FROZEN` (or `FREEZING`).
pub fn is_frozen(id: &str) -> bool {
    dir("freezer", id)
        .and_then(|d| std::fs::read_to_string(d.join("freezer.state")).ok())
        .is_some_and(|s| s.trim() != "THAWED")
}

/// True when any controller still has a directory for `id` (for tests and leak checks).
pub fn exists(id: &str) -> bool {
    CONTROLLERS.iter().any(|c| dir(c, id).is_some())
}

/// Kills every process of the instance and waits up to 5 s until none is left; true when its
/// cgroup is empty (or gone). The cgroup is frozen while its task list is read and signalled,
/// so no listed pid can exit and be reused by an unrelated process in between; SIGKILL is
/// delivered when it is thawed. A freezer that does not settle (it can hang in FREEZING on
/// ptrace-stopped tasks) is given up after its first timeout, so it cannot eat the budget.
pub fn kill_all(id: &str) -> bool {
    let Some(d) = dir("pids", id) else {
        return true;
    };
    let procs = d.join("cgroup.procs");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut freezable = true;
    loop {
        if freezable && freeze(id, true).is_err() {
            freezable = false;
        }
        let pids: Vec<i32> = std::fs::read_to_string(&procs)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        for pid in &pids {
            // SAFETY: kill(2) takes no pointers; the pid was read from the instance's own
            // cgroup (frozen, when it has a working freezer, so it is still that task).
            unsafe {
                libc::kill(*pid, libc::SIGKILL);
            }
        }
        let _ = freeze(id, false);
        if pids.is_empty() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Whether the kernel's log records an OOM kill in instance `id`'s memory cgroup: the line
/// `oom-kill:constraint=CONSTRAINT_MEMCG,...,oom_memcg=<path>/pandastack/<id>,...` the
/// kernel prints when a memory cgroup's limit made it kill a process (runsc removes the
/// cgroup itself when the sandbox dies, so its `memory.oom_control` is gone by then). Reads
/// `/dev/kmsg` from its oldest record to its newest without waiting; false when it cannot
/// be read (not root, or a container without it).
pub fn killed_by_oom(id: &str) -> bool {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(mut kmsg) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
    else {
        return false;
    };
    let needle = format!("/pandastack/{id},");
    // One record per read (at most 1 KiB of text, continuation lines included).
    let mut buf = vec![0u8; 8192];
    loop {
        match kmsg.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => {
                let rec = String::from_utf8_lossy(&buf[..n]);
                let msg = rec.split_once(';').map_or(&*rec, |(_, m)| m);
                if msg.starts_with("oom-kill:") && oom_memcg_matches(msg, &needle) {
                    return true;
                }
            }
            // A record overwritten while reading: the next read returns the next one.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(_) => return false, // EAGAIN: no more records
        }
    }
}

/// Whether an `oom-kill:` record's `oom_memcg=` field ends in `needle` (`/pandastack/<id>,`).
fn oom_memcg_matches(msg: &str, needle: &str) -> bool {
    msg.split("oom_memcg=").nth(1).is_some_and(|rest| {
        rest.split_once(',')
            .is_some_and(|(memcg, _)| format!("{memcg},").ends_with(needle))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oom_record_names_its_instance_by_memory_cgroup() {
        // The record this kernel printed when a sandbox went over its 512 MiB (dmesg).
        let msg = "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=ps-045a,mems_allowed=0,\
                   oom_memcg=/process_api/6d37/pandastack/ps-045a,task_memcg=/process_api/6d37/pandastack/ps-045a,task=exe,pid=2282055,uid=0";
        assert!(oom_memcg_matches(msg, "/pandastack/ps-045a,"));
        assert!(!oom_memcg_matches(msg, "/pandastack/ps-04,"));
        assert!(!oom_memcg_matches(msg, "/pandastack/ps-045ab,"));
        assert!(!oom_memcg_matches(
            "oom-kill:constraint=CONSTRAINT_NONE",
            "/pandastack/ps-045a,"
        ));
    }

    #[test]
    fn reading_the_kernel_log_ends_without_waiting() {
        // No instance of this name ever ran: the whole log is read and nothing matches.
        let started = std::time::Instant::now();
        assert!(!killed_by_oom("ps-never-ran"));
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn headroom_grows_with_the_processes_a_sandbox_may_hold() {
        const MIB: u64 = 1024 * 1024;
        // 512 MiB: 128 user processes + 64 for the guest, 2 MiB each, over the base.
        assert_eq!(headroom_bytes(512), 480 * MIB);
        // The process limit's floor (64) holds below 256 MiB.
        assert_eq!(headroom_bytes(128), headroom_bytes(256));
        assert_eq!(headroom_bytes(4096), (96 + 2 * (1024 + 64)) * MIB);
        // Its ceiling (1024 processes) holds from 4 GiB on.
        assert_eq!(headroom_bytes(16384), headroom_bytes(4096));
    }
}
